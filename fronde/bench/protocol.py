"""The protocol: every arm on fresh servers, the whole workload in one order, arms rotated.

A **block** is one arm × repetition × workload (× level): the arm is started on fresh
servers, warmed with one neutral 4-token request, primed if it is a warm arm, sent
every item in file order (one at a time, or as the level says), and stopped.
Repetition r starts at arm r mod n, so a slow drift falls on every arm alike.
**Interleaved** (the verdict's default for workload A): a repetition's arms are up at
once and each item goes to every arm in turn, so a drift of the machine (±14 % between
blocks on an H200, ``results/verdict-gpu-*``) no longer falls between the arms.
Workload B is a session: cross-request memory is legitimate, one set of servers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fronde.bench.arms import Arm
from fronde.bench.passes import Timed
from fronde.bench.workloads import Form, Item, Workload

__all__ = [
    "RESUMED", "Level", "Plan", "Progress", "Status", "block_key", "planned_requests",
    "schedule",
]  # fmt: skip

WARM_ITEM = Item(
    id="warm-up",
    domain="warm-up",
    prompt="A short note about the weather:",
    messages=({"role": "user", "content": "Say hello."},),
)
"""A neutral request that pages in the model and starts the threads, any vocabulary."""


@dataclass(frozen=True)
class Level:
    """How a block sends its items: ``concurrency`` in flight, ``gap_s`` apart, streamed?

    With ``timed``, closed-loop clients (:func:`~fronde.bench.passes.timed_pass`).
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
        arms, session_arms: the arms of a first-encounter workload, of a session one.
        reps, session_reps: their repetitions.
        form: ``completion`` (base model), ``chat`` (instruct model) or ``native``.
        max_tokens: token budget per request (an item may set its own).
        priming: the workload a warm arm is sent first (not recorded).
        levels: each level a block of its own on fresh servers.
        interleave: a first-encounter workload's arms of one repetition side by side.
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
    """``(rep, workload, arm)`` blocks in run order, arms rotated (only ``rep``'s if given)."""
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
"""Called with what runs now, e.g. ``first-encounter, rep 1 of 2: starting arm 3 of 9, mod``."""


def planned_requests(plan: Plan) -> int:
    """Requests the plan sends, for a progress bar (priming and warm-up not counted)."""
    return sum(len(w.items) for _, w, _ in schedule(plan)) * len(plan.levels)
