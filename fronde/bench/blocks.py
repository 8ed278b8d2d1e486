"""Running a plan: each block on fresh servers, or a repetition's arms side by side.

:func:`run_plan` runs every block of a :class:`~fronde.bench.protocol.Plan` not already
done in the store and appends its records: a block's samples, then its end (with a
routed arm's own account of the router) or its failure; the run goes on after one.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import httpx

from fronde.bench.arms import Arm, Target, started
from fronde.bench.passes import item_body, request_sample, sample_head, send_each, timed_pass
from fronde.bench.protocol import (
    RESUMED,
    WARM_ITEM,
    Level,
    Plan,
    Progress,
    Status,
    block_key,
    schedule,
)
from fronde.bench.store import Store
from fronde.bench.timed_client import bench_http, send
from fronde.bench.workloads import Workload
from fronde.config import Settings
from fronde.errors import FrondeError

__all__ = ["run_plan"]

BLOCK_ERRORS = (FrondeError, httpx.HTTPError, OSError)
"""What fails a block (recorded, the run goes on); anything else is a bug and stops it."""


_ONE_AT_A_TIME = Level()


class BlockHead(TypedDict):
    """The fields every record of a block carries: its key, a fresh id, workload, arm, rep."""

    block: str
    block_id: str
    workload: str
    arm: str
    rep: int


def _doing(plan: Plan, rep: int, workload: Workload, level: Level = _ONE_AT_A_TIME) -> str:
    """The head of a status line: workload, repetition of all, level if not the default."""
    reps = plan.session_reps if workload.sessions else plan.reps
    return f"{workload.name}{' ' + level.tag if level.tag else ''}, rep {rep + 1} of {reps}"


def _silent(what: str) -> None:
    """A :data:`Status` that shows nothing."""


def _arm_line(arm: Arm) -> str:
    """``mod (Fronde, ngram-mod forced)``: the arm's name and what serves it."""
    return f"{arm.name} ({arm.about})" if arm.about else arm.name


