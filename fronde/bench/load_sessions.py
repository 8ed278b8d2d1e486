"""A load run's measuring sessions: which samples compare, and the curves the router reads.

A records file can hold blocks of several sessions (a run resumed on a fresh lease of
the GPU machine, or seeded with an earlier run's records; :func:`~fronde.bench.store.
sessions` names each block's). The same server read up to 2× apart from one session to
the next, so ratios and the curves saved for the router are taken within one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fronde.bench.load import SPREAD
from fronde.bench.load_lengths import LengthTable, with_lengths
from fronde.bench.load_rows import LoadRow, load_rows, looping_items
from fronde.bench.store import Store, samples_of, sessions
from fronde.modes import Mode
from fronde.serving import LoadCurves

__all__ = [
    "arm_ratios", "by_session", "curves_from", "latest_rows", "session_curves", "session_ratios",
    "session_rows", "session_spread", "spread_ratios", "tagged_samples",
]  # fmt: skip


def tagged_samples(store: Store) -> list[dict[str, Any]]:
    """``store``'s samples, each with its ``session`` label (``""`` before any run record)."""
    records = store.records()
    session = sessions(records)
    return [s | {"session": session.get(s["block_id"], "")} for s in samples_of(records)]


def by_session(samples: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``samples`` grouped by their ``session`` label, sessions in order of first sample."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault(str(s.get("session", "")), []).append(s)
    return groups


def session_spread(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> dict[int, float]:
    """``plain2 ÷ plain`` per c in the latest session that measured both; else ``{}``."""
    return session_ratios(samples, loops, SPREAD.name, "plain")


def session_ratios(
    samples: Sequence[dict[str, Any]], loops: Sequence[str], num: str, den: str
) -> dict[int, float]:
    """``num ÷ den`` per c (:func:`arm_ratios`) in the latest session that measured both.

    ``{}`` when no session did: two arms of different sessions are not compared.
    """
    return _latest(_session_rows(samples, loops), num, den)


def _session_rows(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[list[LoadRow]]:
    """Each session's rows, sessions in order."""
    return [load_rows(group, loops) for group in by_session(samples).values()]


def _latest(per_session: Sequence[Sequence[LoadRow]], num: str, den: str) -> dict[int, float]:
    """``num ÷ den`` per c in the last of ``per_session`` that measured both; else ``{}``."""
    for rows in reversed(per_session):
        if ratios := arm_ratios(rows, num, den):
            return ratios
    return {}


def session_curves(
    samples: Sequence[dict[str, Any]],
    calibration: Mapping[Mode, str],
    source: str,
    lengths: LengthTable | None = None,
) -> LoadCurves:
    """The load curves for the router arms about to run, from ``samples`` so far.

    Each (calibration arm, c) from the latest session that measured it; ``plain2 ÷
    plain`` from one session only. With ``lengths`` (``--draft-lengths``), the draft
    length by load and each measured mode's curve at its best length.
    """
    per_session = _session_rows(samples, looping_items(samples))
    rows = latest_rows(per_session)
    curves = curves_from(rows, dict(calibration), source)
    spread = _latest(per_session, SPREAD.name, "plain")
    curves = LoadCurves(curves.points, curves.source, tuple(spread.items()))
    return with_lengths(curves, rows, lengths) if lengths else curves


def latest_rows(per_session: Sequence[Sequence[LoadRow]]) -> list[LoadRow]:
    """Each (arm, c) row from the last of ``per_session`` (sessions in order) that has it."""
    rows: dict[tuple[str, int], LoadRow] = {}
    for group in per_session:  # later sessions replace earlier ones
        rows |= {(r.arm, r.c): r for r in group}
    return list(rows.values())


def session_rows(samples: Sequence[dict[str, Any]]) -> list[LoadRow]:
    """The rows :func:`session_curves` reads: each (arm, c) from its latest session."""
    return latest_rows(_session_rows(samples, looping_items(samples)))


def curves_from(rows: Sequence[LoadRow], calibration: dict[Mode, str], source: str) -> LoadCurves:
    """Each calibrated mode's load curve (its arm's tok/s at every c), and ``plain2 ÷ plain``."""
    points: dict[Mode, tuple[tuple[int, float], ...]] = {}
    for mode, arm in calibration.items():
        pts = sorted((r.c, r.tok_s) for r in rows if r.arm == arm and r.tok_s > 0)
        if pts:
            points[mode] = tuple(pts)
    return LoadCurves(points, source, tuple(spread_ratios(rows).items()))


def arm_ratios(rows: Sequence[LoadRow], num: str, den: str) -> dict[int, float]:
    """Per c, arm ``num``'s tok/s ÷ arm ``den``'s (medians), where both measured."""
    under = {r.c: r.tok_s for r in rows if r.arm == den and r.tok_s > 0}
    over = {r.c: r.tok_s for r in rows if r.arm == num and r.tok_s > 0}
    return {c: over[c] / under[c] for c in sorted(under) if c in over}


def spread_ratios(rows: Sequence[LoadRow]) -> dict[int, float]:
    """Per c, ``plain2``'s tok/s ÷ ``plain``'s (medians), where both measured."""
    return arm_ratios(rows, SPREAD.name, "plain")
