"""``fronde bench load --draft-lengths``: each speculative mode's server at each draft length.

vLLM's ``num_speculative_tokens_per_batch_size`` and SGLang's threshold turn speculation
down as the batch grows, from a schedule the user writes; here it is measured. For each
speculative mode calibrated and each length L, an arm ``s-<mode>-n<L>`` runs that mode's
server with its draft length set to L; the mode's own calibration arm stands for its
configured maximum. At each c the length whose arm read the most tok/s is the schedule's
point, saved beside the load curves (the mode's curve takes that arm's figure);
``fronde serve`` sets it per request on the single topology (``fronde.router.draft_length``).

A request's ``speculative.n_max`` truncates a draft the server made, while an arm's flag
makes the server draft at most L: the two agree where L is at least ngram-mod's
``n_min`` (below it the arm also lowers ``n_min`` to L).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fronde.bench.arms import Arm
from fronde.bench.load_rows import LoadRow
from fronde.config import Settings
from fronde.modes import Mode, draft_max
from fronde.serving import DraftSchedule, LoadCurves

__all__ = [
    "LengthArms", "LengthTable", "best_lengths", "length_arms", "length_sets", "schedule_lines",
    "with_lengths",
]  # fmt: skip

LengthTable = Mapping[Mode, Mapping[int, str]]
"""Mode → draft length → the arm that measured it (its own calibration arm at its maximum)."""


def length_sets(mode: Mode, length: int, n_min: int) -> tuple[tuple[str, str], ...]:
    """The (flag, value) pairs that set ``mode``'s draft length to ``length`` in its argv.

    ngram-simple's ``size_m``; ngram-mod's ``n_max`` (its configured ``n_min`` lowered to
    ``length`` where above it: llama.cpp needs n_min ≤ n_max); the cascade both; the
    draft model's ``--spec-draft-n-max``.
    """
    simple = (("--spec-ngram-simple-size-m", str(length)),)
    mod = (
        ("--spec-ngram-mod-n-max", str(length)),
        ("--spec-ngram-mod-n-min", str(min(n_min, length))),
    )
    match mode:
        case Mode.NGRAM_SIMPLE:
            return simple
        case Mode.NGRAM_MOD:
            return mod
        case Mode.CASCADE:
            return simple + mod
        case _:
            return (("--spec-draft-n-max", str(length)),)


@dataclass(frozen=True)
class LengthArms:
    """The draft-length arms, their :data:`LengthTable`, and the lengths not measured (why)."""

    arms: tuple[Arm, ...]
    table: dict[Mode, dict[int, str]]
    notes: tuple[str, ...]


def length_arms(
    run: Settings,
    calibration: Mapping[Mode, str],
    lengths: Sequence[int],
    pinned: bool,
    names: Mapping[Mode, str],
) -> LengthArms:
    """An arm per speculative mode calibrated and length below its configured maximum.

    A length above it is left out with a note: a request cannot draft more than its
    server was started for. ``names``: each mode's calibration server's name (``s-mod``);
    its arm at length 16 is ``s-mod-n16``.
    """
    arms: list[Arm] = []
    table: dict[Mode, dict[int, str]] = {}
    notes: list[str] = []
    for mode, own in calibration.items():
        if mode is Mode.BASELINE or not lengths:
            continue
        cap = draft_max(mode, run.speculation)
        table[mode] = {cap: own}
        for length in sorted(set(lengths)):
            if length > cap:
                notes.append(f"{mode}: n_max {length} is above its configured {cap}: not measured")
            elif length < cap:
                sets = length_sets(mode, length, run.speculation.ngram_mod_n_min)
                about = f"llama-server as {mode}, draft length {length}" + ", pinned" * pinned
                name = f"{names[mode]}-n{length}"
                arms.append(Arm(name, "static", force=mode, pin=pinned, sets=sets, about=about))
                table[mode][length] = name
    return LengthArms(tuple(arms), table, tuple(notes))


def _reads(rows: Sequence[LoadRow], by_length: Mapping[int, str]) -> dict[int, dict[int, float]]:
    """C → length → the aggregate tok/s its arm read (lengths whose arm measured that c)."""
    rate = {(r.arm, r.c): r.tok_s for r in rows if r.tok_s > 0}
    cs = sorted({c for (arm, c) in rate if arm in by_length.values()})
    return {c: {k: rate[a, c] for k, a in sorted(by_length.items()) if (a, c) in rate} for c in cs}


def best_lengths(
    rows: Sequence[LoadRow], table: LengthTable
) -> tuple[DraftSchedule | None, dict[Mode, tuple[tuple[int, float], ...]]]:
    """Per mode and c, the length whose arm read the most tok/s (a tie: the longer).

    Returns the schedule (None when no mode with two lengths or more has a point) and
    mode → ((c, best tok/s), …): the curve as the schedule serves it.
    """
    points: dict[Mode, tuple[tuple[int, int], ...]] = {}
    curves: dict[Mode, tuple[tuple[int, float], ...]] = {}
    for mode, by_length in table.items():
        if len(by_length) < 2:
            continue
        reads = _reads(rows, by_length)
        best = {c: max(read, key=lambda k: (read[k], k)) for c, read in reads.items()}
        if best:
            points[mode] = tuple(best.items())
            curves[mode] = tuple((c, reads[c][k]) for c, k in best.items())
    return (DraftSchedule(points) if points else None), curves


def with_lengths(curves: LoadCurves, rows: Sequence[LoadRow], table: LengthTable) -> LoadCurves:
    """``curves`` with the draft length by load, each measured mode's curve its best arm's."""
    schedule, best = best_lengths(rows, table)
    if schedule is None:
        return curves
    points = {**curves.points, **best}
    return LoadCurves(points, curves.source, curves.spread, schedule)


def schedule_lines(rows: Sequence[LoadRow], table: LengthTable) -> list[str]:
    """The schedule as a Markdown table: c, mode, best n_max, tok/s of each length (or [])."""
    schedule, _ = best_lengths(rows, table)
    if schedule is None:
        return []
    lengths = sorted({k for mode in schedule.points for k in table[mode]})
    head = ["c", "mode", "best n_max", *(f"n{k} tok/s" for k in lengths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cells: list[tuple[int, str, list[str]]] = []
    for mode, pts in schedule.points.items():
        reads = _reads(rows, table[mode])
        for c, best in pts:
            figures = [f"{reads[c][k]:.0f}" if k in reads[c] else "-" for k in lengths]
            cells.append((c, str(mode), [str(best), *figures]))
    lines += [f"| {c} | {m} | " + " | ".join(f) + " |" for c, m, f in sorted(cells)]
    return lines
