"""A load run's files, ``load.json``, ``load.md`` and ``load.png``, from its records.

``fronde bench load`` writes them at the end of a run, ``fronde bench report`` again
from a folder's records (finished or not, gzipped as committed). The page's side notes
are read off the records here too: verify costs as the servers paid them, collapses,
Fronde's own time, and whether Fronde in front of the plain server gave its answers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any, cast

from fronde.bench.breakeven import ServedCost, served_costs_by
from fronde.bench.load import PROXY, arm_about
from fronde.bench.load_lengths import LengthTable, schedule_lines
from fronde.bench.load_page import load_markdown, load_plot, rows_json, section
from fronde.bench.load_rows import level_c, load_rows, looping_items
from fronde.bench.load_verdict import (
    ratio_sets,
    session_curves,
    session_rows,
    session_verdicts,
    single,
    tagged_samples,
)
from fronde.bench.store import Store
from fronde.errors import FrondeError
from fronde.modes import Mode

__all__ = [
    "answer_lines",
    "finite",
    "own_time_lines",
    "quarantine_lines",
    "recorded_run",
    "report_load",
    "run_about",
    "served_costs",
    "write_load_page",
]  # fmt: skip

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
    (out / "load.json").write_text(json.dumps(finite(body), indent=1, allow_nan=False) + "\n")
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


def served_costs(samples: Sequence[dict[str, Any]]) -> dict[str, ServedCost]:
    """Each single static arm's :class:`~fronde.bench.breakeven.ServedCost` at c = 1.

    Fitted to its requests' ``timings`` (every repetition); arms that drafted nothing or
    served too few requests are left out.
    """

    def arm(s: dict[str, Any]) -> str | None:
        ok = s.get("level") == "" and s.get("ok") and single(s["arm"]) and s.get("timings")
        return str(s["arm"]) if ok else None

    return served_costs_by(samples, arm)


def quarantine_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """The router blocks whose state at their end counted collapses, one line each.

    A router block's record keeps ``/fronde/v1/router`` as it ended; a mode's
    ``collapses`` count the times the collapse rule fired on it. Lines read ``router-b,
    c=32, rep 2: baseline 16`` (repetitions from 1); a block run again counts as its
    last ok record.
    """
    last: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("type") == "block" and r.get("ok") and isinstance(r.get("router"), dict):
            last[r["block"]] = r
    lines: list[str] = []
    for key, r in last.items():
        modes: dict[str, Any] = r["router"].get("modes") or {}
        hit = {m: int(v.get("collapses") or 0) for m, v in modes.items()}
        hit = {m: n for m, n in hit.items() if n}
        if hit:
            level = (key.split("|") + [""] * 4)[3]  # workload|arm|rep|level
            where = f"{r.get('arm')}, c={level_c(level)}, rep {int(r.get('rep') or 0) + 1}"
            lines.append(where + ": " + ", ".join(f"{m} {n}" for m, n in hit.items()))
    return lines


def own_time_lines(samples: Sequence[dict[str, Any]]) -> list[str]:
    """Fronde's own time per Fronde arm and c, one line each, every repetition pooled.

    From each answer's ``x-fronde-overhead-ms`` (its time before the upstream call,
    waits for a slot excluded), ``x-fronde-gather-ms`` (the part held for a burst,
    ``router.gather_ms``) and ``x-fronde-settle-ms`` (a wait to learn the slot of a
    request the server placed itself; not in the overhead). Lines read ``router-b,
    c=32: 17.5 ms median, 148.1 most (96 requests); in the burst wait 15.0 median, 52.3
    most``.
    """
    cells: dict[tuple[str, int], list[tuple[float, float | None, float]]] = {}
    for s in samples:
        route = cast("dict[str, str]", s.get("route") or {})
        overhead, gather = route.get("overhead-ms"), route.get("gather-ms")
        if s.get("ok") and overhead is not None:
            cell = cells.setdefault((s["arm"], level_c(s["level"])), [])
            settle = float(route.get("settle-ms", 0.0))
            cell.append((float(overhead), None if gather is None else float(gather), settle))
    lines: list[str] = []
    for (arm, c), got in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        overheads = [o for o, _, _ in got]
        line = (
            f"{arm}, c={c}: {median(overheads):.1f} ms median, {max(overheads):.1f} most "
            f"({len(got)} requests)"
        )
        gathers = [g for _, g, _ in got if g is not None]
        if gathers:
            line += f"; in the burst wait {median(gathers):.1f} median, {max(gathers):.1f} most"
        settles = [w for _, _, w in got if w > 0]
        if settles:
            line += (
                f"; and after it, {len(settles)} waited to learn a server's slot: "
                f"{median(settles):.1f} ms median, {max(settles):.1f} most"
            )
        lines.append(line)
    return lines


def answer_lines(samples: Sequence[dict[str, Any]]) -> list[str]:
    """Whether ``fr-plain`` gave the plain server's answers at c = 1, per session and rep.

    Lines read ``session 2026-12-04 19:55, rep 0: 48 of 66 the same; differ: chat-2, …``.
    Under load a batch's numerics make any two servers differ, so c ≥ 2 is not compared.
    """
    texts: dict[tuple[str, int, str], dict[str, str]] = {}
    for s in samples:
        if s.get("ok") and s["arm"] in ("plain", PROXY.name) and level_c(s["level"]) == 1:
            key = (str(s.get("session", "")), int(s["rep"]), s["arm"])
            texts.setdefault(key, {})[s["item"]] = str(s.get("text", ""))
    lines: list[str] = []
    for (session, rep, arm), plain in texts.items():
        fronde = texts.get((session, rep, PROXY.name))
        if arm != "plain" or fronde is None:
            continue
        both = [i for i in plain if i in fronde]
        differ = [i for i in both if plain[i] != fronde[i]]
        where = f"session {session}, " if session else ""
        line = f"{where}rep {rep}: {len(both) - len(differ)} of {len(both)} the same"
        if differ:
            shown = ", ".join(differ[:8]) + (", …" if len(differ) > 8 else "")
            line += f"; differ: {shown}"
        lines.append(line)
    return lines


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float as None: strict JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in cast(dict[Any, Any], value).items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in cast(Sequence[Any], value)]
    return value
