"""A load run's files, ``load.json``, ``load.md`` and ``load.png``, from its records.

``fronde bench load`` writes them at the end of a run, ``fronde bench report`` again
from a folder's records (finished or not, gzipped as committed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from fronde.bench.load import arm_about
from fronde.bench.load_lengths import LengthTable, schedule_lines
from fronde.bench.load_notes import answer_lines, own_time_lines, quarantine_lines, served_costs
from fronde.bench.load_page import load_markdown, load_plot, rows_json, section
from fronde.bench.load_rows import load_rows, looping_items
from fronde.bench.load_verdict import (
    ratio_sets,
    session_curves,
    session_rows,
    session_verdicts,
    tagged_samples,
)
from fronde.bench.store import Store
from fronde.errors import FrondeError
from fronde.modes import Mode

__all__ = ["recorded_run", "report_load", "run_about", "write_load_page"]

SCHEDULE_HEAD = "## Draft length by load (`--draft-lengths`, saved with the load curves)"
SCHEDULE_ABOUT = (
    "Each speculative mode's server at each draft length (n_max) and at its configured one, "
    "every c; the best length at each c is the schedule `fronde serve` sets per request "
    "(`speculative.n_max`) on one server of every mode, and the mode's load curve is that "
    "length's tok/s (each arm and c from the latest session that measured it, as saved)."
)


def write_load_page(
    out: Path,
    store: Store,
    *,
    title: str,
    calibration: Mapping[Mode, str],
    meta: Mapping[str, Any],
    about: Sequence[str] = (),
    lengths: LengthTable | None = None,
) -> list[str]:
    """Write a load run's ``load.json``, ``load.md`` and ``load.png`` into ``out``.

    Every block of ``store`` that ended ok so far counts, in its session (a run cut
    short gives a page of what it measured). ``calibration``: Fronde mode → the static
    arm whose curve is that mode's backend's; ``meta``: more fields for ``load.json``
    (``run``, ``slots``, ``screened``); ``about``: lines for the page's head
    (:func:`run_about`); ``lengths``: the draft-length arms, mode → length → arm.

    Returns:
        The verdict lines (:func:`session_verdicts`), then the draft lengths' table.
    """
    samples = tagged_samples(store)
    loops = looping_items(samples)
    rows = load_rows(samples, loops)
    curves = session_curves(samples, calibration, str(out), lengths)
    verdict = session_verdicts(samples, loops)
    costs = served_costs(samples)
    quarantines = quarantine_lines(store.records())
    own = own_time_lines(samples)
    answers = answer_lines(samples)
    arms = list(dict.fromkeys(r.arm for r in rows))
    ratios = ratio_sets(samples, loops, arms)
    legend = {a: arm_about(a) for a in arms}
    legend |= {f"(calibration) {m}": arm for m, arm in calibration.items()}
    body = {
        **meta,
        "calibration": {str(m): a for m, a in calibration.items()},
        "curves": curves.as_dict(),
        "looping": loops,
        "rows": rows_json(rows),
        "verdict": verdict,
        "quarantines": quarantines,
        "own_time": own,
        "answers_c1": answers,
        "ratios": {
            kind: {k: {str(c): v for c, v in r.items()} for k, r in by_label.items()}
            for kind, by_label in ratios.items()
        },
        "about": list(about),
        "served_costs": {a: asdict(c) | {"draft_cost": c.draft_cost} for a, c in costs.items()},
    }
    (out / "load.json").write_text(json.dumps(body, indent=1) + "\n")
    spread = dict(curves.spread)
    page = load_markdown(
        rows,
        loops,
        title,
        legend,
        curves,
        verdict,
        spread,
        costs,
        quarantines,
        ratios,
        own,
        answers,
        [str(i) for i in cast("list[Any]", meta.get("screened") or [])],
        about,
    )
    schedule = schedule_lines(session_rows(samples), lengths or {})
    if schedule:
        page += "\n".join([*section(SCHEDULE_HEAD, SCHEDULE_ABOUT, "", *schedule), ""])
    (out / "load.md").write_text(page)
    load_plot(rows, out / "load.png", title)
    return [*verdict, *(["", SCHEDULE_HEAD, *schedule] if schedule else [])]


def recorded_run(out: Path, store: Store) -> tuple[dict[str, Any], dict[Mode, str]]:
    """The last ``fronde bench load`` run record in ``store`` (folder ``out``) and its calibration.

    The calibration comes from the run record or, for older code, the ``load.json`` it wrote.

    Raises:
        FrondeError: no load run recorded in ``out``, or its calibration is nowhere.
    """
    runs = [r for r in store.records() if r["type"] == "run"]
    if not runs or "slots" not in runs[-1].get("identity", {}):
        raise FrondeError(f"{out}: no `fronde bench load` run recorded there")
    last = runs[-1]
    old: dict[str, Any] = {}
    if (out / "load.json").exists():
        try:
            old = cast("dict[str, Any]", json.loads((out / "load.json").read_text()))
        except ValueError:
            old = {}
    raw = last.get("calibration") or old.get("calibration")
    if not isinstance(raw, dict):
        raise FrondeError(
            f"{out}: the run recorded no calibration; run `fronde bench load --out {out}` "
            "again to finish it"
        )
    return last, {Mode(m): str(a) for m, a in cast("dict[str, Any]", raw).items()}


def report_load(out: Path) -> list[str]:
    """Write the page of a load run's folder again from its records, finished or not.

    Reads ``records.jsonl`` (or the committed ``.gz``); the calibration and title from
    the run record, or for older code the ``load.json`` and ``load.md`` it wrote.

    Returns:
        The verdict lines (:func:`session_verdicts`).

    Raises:
        FrondeError: as :func:`recorded_run`.
    """
    store = Store(out / "records.jsonl")
    last, calibration = recorded_run(out, store)
    title = last.get("title")
    if not title and (out / "load.md").exists():
        title = (out / "load.md").read_text().partition("\n")[0].removeprefix("# ")
    identity = last["identity"]
    meta = {
        "run": {k: v for k, v in last.items() if k not in ("schema", "type", "identity")},
        "slots": identity["slots"],
        "screened": identity.get("skip", []),
    }
    raw = cast("dict[str, dict[str, str]]", last.get("draft_lengths") or {})
    lengths = {Mode(m): {int(k): a for k, a in t.items()} for m, t in raw.items()}
    return write_load_page(
        out,
        store,
        title=str(title or "Load"),
        calibration=calibration,
        meta=meta,
        about=run_about(identity),
        lengths=lengths,
    )


def run_about(identity: Mapping[str, Any]) -> list[str]:
    """The page head's lines: workload, slot history, window, from a run's ``identity``."""
    if "window_s" not in identity:
        return [
            "Recorded before timed windows: the workload was the agent mix, each item sent "
            "once per block on fresh servers, a new connection per request; no workload, "
            "history or window was recorded (tok/s read as `†` says under the table)."
        ]
    workload = {"agent": "the agent mix", "distinct": "distinct short chat prompts"}
    name = str(identity.get("workload", "agent"))
    history = int(identity.get("history") or 0)
    own = " (agent steps: their own budgets)" if name == "agent" else ""
    lines = [
        f"Workload: {workload.get(name, name)}; answers of {identity.get('max_tokens')} "
        f"tokens at most{own}; the requests as sent are in `workload.json` "
        "(`scripts/load_check.py` sends them as an outside client).",
        "Servers: fresh for every block"
        + (f", then {history} short requests at once (slot history)." if history else "."),
        f"Window: {identity.get('window_s')} s after a warm-up of {identity.get('warmup_s')} s, "
        "closed-loop clients over keep-alive connections"
        + ("; each item sent at most once." if identity.get("once") else "."),
    ]
    return lines
