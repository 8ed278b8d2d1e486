"""``fronde bench load``: with many agents at once, is Fronde faster than one llama-server?

The command reads its options into :class:`~fronde.bench.load_run.LoadOptions`,
screens looping items if asked, runs the load run and prints the page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fronde.cli_options import ConfigOpt, settings_from
from fronde.errors import FrondeError

if TYPE_CHECKING:
    from fronde.bench.load_run import LoadOptions
    from fronde.bench.progress import BenchProgress

__all__ = ["bench_load", "load_options"]

OutOpt = Annotated[Path, typer.Option(help="folder for records.jsonl, load.json, load.md")]
WorkloadOpt = Annotated[
    str, typer.Option(help="agent (the agent mix) or distinct (1,536 short chat prompts)")
]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        help="tokens per answer (agent steps: their own) [default: agent 64, distinct 128]", min=8
    ),
]
RepsOpt = Annotated[int, typer.Option(help="repetitions of every (arm, c) block", min=1)]
ClientsOpt = Annotated[
    list[int] | None, typer.Option("--clients", help="closed-loop clients [default: 1 2 4 8 16 32]")
]
WindowOpt = Annotated[
    float,
    typer.Option(help="each block's window, s: tok/s = tokens that arrived in it ÷ it", min=0.1),
]
WarmupOpt = Annotated[
    float, typer.Option(help="seconds of each block before the window (not counted)", min=0.0)
]
HistoryOpt = Annotated[
    str, typer.Option(help="fresh servers, or warm: one short request per slot first (history)")
]
OnceOpt = Annotated[
    bool,
    typer.Option(
        help="send each item at most once: the window ends at the last request sent "
        "when the items run out first (no prompt repeated)"
    ),
]
ArmOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--arm",
        help="arms to run, NAME or NAME@1,8,32 for its own c (repeatable): plain, "
        "pinned, pinned-cis, plain-nobs or plain-bs, default, cascade, plain2, s-simple, fr-plain, "
        "router, router-b, router-t (one server per mode), single-b, single-nh, fr-sbase (one "
        "server for every mode: a patched build); a router arm brings the calibration "
        "arms of its modes (s-mod, ...) [default: all but pinned-cis, plain-nobs, plain-bs "
        "and those of one server for every mode]",
    ),
]
SlotsOpt = Annotated[
    int | None,
    typer.Option(help="llama-server slots (-np) per backend [default: the largest c]", min=1),
]
ItemsOpt = Annotated[
    int | None,
    typer.Option(help="send only the first N items of the workload [default: all]", min=1),
]
SkipFromOpt = Annotated[
    Path | None,
    typer.Option(help="leave out the items an earlier run's load.json lists as looping"),
]
ScreenOpt = Annotated[
    bool | None,
    typer.Option(
        help="first send the whole workload once to a fresh plain server at the largest c "
        "(not counted) and leave out the items whose answer loops there "
        "[default: agent yes, distinct no]"
    ),
]
PlacementOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--placement",
        help="router arms without --arm: marginal (router), best (router-b; "
        "router.load_placement's default), threshold (router-t) [default: all three]",
    ),
]
ProxyOpt = Annotated[
    bool,
    typer.Option(
        help="without --arm, also run fr-plain, Fronde in front of the plain server "
        "alone (every request forced there): what the proxy changes without routing"
    ),
]
DraftLengthsOpt = Annotated[
    list[int] | None,
    typer.Option(
        "--draft-lengths",
        help="draft lengths (n_max) to measure each speculative mode's server at, "
        "repeatable (s-mod-n16, ...; its own arm stands for its configured n_max): the best "
        "at each c is saved with the load curves and set per request on one server of "
        "every mode [default: none]",
        min=1,
    ),
]


def bench_load(
    config: ConfigOpt = None,
    out: OutOpt = Path("runs/load"),
    workload: WorkloadOpt = "agent",
    max_tokens: MaxTokensOpt = None,
    reps: RepsOpt = 1,
    clients: ClientsOpt = None,
    window_s: WindowOpt = 20.0,
    warmup_s: WarmupOpt = 3.0,
    history: HistoryOpt = "fresh",
    once: OnceOpt = False,
    arm: ArmOpt = None,
    slots: SlotsOpt = None,
    items: ItemsOpt = None,
    skip_from: SkipFromOpt = None,
    screen: ScreenOpt = None,
    placement: PlacementOpt = None,
    proxy: ProxyOpt = True,
    draft_lengths: DraftLengthsOpt = None,
) -> None:
    """Many agents at once: Fronde against one llama-server at each concurrency c.

    Exit status 0 once it has run, whatever its verdicts: each line says PASS, FAIL or
    INVALID for its c (`fronde bench verdict`, with one answer, exits 2 on FAIL).
    """
    import dataclasses

    from fronde.bench.commands_report import show_load_report
    from fronde.bench.load_run import run_load, screen_loops
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.bench.serve import machine_line
    from fronde.runtime.local import profile_of

    settings = settings_from(config)
    opts = load_options(
        out, workload, max_tokens, reps, clients, (window_s, warmup_s), history, once,
        arm, slots, items, skip_from, screen, placement, proxy,
    )  # fmt: skip
    opts = dataclasses.replace(opts, lengths=tuple(sorted(set(draft_lengths or []))))
    form = profile_of(settings).prompt_form
    console = bench_console()

    def progress(total: int) -> AbstractContextManager[BenchProgress]:
        return bench_progress(console, total)

    if opts.screen and not opts.skip:
        skip = screen_loops(settings, config, form, opts, progress)
        console.print(
            f"screened: {len(skip)} looping item(s) left out: {', '.join(skip) or 'none'}",
            markup=False,
            highlight=False,
        )
        opts = dataclasses.replace(opts, skip=tuple(skip))
    kind = "distinct prompts" if opts.workload == "distinct" else "agent mix"
    servers = "slot history" if history == "warm" else "fresh servers"
    title = f"Load: {settings.profile}, {opts.slots} slots per server, {kind}, {servers}, "
    run_load(settings, config, form, opts, title + machine_line(), progress)
    show_load_report(out, console)  # the page `fronde bench report` writes, from the records


def load_options(
    out: Path,
    workload: str,
    max_tokens: int | None,
    reps: int,
    clients: Sequence[int] | None,
    window: tuple[float, float],
    history: str,
    once: bool,
    arm: Sequence[str] | None,
    slots: int | None,
    items: int | None,
    skip_from: Path | None,
    screen: bool | None,
    placement: Sequence[str] | None,
    proxy: bool,
) -> LoadOptions:
    """``fronde bench load``'s options (``window``: --window-s, --warmup-s), checked.

    Raises:
        FrondeError: a c below 1, an unknown workload, history or placement, a bad
            ``--arm``, or a ``--skip-from`` that is no ``load.json``.
    """
    from fronde.bench.load import CLIENTS
    from fronde.bench.load_mix import default_tokens
    from fronde.bench.load_run import LoadOptions, parse_arms
    from fronde.bench.passes import Timed

    levels = tuple(sorted(set(clients or CLIENTS)))
    if any(c < 1 for c in levels):
        raise FrondeError("--clients: every c must be at least 1")
    if workload not in ("agent", "distinct") or history not in ("fresh", "warm"):
        raise FrondeError("--workload: agent or distinct; --history: fresh or warm")
    named = parse_arms(arm or [])
    n_slots = slots or max([*levels, *(c for cs in (named or {}).values() for c in cs or ())])
    placements = placement or ["marginal", "best", "threshold"]
    wrong = sorted(set(placements) - {"marginal", "threshold", "best"})
    if wrong:
        raise FrondeError(f"--placement {', '.join(wrong)}: use marginal, best or threshold")
    skip = _looping_of(skip_from) if skip_from is not None else []
    which = "distinct" if workload == "distinct" else "agent"
    window_s, warmup_s = window
    return LoadOptions(
        out, which, max_tokens or default_tokens(which), reps, levels, n_slots,
        items, tuple(skip), which == "agent" if screen is None else screen,
        tuple(placements), proxy, named,
        Timed(warmup_s, window_s, n_slots if history == "warm" else 0, once),
    )  # fmt: skip


def _looping_of(path: Path) -> list[str]:
    """The items an earlier run's ``load.json`` lists as looping (``--skip-from``).

    Raises:
        FrondeError: ``path`` cannot be read or is no ``load.json``.
    """
    try:
        return [str(i) for i in json.loads(path.read_text())["looping"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FrondeError(f"--skip-from {path}: not a load.json ({exc})") from exc
