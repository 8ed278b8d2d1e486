"""The protocol: every arm on fresh servers, the whole workload in one order, arms rotated.

A **block** is one arm × repetition × workload (× level, for an experiment with
several): the arm is started on fresh servers, warmed with one neutral 4-token
request (pages and threads, not n-gram pools), primed if it is a warm arm, sent
every item of the workload in file order (one at a time, or as the level says), and
stopped. Arm order rotates across repetitions (rep r starts at
arm r mod n), so a slow drift of a shared machine falls on every arm alike.

Workload A measures a first encounter: no server has seen any prompt. Workload B is
a session: cross-request memory is legitimate, and the whole session runs on the
block's one set of servers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fronde.bench.arms import Arm, Target, started
from fronde.bench.client import bench_http, send
from fronde.bench.store import Store
from fronde.bench.workloads import Form, Item, Workload
from fronde.config import Settings
from fronde.errors import FrondeError

__all__ = [
    "RESUMED",
    "Level",
    "Plan",
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
    streamed or not. The default sends one after the other, streamed.
    """

    concurrency: int = 1
    gap_s: float = 0.0
    stream: bool = True

    @property
    def tag(self) -> str:
        """e.g. ``c8``, ``c24-gap0.25-plain``; empty for the default."""
        parts = [f"c{self.concurrency}"] if self != Level() else []
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


def schedule(plan: Plan) -> list[tuple[int, Workload, Arm]]:
    """Blocks in run order: per repetition and workload, the arms rotated by the repetition."""
    out: list[tuple[int, Workload, Arm]] = []
    for rep in range(max(plan.reps, plan.session_reps)):
        for w in plan.workloads:
            arms = plan.session_arms if w.sessions else plan.arms
            if rep < (plan.session_reps if w.sessions else plan.reps) and arms:
                out += [(rep, w, arms[(rep + i) % len(arms)]) for i in range(len(arms))]
    return out


def block_key(rep: int, workload: Workload, arm: Arm, level: Level = Level()) -> str:
    """The block's key in the store, e.g. ``first-encounter|router|2``, ``load|mod|0|c2``."""
    return f"{workload.name}|{arm.name}|{rep}" + (f"|{level.tag}" if level.tag else "")


RESUMED = "done in an earlier run"
"""How a block that a resumed run skips is reported."""

Progress = Callable[[str, int], None]
"""Called with a line to show (or "") and how many requests just ended."""


async def _block(
    http: httpx.AsyncClient,
    plan: Plan,
    target: Target,
    arm: Arm,
    workload: Workload,
    level: Level,
    emit: Callable[[dict[str, Any]], None],
    progress: Progress,
) -> None:
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
    await _pass(http, plan, target, workload, level, emit, progress)


async def _pass(
    http: httpx.AsyncClient,
    plan: Plan,
    target: Target,
    workload: Workload,
    level: Level,
    emit: Callable[[dict[str, Any]], None],
    progress: Progress,
) -> None:
    """Send every item of ``workload`` as ``level`` says; one record per request."""
    gate = asyncio.Semaphore(level.concurrency)
    t_start = time.perf_counter()

    async def one(order: int, item: Item) -> None:
        rec: dict[str, Any] = {"item": item.id, "domain": item.domain, "order": order}
        rec |= {"level": level.tag, "t0": round(time.perf_counter() - t_start, 4)}
        body = target.body(item, plan.form, plan.max_tokens) | {"stream": level.stream}
        if not level.stream:
            body.pop("stream_options")
        try:
            sample = await send(http, target.base_url, plan.form, body, target.headers)
            emit({**rec, "ok": True, **sample.record()})
        except (FrondeError, httpx.HTTPError) as exc:
            emit({**rec, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        finally:
            gate.release()
        progress("", 1)

    tasks: list[asyncio.Task[None]] = []
    for order, item in enumerate(workload.items):
        await gate.acquire()
        tasks.append(asyncio.create_task(one(order, item)))
        if level.gap_s:
            await asyncio.sleep(level.gap_s)
    await asyncio.gather(*tasks)


async def run_plan(
    plan: Plan,
    settings: Settings,
    config_file: Path | None,
    store: Store,
    log_dir: Path,
    progress: Progress,
) -> None:
    """Run every block of ``plan`` not already done in ``store``; append its records.

    Each level of a plan is a block of its own, on fresh servers: a level sent to
    servers that had answered the same prompts at another level found them in the
    prompt cache and in ngram-mod's pool (a trial measured c = 2 at twice c = 1's
    aggregate speed that way). A block whose arm fails to start, or whose requests
    fail, is recorded with the error and the run goes on (its samples count only if
    the block ended ok).
    """
    done = store.done_blocks()

    async def run_block(rep: int, workload: Workload, arm: Arm, level: Level) -> None:
        """Start the arm on fresh servers, run one level of the workload, record the block."""
        key = block_key(rep, workload, arm, level)
        head = {"block": key, "block_id": uuid.uuid4().hex[:12], "workload": workload.name}
        head |= {"arm": arm.name, "rep": rep}

        def emit(rec: dict[str, Any]) -> None:
            store.append({"type": "sample", **head, **rec})

        t0 = time.monotonic()
        try:
            async with started(arm, settings, config_file, log_dir / key.replace("|", "-")) as t:
                await _block(http, plan, t, arm, workload, level, emit, progress)
                # The router's own account (EMAs, quarantines, decisions) as it ended.
                state: dict[str, Any] | None = None
                if arm.routed:
                    state = (await http.get(f"{t.base_url}/fronde/v1/router")).json()
        except (FrondeError, httpx.HTTPError, OSError) as exc:
            store.append({"type": "block", **head, "ok": False, "error": str(exc)[:500]})
            progress(f"{key}: FAILED ({exc})", 0)
            return
        end = {"type": "block", **head, "ok": True, "s": round(time.monotonic() - t0)}
        store.append(end | ({"router": state} if state else {}))
        progress(f"{key}: {time.monotonic() - t0:.0f} s", 0)

    async with bench_http() as http:
        for rep, workload, arm in schedule(plan):
            for level in plan.levels:
                key = block_key(rep, workload, arm, level)
                if key in done:
                    progress(f"{key}: {RESUMED}", len(workload.items))
                    continue
                await run_block(rep, workload, arm, level)


def planned_requests(plan: Plan) -> int:
    """Requests the plan sends, for a progress bar (priming and warm-up not counted)."""
    return sum(len(w.items) for _, w, _ in schedule(plan)) * len(plan.levels)
