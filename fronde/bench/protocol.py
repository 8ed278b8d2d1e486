"""The protocol: every arm on fresh servers, the whole workload in one order, arms rotated.

A **block** is one arm × repetition × workload (× level, for an experiment with
several): the arm is started on fresh servers, warmed with one neutral 4-token
request (pages and threads, not n-gram pools), primed if it is a warm arm, sent
every item of the workload in file order (one at a time, or as the level says), and
stopped. Arm order rotates across repetitions (rep r starts at
arm r mod n), so a slow drift of a shared machine falls on every arm alike.

**Interleaved** (``Plan.interleave``, the verdict's default for workload A): all arms
of a repetition are started on fresh servers at once, and each item is sent to every
arm in turn (the order rotated by item and repetition) before the next item. Every
arm still sees the same items in the same order on servers of its own, so what its
n-gram pools and prompt caches hold is what it would hold in a block of its own;
but an item's measurements across arms lie seconds apart instead of minutes, so a
drift of the machine's speed (measured up to ±14 % between blocks on an H200,
``results/verdict-gpu-*``) no longer falls between the arms compared. Blocks keep
their keys and records; one that fails to start is recorded failed, the rest run.

Workload A measures a first encounter: no server has seen any prompt. Workload B is
a session: cross-request memory is legitimate, and the whole session runs on the
block's one set of servers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fronde.bench.arms import Arm
from fronde.bench.passes import Timed
from fronde.bench.workloads import Form, Item, Workload

__all__ = [
    "RESUMED",
    "Level",
    "Plan",
    "Progress",
    "Status",
    "block_key",
    "planned_requests",
    "schedule",
]

WARM_ITEM = Item(
    id="warm-up",
    domain="warm-up",
    prompt="A short note about the weather:",
    messages=({"role": "user", "content": "Say hello."},),
)
"""A neutral request that pages in the model and starts the threads, any vocabulary."""


@dataclass(frozen=True)
class Level:
    """How a block sends its items.

    At most ``concurrency`` in flight, launches at least ``gap_s`` seconds apart,
    streamed or not. The default sends one after the other, streamed. With ``timed``,
    ``concurrency`` closed-loop clients over a warm-up and a window instead
    (:func:`~fronde.bench.passes.timed_pass`), streamed, no gap.
    """

    concurrency: int = 1
    gap_s: float = 0.0
    stream: bool = True
    timed: Timed | None = None

    @property
    def tag(self) -> str:
        """e.g. ``c8``, ``c24-gap0.25-plain``; empty for one client, streamed, no gap."""
        alone = (self.concurrency, self.gap_s, self.stream) == (1, 0.0, True)
        parts = [] if alone else [f"c{self.concurrency}"]
        parts += [f"gap{self.gap_s:g}"] if self.gap_s else []
        parts += [] if self.stream else ["plain"]
        return "-".join(parts)


@dataclass(frozen=True)
class Plan:
    """What one run measures.

    Attributes:
        workloads: the workloads, each run in its own blocks.
        arms: the arms, in table order.
        session_arms: the arms of a session workload (``agent-sessions``); a session
            is long, and a warm arm's priming would not be new to it.
        reps: repetitions of a first-encounter workload (each block once per repetition).
        session_reps: repetitions of a session workload.
        form: ``completion`` (base model) or ``chat`` (instruct model).
        max_tokens: token budget per request (an item may set its own).
        priming: the workload a warm arm is sent first (not recorded as samples).
        levels: how a block sends its items, each level a block of its own on fresh
            servers (a load or latency experiment); the default sends them one at a time.
        interleave: run a first-encounter workload's arms of one repetition side by
            side, item by item (see the module docstring); sessions and non-default
            levels always run block by block.
    """

    workloads: tuple[Workload, ...]
    arms: tuple[Arm, ...]
    session_arms: tuple[Arm, ...]
    reps: int
    session_reps: int
    form: Form
    max_tokens: int
    priming: Workload
    levels: tuple[Level, ...] = (Level(),)
    interleave: bool = False

    @classmethod
    def single(
        cls,
        workload: Workload,
        arms: Sequence[Arm],
        reps: int,
        form: Form,
        max_tokens: int,
        levels: tuple[Level, ...] = (Level(),),
    ) -> Plan:
        """One workload, no session, no priming: every experiment but the verdict."""
        return cls(
            (workload,), tuple(arms), (), reps, 0, form, max_tokens, Workload("none", ()), levels
        )


def schedule(plan: Plan, rep: int | None = None) -> list[tuple[int, Workload, Arm]]:
    """Blocks in run order: per repetition and workload, the arms rotated by the repetition.

    Args:
        plan: what the run measures.
        rep: only this repetition's blocks (all when None).
    """
    out: list[tuple[int, Workload, Arm]] = []
    reps = range(max(plan.reps, plan.session_reps)) if rep is None else (rep,)
    for k in reps:
        for w in plan.workloads:
            arms = plan.session_arms if w.sessions else plan.arms
            if k < (plan.session_reps if w.sessions else plan.reps) and arms:
                out += [(k, w, arms[(k + i) % len(arms)]) for i in range(len(arms))]
    return out


def block_key(rep: int, workload: Workload, arm: Arm, level: Level = Level()) -> str:
    """The block's key in the store, e.g. ``first-encounter|router|2``, ``load|mod|0|c2``."""
    return f"{workload.name}|{arm.name}|{rep}" + (f"|{level.tag}" if level.tag else "")


RESUMED = "done in an earlier run"
"""How a block that a resumed run skips is reported."""

Progress = Callable[[str, int], None]
"""Called with a line to show (or "") and how many requests just ended."""

Status = Callable[[str], None]
"""Called with what runs now, e.g. ``first-encounter, rep 1 of 2: starting arm 3 of 9, mod``:
the minutes a repetition spends starting servers show as what they are."""


def planned_requests(plan: Plan) -> int:
    """Requests the plan sends, for a progress bar (priming and warm-up not counted)."""
    return sum(len(w.items) for _, w, _ in schedule(plan)) * len(plan.levels)
