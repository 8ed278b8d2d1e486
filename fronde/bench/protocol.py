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

import contextlib
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fronde.bench.arms import Arm, Target, started
from fronde.bench.client import bench_http, send
from fronde.bench.passes import Timed, item_body, request_sample, sample_head, send_each, timed_pass
from fronde.bench.store import Store
from fronde.bench.workloads import Form, Item, Workload
from fronde.config import Settings
from fronde.errors import FrondeError

__all__ = [
    "RESUMED",
    "Level",
    "Plan",
    "Progress",
    "Status",
    "block_key",
    "planned_requests",
    "run_plan",
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


def _doing(plan: Plan, rep: int, workload: Workload, level: Level = Level()) -> str:
    """The head of a status line: workload, repetition of all, level if not the default."""
    reps = plan.session_reps if workload.sessions else plan.reps
    return f"{workload.name}{' ' + level.tag if level.tag else ''}, rep {rep + 1} of {reps}"


def _silent(what: str) -> None:
    """A :data:`Status` that shows nothing."""


def _arm_line(arm: Arm) -> str:
    """``mod (Fronde, ngram-mod forced)``: the arm's name and what serves it."""
    return f"{arm.name} ({arm.about})" if arm.about else arm.name


async def _prepare(http: httpx.AsyncClient, plan: Plan, target: Target, arm: Arm) -> None:
    """Warm a started arm with one neutral request; prime it if it is a warm arm."""
    await send(
        http,
        target.base_url,
        plan.form,
        target.body(WARM_ITEM, plan.form, 4),
        target.headers,
    )
    if arm.priming:
        for item in plan.priming.items:
            body = target.body(item, plan.form, plan.max_tokens)
            await send(http, target.base_url, plan.form, body, target.headers)


async def run_plan(
    plan: Plan,
    settings: Settings,
    config_file: Path | None,
    store: Store,
    log_dir: Path,
    progress: Progress,
    status: Status | None = None,
    rep: int | None = None,
) -> None:
    """Run every block of ``plan`` not already done in ``store``; append its records.

    With ``rep``, only that repetition's blocks (``bench load`` runs its static and
    router plans a repetition at a time, bracketed: :func:`~fronde.bench.load.bracketed`).

    ``progress`` hears of every request that ends and every block that ends;
    ``status`` of each step between (an arm starting, a warm arm priming, the
    requests being sent).

    Each level of a plan is a block of its own, on fresh servers: a level sent to
    servers that had answered the same prompts at another level found them in the
    prompt cache and in ngram-mod's pool (a trial measured c = 2 at twice c = 1's
    aggregate speed that way). A block whose arm fails to start, or whose requests
    fail, is recorded with the error and the run goes on (its samples count only if
    the block ended ok).
    """
    done = store.done_blocks()
    say: Status = status or _silent

    def head_of(rep: int, workload: Workload, arm: Arm, level: Level) -> dict[str, Any]:
        key = block_key(rep, workload, arm, level)
        head = {"block": key, "block_id": uuid.uuid4().hex[:12], "workload": workload.name}
        return head | {"arm": arm.name, "rep": rep}

    def failed(head: dict[str, Any], exc: BaseException) -> None:
        store.append({"type": "block", **head, "ok": False, "error": str(exc)[:500]})
        progress(f"{head['block']}: FAILED ({exc})", 0)

    async def ended(head: dict[str, Any], arm: Arm, target: Target, t0: float) -> None:
        # The router's own account (EMAs, quarantines, decisions) as it ended.
        state: dict[str, Any] | None = None
        if arm.routed:
            state = (await http.get(f"{target.base_url}/fronde/v1/router")).json()
        end = {"type": "block", **head, "ok": True, "s": round(time.monotonic() - t0)}
        store.append(end | ({"router": state} if state else {}))
        progress(f"{head['block']}: {time.monotonic() - t0:.0f} s", 0)

    def logs(head: dict[str, Any]) -> Path:
        return log_dir / str(head["block"]).replace("|", "-")

    async def run_block(rep: int, workload: Workload, arm: Arm, level: Level) -> None:
        """Start the arm on fresh servers, run one level of the workload, record the block."""
        head = head_of(rep, workload, arm, level)

        def emit(rec: dict[str, Any]) -> None:
            store.append({"type": "sample", **head, **rec})

        t0 = time.monotonic()
        doing = _doing(plan, rep, workload, level)
        try:
            say(f"{doing}: starting {_arm_line(arm)}")
            async with started(arm, settings, config_file, logs(head)) as t:
                if arm.priming:
                    say(f"{doing}: priming {arm.name} ({len(plan.priming.items)} requests)")
                await _prepare(http, plan, t, arm)
                what = "steps" if workload.sessions else "requests"
                timed = level.timed
                say(
                    f"{doing}: {arm.name}, {len(workload.items)} {what}"
                    if timed is None
                    else f"{doing}: {arm.name}, {timed.warmup_s:g} s + {timed.window_s:g} s"
                )
                if level.timed is None:
                    how = (level.tag, level.gap_s, level.stream)
                    c = level.concurrency
                    await send_each(
                        http, t, plan.form, plan.max_tokens, workload, c, how, emit, progress
                    )
                else:
                    await timed_pass(
                        t,
                        plan.form,
                        plan.max_tokens,
                        workload,
                        level.concurrency,
                        level.timed,
                        level=level.tag,
                        pin=arm.pin,
                        emit=emit,
                    )
                    progress("", len(workload.items))  # a timed block counts as its items
                await ended(head, arm, t, t0)
        except (FrondeError, httpx.HTTPError, OSError) as exc:
            failed(head, exc)

    async def run_side_by_side(rep: int, workload: Workload, arms: list[Arm]) -> None:
        """Every arm of ``arms`` on fresh servers at once, each item sent to each in turn."""
        t0 = time.monotonic()
        heads = {a.name: head_of(rep, workload, a, Level()) for a in arms}
        doing = _doing(plan, rep, workload)
        async with contextlib.AsyncExitStack() as stack:
            live: list[tuple[Arm, Target]] = []
            for k, arm in enumerate(arms, 1):
                try:
                    say(f"{doing}: starting arm {k} of {len(arms)}, {_arm_line(arm)}")
                    t = await stack.enter_async_context(
                        started(arm, settings, config_file, logs(heads[arm.name]))
                    )
                    if arm.priming:
                        n = len(plan.priming.items)
                        say(f"{doing}: priming {arm.name} ({n} requests)")
                    await _prepare(http, plan, t, arm)
                    live.append((arm, t))
                except (FrondeError, httpx.HTTPError, OSError) as exc:
                    failed(heads[arm.name], exc)
            t_start = time.perf_counter()
            n, arms_up = len(workload.items), f"{len(live)} arm{'s' * (len(live) != 1)}"
            say(f"{doing}: {n} prompts, each sent to the {arms_up} in turn")
            for order, item in enumerate(workload.items):
                for j in range(len(live)):
                    arm, t = live[(order + rep + j) % len(live)]
                    rec = sample_head(item, order, "", t_start)
                    body = item_body(t, item, plan.form, plan.max_tokens)
                    sample = await request_sample(http, t, plan.form, body, rec)
                    store.append({"type": "sample", **heads[arm.name], **sample})
                    progress("", 1)
            for arm, t in live:
                try:
                    await ended(heads[arm.name], arm, t, t0)
                except (FrondeError, httpx.HTTPError, OSError) as exc:
                    failed(heads[arm.name], exc)

    async with bench_http() as http:
        if plan.interleave and plan.levels == (Level(),):
            for k, workload, arms in _groups(plan):
                if rep is not None and k != rep:
                    continue
                todo = [a for a in arms if block_key(k, workload, a) not in done]
                for a in arms:
                    if a not in todo:
                        progress(f"{block_key(k, workload, a)}: {RESUMED}", len(workload.items))
                if not todo:
                    continue
                if workload.sessions:
                    for arm in todo:
                        await run_block(k, workload, arm, Level())
                else:
                    await run_side_by_side(k, workload, todo)
            return
        for k, workload, arm in schedule(plan, rep):
            for level in plan.levels:
                key = block_key(k, workload, arm, level)
                if key in done:
                    progress(f"{key}: {RESUMED}", len(workload.items))
                    continue
                await run_block(k, workload, arm, level)


def _groups(plan: Plan) -> list[tuple[int, Workload, list[Arm]]]:
    """:func:`schedule`'s blocks grouped by (repetition, workload), arms in run order."""
    out: list[tuple[int, Workload, list[Arm]]] = []
    for rep, workload, arm in schedule(plan):
        if out and out[-1][0] == rep and out[-1][1] is workload:
            out[-1][2].append(arm)
        else:
            out.append((rep, workload, [arm]))
    return out


def planned_requests(plan: Plan) -> int:
    """Requests the plan sends, for a progress bar (priming and warm-up not counted)."""
    return sum(len(w.items) for _, w, _ in schedule(plan)) * len(plan.levels)
