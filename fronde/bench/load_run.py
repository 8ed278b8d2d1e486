"""``fronde bench load`` as a run: the screen, the bracketed plans, the curves saved.

:func:`run_load` leaves the records, the ``workload.json`` an outside client sends
again, and the curves ``fronde serve`` reads; ``fronde bench report``'s code writes the page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fronde.bench.blocks import run_plan
from fronde.bench.load import bracketed, load_setup
from fronde.bench.load_mix import WorkloadName, workload_file
from fronde.bench.load_rows import looping_items
from fronde.bench.passes import Timed
from fronde.bench.progress import BenchProgress
from fronde.bench.protocol import Level, Plan, planned_requests
from fronde.bench.serve import run_info
from fronde.bench.store import Store
from fronde.bench.workloads import Form
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.serving import load_key, save_load_curves

__all__ = ["LoadOptions", "parse_arms", "run_load", "screen_loops"]

ProgressFactory = Callable[[int], AbstractContextManager[BenchProgress]]
"""Opens the benchmark's progress display over that many units."""


def parse_arms(specs: Sequence[str]) -> dict[str, tuple[int, ...] | None] | None:
    """``--arm`` values, ``plain`` or ``default@1,8,32``: name → its own c (None: the run's).

    None when none was given (the default arms).

    Raises:
        FrondeError: a concurrency that is no whole number of at least 1.
    """
    if not specs:
        return None
    out: dict[str, tuple[int, ...] | None] = {}
    for spec in specs:
        name, _, cs = spec.partition("@")
        try:
            levels = tuple(sorted({int(c) for c in cs.split(",")})) if cs else None
        except ValueError as exc:
            raise FrondeError(f"--arm {spec}: write NAME or NAME@1,8,32") from exc
        if levels is not None and min(levels) < 1:
            raise FrondeError(f"--arm {spec}: every c must be at least 1")
        out[name] = levels
    return out


@dataclass(frozen=True)
class LoadOptions:
    """``fronde bench load``'s options, read (see the command's help for each)."""

    out: Path
    workload: WorkloadName
    max_tokens: int
    reps: int
    clients: tuple[int, ...]
    slots: int
    items: int | None
    skip: tuple[str, ...]
    screen: bool
    placements: tuple[str, ...]
    proxy: bool
    arms: dict[str, tuple[int, ...] | None] | None
    timed: Timed
    lengths: tuple[int, ...] = ()

    def identity(self, machine: Any) -> dict[str, Any]:
        """What every run into the same folder must share (:meth:`Store.begin`)."""
        return {
            "machine": machine,
            "max_tokens": self.max_tokens,
            "slots": self.slots,
            "skip": list(self.skip),
            "workload": self.workload,
            "window_s": self.timed.window_s,
            "warmup_s": self.timed.warmup_s,
            "history": self.timed.history,
            "once": self.timed.once,
        }


def screen_loops(
    settings: Settings,
    config: Path | None,
    form: Form,
    opts: LoadOptions,
    progress: ProgressFactory,
) -> list[str]:
    """The workload's items whose answer loops on a fresh plain server (never sent after).

    One block, not counted: every item once at the largest c, into ``out/screen.jsonl``.
    A looping answer holds a slot for its whole budget and, drafted perfectly by
    n-grams, flatters every speculative arm.
    """
    top = max(opts.clients)
    setup = load_setup(
        settings,
        form,
        opts.max_tokens,
        1,
        (top,),
        opts.slots,
        opts.items,
        (),
        workload=opts.workload,
    )
    plain = next(a for a in setup.static.arms if a.name == "plain")
    workload = setup.static.workloads[0]
    plan = Plan.single(workload, [plain], 1, form, opts.max_tokens, (Level(top),))
    store = Store(opts.out / "screen.jsonl")
    store.begin({**run_info(), "arms": ["plain"]}, {"screen": top, "max_tokens": opts.max_tokens})
    with progress(len(workload.items)) as advance:
        logs = opts.out / "logs"
        asyncio.run(run_plan(plan, setup.settings, config, store, logs, advance, advance.status))
    return looping_items(store.samples())


def run_load(
    settings: Settings,
    config: Path | None,
    form: Form,
    opts: LoadOptions,
    title: str,
    progress: ProgressFactory,
) -> None:
    """Run every block of the load run not yet in ``opts.out``'s records.

    The static and router plans a repetition at a time (:func:`~fronde.bench.load.
    bracketed`); after each static part the load curves are saved for ``fronde serve``.

    Raises:
        FrondeError: an arm that is none, a folder holding another run, no llama-server.
    """
    from fronde.bench.load_verdict import session_curves, tagged_samples

    setup = load_setup(
        settings, form, opts.max_tokens, opts.reps, opts.clients, opts.slots, opts.items,
        opts.placements, opts.skip, opts.proxy,
        workload=opts.workload, timed=opts.timed, arms=opts.arms, lengths=opts.lengths,
    )  # fmt: skip
    info = run_info()
    store = Store(opts.out / "records.jsonl")
    plans = [*setup.plans("static"), *setup.plans("router")]
    arms = [a.name for p in plans for a in p.arms]
    store.begin(
        {
            **info,
            "arms": list(dict.fromkeys(arms)),
            "title": title,
            "calibration": {str(m): a for m, a in setup.calibration.items()},
            "draft_lengths": {str(m): t for m, t in setup.lengths.items()},
        },
        opts.identity(info["machine"]),
    )
    workload_file(opts.out / "workload.json", setup.static.workloads[0], form, opts.max_tokens)
    key = load_key(setup.settings)
    with progress(sum(planned_requests(p) for p in plans)) as advance:
        for note in setup.notes:
            advance(note, 0)
        logs = opts.out / "logs"
        for part, rep in bracketed(opts.reps):
            for plan in setup.plans(part):
                asyncio.run(
                    run_plan(
                        plan, setup.settings, config, store, logs, advance, advance.status, rep
                    )
                )
            if part == "static" and setup.plans("static"):
                # Each curve from the latest session that measured it: a run resumed
                # on a fresh lease (or seeded) would otherwise pool two machines'.
                samples = tagged_samples(store)
                curves = session_curves(samples, setup.calibration, str(opts.out), setup.lengths)
                save_load_curves(setup.settings.cache_dir, key, curves)
                advance(f"load curves saved for {key}: plain from c = {curves.threshold()}", 0)
                if curves.lengths is not None:
                    advance(f"draft lengths by load saved: {curves.lengths.as_dict()}", 0)
