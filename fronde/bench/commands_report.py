"""``fronde bench report``: a verdict or load run's tables, answer and charts, again.

Also what ``fronde bench verdict`` and ``fronde bench load`` print when they end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fronde.errors import FrondeError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["bench_report", "show_load_report", "show_report"]


def bench_report(
    out: Annotated[
        Path | None,
        typer.Argument(
            help="a folder `fronde bench verdict` or `fronde bench load` wrote "
            "[default: the newest runs/verdict*]"
        ),
    ] = None,
) -> None:
    """Print a verdict run's tables and answer again, finished or not; redraw its charts.

    A `fronde bench load` folder gets its page, verdict and plot written again from
    its records (`records.jsonl` or the committed `records.jsonl.gz`), also of a run
    cut short; router arms measured in another machine session than every static arm
    are marked INVALID. Exit status of a verdict folder: 0 on PASS, 2 on FAIL (as the
    run itself); of a load folder: 0 (its lines say PASS, FAIL or INVALID per c).
    """
    from fronde.bench.progress import bench_console

    if out is None:
        runs = sorted(Path("runs").glob("verdict*/records.jsonl"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise FrondeError("no runs/verdict*/ folder here: run ./reproduce.sh, or name a folder")
        out = runs[-1].parent
    show_report(out, bench_console())


def show_report(out: Path, console: Console) -> None:
    """Print ``out``'s tables and answer, write its pages (a load folder: :func:`show_load_report`).

    Raises:
        FrondeError: ``out`` is no folder, or holds no records.
        typer.Exit: with status 2, when the verdict is FAIL.
    """
    from fronde.bench.report import build_report
    from fronde.bench.store import Store

    store = Store(out / "records.jsonl")
    if not out.is_dir():
        raise FrondeError(
            f"{out}: no such folder: name one `fronde bench verdict` or `bench load` wrote"
        )
    if not store.exists():
        raise FrondeError(
            f"{out} holds no records.jsonl(.gz): name a folder `fronde bench verdict` or "
            f"`fronde bench load` wrote, or run `fronde bench verdict --out {out}`"
        )
    if any(r["type"] == "run" and "slots" in r.get("identity", {}) for r in store.records()):
        show_load_report(out, console)
        return
    report = build_report(store)
    report.show(console)
    report.write(out)
    # Whole lines, however long: a path broken in two cannot be copied.
    console.print(
        f"summary.md, the charts and records.jsonl; again: fronde bench report {out}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"results: {out}/", markup=False, highlight=False, soft_wrap=True)
    if report.verdict == "FAIL":
        raise typer.Exit(2)


def show_load_report(out: Path, console: Console) -> None:
    """``fronde bench report`` of a ``bench load`` folder: its page again, no server."""
    from fronde.bench.load_report import report_load

    for line in report_load(out):
        console.print(line, markup=False, highlight=False)
    console.print(f"page: {out / 'load.md'}; plot: {out / 'load.png'}", markup=False)