def _groups(plan: Plan) -> list[tuple[int, Workload, list[Arm]]]:
    """:func:`schedule`'s blocks grouped by (repetition, workload), arms in run order."""
    out: list[tuple[int, Workload, list[Arm]]] = []
    for rep, workload, arm in schedule(plan):
        if out and out[-1][0] == rep and out[-1][1] is workload:
            out[-1][2].append(arm)
        else:
            out.append((rep, workload, [arm]))
    return out


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

    With ``rep``, only that repetition's blocks. ``progress`` hears of every request
    and block that ends, ``status`` of each step between. Each level is a block on
    fresh servers (servers that had answered the same prompts at another level found
    them in the prompt cache and ngram-mod's pool: c = 2 read twice c = 1 that way).
    """
    done = store.done_blocks()
    async with bench_http() as http:
        run = _Run(plan, settings, config_file, store, log_dir, progress, status or _silent, http)
        if plan.interleave and plan.levels == (Level(),):
            await run.interleaved(done, rep)
        else:
            await run.block_by_block(done, rep)


@dataclass
class _Run:
    """One :func:`run_plan` call: its plan, where it writes, what it tells, its client."""

    plan: Plan
    settings: Settings
    config_file: Path | None
    store: Store
    log_dir: Path
    progress: Progress
    say: Status
    http: httpx.AsyncClient

    async def block_by_block(self, done: set[str], rep: int | None) -> None:
        """Every (repetition, workload, arm, level) block in turn, skipping those done."""
        for k, workload, arm in schedule(self.plan, rep):
            for level in self.plan.levels:
                key = block_key(k, workload, arm, level)
                if key in done:
                    self.progress(f"{key}: {RESUMED}", len(workload.items))
                    continue
                await self.run_block(k, workload, arm, level)

    async def interleaved(self, done: set[str], rep: int | None) -> None:
        """A repetition's arms side by side; a session workload's still block by block."""
        for k, workload, arms in _groups(self.plan):
            if rep is not None and k != rep:
                continue
            todo = [a for a in arms if block_key(k, workload, a) not in done]
            for a in arms:
                if a not in todo:
                    key = block_key(k, workload, a)
                    self.progress(f"{key}: {RESUMED}", len(workload.items))
            if not todo:
                continue
            if workload.sessions:
                for arm in todo:
                    await self.run_block(k, workload, arm, Level())
            else:
                await self.run_side_by_side(k, workload, todo)

    def head_of(self, rep: int, workload: Workload, arm: Arm, level: Level) -> BlockHead:
        """The head of a block's records (:class:`BlockHead`), with a fresh id."""
        key = block_key(rep, workload, arm, level)
        block_id = uuid.uuid4().hex[:12]
        return BlockHead(
            block=key, block_id=block_id, workload=workload.name, arm=arm.name, rep=rep
        )

    def failed(self, head: BlockHead, exc: BaseException) -> None:
        """Record the block as failed, with its error."""
        self.store.append({"type": "block", **head, "ok": False, "error": str(exc)[:500]})
        self.progress(f"{head['block']}: FAILED ({exc})", 0)

    async def ended(self, head: BlockHead, arm: Arm, target: Target, t0: float) -> None:
        """Record the block as ended ok, with the router's own account if it routed."""
        # The router's own account (EMAs, quarantines, decisions) as it ended.
        state: dict[str, Any] | None = None
        if arm.routed:
            state = (await self.http.get(f"{target.base_url}/fronde/v1/router")).json()
        end = {"type": "block", **head, "ok": True, "s": round(time.monotonic() - t0)}
        self.store.append(end | ({"router": state} if state else {}))
        self.progress(f"{head['block']}: {time.monotonic() - t0:.0f} s", 0)

    async def prepare(self, doing: str, target: Target, arm: Arm) -> None:
        """Warm a started arm with one neutral request; prime it if it is a warm arm."""
        plan, form = self.plan, self.plan.form
        if arm.priming:
            self.say(f"{doing}: priming {arm.name} ({len(plan.priming.items)} requests)")
        await send(
            self.http, target.base_url, form, target.body(WARM_ITEM, form, 4), target.headers
        )
        for item in plan.priming.items if arm.priming else ():
            body = target.body(item, form, plan.max_tokens)
            await send(self.http, target.base_url, form, body, target.headers)

    def logs(self, head: BlockHead) -> Path:
        """The folder for the servers' logs of a block."""
        return self.log_dir / head["block"].replace("|", "-")

    async def run_block(self, rep: int, workload: Workload, arm: Arm, level: Level) -> None:
        """Start the arm on fresh servers, run one level of the workload, record the block."""
        head = self.head_of(rep, workload, arm, level)
        t0 = time.monotonic()
        doing = _doing(self.plan, rep, workload, level)
        try:
            self.say(f"{doing}: starting {_arm_line(arm)}")
            async with started(arm, self.settings, self.config_file, self.logs(head)) as t:
                await self.prepare(doing, t, arm)
                await self._send_level(head, doing, workload, arm, level, t)
                await self.ended(head, arm, t, t0)
        except BLOCK_ERRORS as exc:
            self.failed(head, exc)

    async def _send_level(
        self,
        head: BlockHead,
        doing: str,
        workload: Workload,
        arm: Arm,
        level: Level,
        t: Target,
    ) -> None:
        """Send the workload to the started arm as ``level`` says; samples go to the store."""
        plan = self.plan

        def emit(rec: dict[str, Any]) -> None:
            self.store.append({"type": "sample", **head, **rec})

        what = "steps" if workload.sessions else "requests"
        timed = level.timed
        self.say(
            f"{doing}: {arm.name}, {len(workload.items)} {what}"
            if timed is None
            else f"{doing}: {arm.name}, {timed.warmup_s:g} s + {timed.window_s:g} s"
        )
        if timed is None:
            how = (level.tag, level.gap_s, level.stream)
            c = level.concurrency
            await send_each(
                self.http, t, plan.form, plan.max_tokens, workload, c, how, emit, self.progress
            )
            return
        await timed_pass(
            t,
            plan.form,
            plan.max_tokens,
            workload,
            level.concurrency,
            timed,
            level=level.tag,
            pin=arm.pin,
            emit=emit,
        )
        self.progress("", len(workload.items))  # a timed block counts as its items

    async def run_side_by_side(self, rep: int, workload: Workload, arms: list[Arm]) -> None:
        """Every arm of ``arms`` on fresh servers at once, each item sent to each in turn."""
        t0 = time.monotonic()
        heads = {a.name: self.head_of(rep, workload, a, Level()) for a in arms}
        doing = _doing(self.plan, rep, workload)
        async with contextlib.AsyncExitStack() as stack:
            live: list[tuple[Arm, Target]] = []
            for k, arm in enumerate(arms, 1):
                try:
                    self.say(f"{doing}: starting arm {k} of {len(arms)}, {_arm_line(arm)}")
                    t = await stack.enter_async_context(
                        started(arm, self.settings, self.config_file, self.logs(heads[arm.name]))
                    )
                    await self.prepare(doing, t, arm)
                    live.append((arm, t))
                except BLOCK_ERRORS as exc:
                    self.failed(heads[arm.name], exc)
            await self._send_in_turn(rep, workload, live, heads, doing)
            for arm, t in live:
                try:
                    await self.ended(heads[arm.name], arm, t, t0)
                except BLOCK_ERRORS as exc:
                    self.failed(heads[arm.name], exc)

    async def _send_in_turn(
        self,
        rep: int,
        workload: Workload,
        live: list[tuple[Arm, Target]],
        heads: dict[str, BlockHead],
        doing: str,
    ) -> None:
        """Each item to every live arm in turn, the order rotated by item and repetition."""
        plan = self.plan
        t_start = time.perf_counter()
        n, arms_up = len(workload.items), f"{len(live)} arm{'s' * (len(live) != 1)}"
        self.say(f"{doing}: {n} prompts, each sent to the {arms_up} in turn")
        for order, item in enumerate(workload.items):
            for j in range(len(live)):
                arm, t = live[(order + rep + j) % len(live)]
                rec = sample_head(item, order, "", t_start)
                body = item_body(t, item, plan.form, plan.max_tokens)
                sample = await request_sample(self.http, t, plan.form, body, rec)
                self.store.append({"type": "sample", **heads[arm.name], **sample})
                self.progress("", 1)
