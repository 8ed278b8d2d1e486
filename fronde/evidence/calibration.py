"""The measured floor: the fastest Fronde mode on this machine, build and model.

``fronde bench verdict`` measures every Fronde mode forced on fresh servers
(workload A, first encounter) and saves the fastest, by total rate (Σ tokens ÷
Σ wall), in ``<cache_dir>/floors.json`` under a key naming the llama.cpp build, the
target GGUF and the CPU count. ``fronde serve`` reads it at start when
``router.floor = "auto"``: that mode is every class's starting floor
(:mod:`fronde.router.policy`). With no record for the key, the floor is ngram-mod
(Fronde's short-draft configuration), which was the fastest or within 0.06× of the
fastest single server in the four verdicts of 2026-12-01.

The file holds one JSON object, key → ``{"mode", "rates", "source", "at"}``, where
``rates`` are the measured total rates in tok/s per mode, and ``draft_costs``, mode → what
a drafted token cost that mode's server in passes (:mod:`fronde.evidence.served_cost`),
where the run measured it: the counterfactual book's price for a mode until its own
answers give one (:func:`load_draft_costs`).

**Load curves** (``<cache_dir>/load.json``, the same key plus ``|np<slots>``): for
each mode, the aggregate decode tok/s of one llama-server with Fronde's argv for that
mode when ``c`` closed-loop clients stream to it, as ``fronde bench load`` measured
it (:class:`LoadCurves`). The ``measured`` load rule (:mod:`fronde.router.policy`)
reads them at start. Beside them, where ``fronde bench load --draft-lengths`` measured it,
the draft length by load (:class:`~fronde.evidence.draft_schedule.DraftSchedule`,
``draft_lengths``); an entry without it loads with none.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.evidence.draft_schedule import DraftSchedule, schedule_from
from fronde.json_types import JSON, JSONObject, json_float, json_int
from fronde.modes import FALLBACK_FLOOR, Mode
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of

__all__ = [
    "FALLBACK_FLOOR",
    "FLOORS_FILE",
    "LOAD_FILE",
    "Floor",
    "LoadCurves",
    "calibration_key",
    "load_curves",
    "load_draft_costs",
    "load_floor",
    "load_key",
    "resolve_floor",
    "resolve_load",
    "save_floor",
    "save_load_curves",
]

FLOORS_FILE = "floors.json"
"""The file under the cache folder that keeps measured floors."""


@dataclass(frozen=True)
class Floor:
    """A class's starting floor and where it came from.

    Attributes:
        mode: the floor.
        why: one line for the log, ``/fronde/v1/router`` and the live page.
    """

    mode: Mode
    why: str


def calibration_key(settings: Settings) -> str:
    """``<build folder>|<target GGUF>|<CPUs>cpu``: what a measured floor is valid for.

    The build folder (``b11434-cpu-…``, ``b11434-cuda-…``) tells a CPU build from a
    GPU one; a user's own ``llama_server`` binary stands by its path.

    Raises:
        FrondeError: llama-server is not installed, or the profile cannot be read.
    """
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    build = str(binary) if settings.llama_server is not None else binary.parent.parent.name
    model = settings.model.name if settings.model is not None else profile_of(settings).target.file
    return f"{build}|{model}|{os.cpu_count()}cpu"


def _read(path: Path) -> JSONObject:
    try:
        data: JSON = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pairs(raw: JSON) -> tuple[tuple[int, float], ...]:
    """``[[c, x], …]`` read as (int, float) pairs, sorted.

    Raises:
        TypeError, ValueError: ``raw`` is not a list of two-number lists.
    """
    if not isinstance(raw, list):
        raise TypeError("not a list of pairs")
    pairs: list[tuple[int, float]] = []
    for pair in raw:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError("not a pair")
        pairs.append((json_int(pair[0]), json_float(pair[1])))
    return tuple(sorted(pairs))


def load_floor(cache_dir: Path, key: str) -> Mode | None:
    """The floor measured for ``key``, or None (no file, no entry, an unknown mode)."""
    entry = _read(cache_dir / FLOORS_FILE).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return Mode(entry.get("mode"))
    except ValueError:
        return None


def _write(path: Path, data: JSONObject) -> None:
    """Replace ``path`` with ``data`` as JSON in one rename (no half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def save_floor(
    cache_dir: Path,
    key: str,
    rates: dict[Mode, float],
    source: str,
    draft_costs: Mapping[Mode, float] | None = None,
) -> Mode:
    """Record the fastest of ``rates`` (tok/s per mode) as ``key``'s floor.

    Args:
        cache_dir: Fronde's cache folder.
        key: :func:`calibration_key` of the measured settings.
        rates: total rate per mode, tok/s; at least one.
        source: where they were measured (a run folder).
        draft_costs: mode → its server's draft cost, passes a drafted token, if measured.

    Returns:
        The mode saved.

    Raises:
        ValueError: ``rates`` is empty.
    """
    if not rates:
        raise ValueError("no rate measured")
    best = max(rates, key=lambda m: rates[m])
    path = cache_dir / FLOORS_FILE
    data = _read(path)
    data[key] = {
        "mode": str(best),
        "rates": {str(m): round(r, 2) for m, r in rates.items()},
        "source": source,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "draft_costs": {str(m): round(c, 3) for m, c in (draft_costs or {}).items()},
    }
    _write(path, data)
    return best


def load_draft_costs(settings: Settings) -> dict[Mode, float]:
    """Mode → the draft cost ``fronde bench verdict`` saved for this machine; empty if none."""
    try:
        entry = _read(settings.cache_dir / FLOORS_FILE).get(calibration_key(settings))
    except FrondeError:
        return {}
    raw = entry.get("draft_costs") if isinstance(entry, dict) else None
    known = {str(m): m for m in Mode}
    if not isinstance(raw, dict):
        return {}
    return {known[k]: float(v) for k, v in raw.items() if k in known and isinstance(v, float)}


def resolve_floor(settings: Settings) -> Floor:
    """The starting floor ``settings.router.floor`` names (see the module docstring)."""
    setting = settings.router.floor
    if setting != "auto":
        return Floor(setting, f"{setting}: set by router.floor")
    try:
        key = calibration_key(settings)
    except FrondeError:
        return Floor(FALLBACK_FLOOR, f"{FALLBACK_FLOOR}: default (llama-server not found)")
    measured = load_floor(settings.cache_dir, key)
    if measured is None:
        return Floor(
            FALLBACK_FLOOR,
            f"{FALLBACK_FLOOR}: default, nothing measured for {key} "
            "(`fronde bench verdict` measures it)",
        )
    return Floor(measured, f"{measured}: fastest mode `fronde bench verdict` measured for {key}")


def curve_floor(start: Floor, curves: LoadCurves, modes: Collection[Mode], band: float) -> Floor:
    """The starting floor the load curves choose: the best mode alone, where it is clearly best.

    ``fronde bench load`` measures each mode's backend at one request in flight with the
    slots and flags it is served with (``backend.plain_args`` on baseline), which a
    verdict run (or the default) does not: on the H200 (gemma, 2026-12-04 10:35) the
    curves read baseline 344 tok/s alone against 293–300 for the speculative modes,
    while the floor stayed the default ngram-mod, and a request with nothing else to
    go on went there. So with curves, the floor is the mode whose curve is highest at
    a load of 1, unless ``start``'s own curve is within ``band`` of it (a tie stays
    with ``start``).

    Args:
        start: the floor from ``router.floor = "auto"`` (:func:`resolve_floor`).
        curves: the measured load curves.
        modes: the modes served.
        band: the relative margin the best must clear (``router.load_band``).

    Returns:
        ``start``, or the curves' best mode with a ``why`` that gives both figures.
    """
    alone = {m: r for m in modes if (r := curves.aggregate(m, 1)) is not None}
    if not alone:
        return start
    best = max(alone, key=lambda m: alone[m])
    own = alone.get(start.mode)
    if best == start.mode or (own is not None and own >= (1 - band) * alone[best]):
        return start
    against = f"{start.mode} {own:.0f}" if own is not None else f"{start.mode} has no curve"
    return Floor(
        best,
        f"{best}: the load curves' best alone ({alone[best]:.0f} tok/s against {against}; "
        f"{curves.source or 'fronde bench load'}), over {start.why}",
    )


LOAD_FILE = "load.json"
"""The file under the cache folder that keeps measured load curves."""


@dataclass(frozen=True)
class LoadCurves:
    """Aggregate decode throughput of one backend per mode, against its load.

    Attributes:
        points: mode → ((c, tok/s), …), ``c`` ascending: the aggregate decode tok/s
            (Σ tokens ÷ span) of one llama-server of that mode serving ``c``
            closed-loop streaming clients, measured by ``fronde bench load``.
        source: where they were measured (a run folder), for the log.
        spread: ((c, gain), …), ``c`` ascending: two plain servers' aggregate tok/s ÷
            one's at ``c`` requests in flight (``fronde bench load``'s ``plain2`` arm):
            above 1, a second process adds throughput at that load; empty when not
            measured.
        lengths: the draft length by load each speculative mode's curve was measured
            with (its points are then the best length's tok/s at each c); None when
            ``fronde bench load`` measured no length.
    """

    points: Mapping[Mode, tuple[tuple[int, float], ...]]
    source: str = ""
    spread: tuple[tuple[int, float], ...] = ()
    lengths: DraftSchedule | None = None

    def aggregate(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s of ``mode``'s backend with ``n`` requests in flight.

        Linear between measured loads, 0 at ``n = 0``, flat past the largest load
        measured (a backend past its knee gains nothing more). None when ``mode`` has
        no curve.
        """
        pts = self.points.get(mode)
        if not pts:
            return None
        if n <= 0:
            return 0.0
        prev_c, prev_r = 0, 0.0
        for c, r in pts:
            if n <= c:
                return prev_r + (r - prev_r) * (n - prev_c) / (c - prev_c)
            prev_c, prev_r = c, r
        return prev_r

    def spread_gain(self, n: int) -> float | None:
        """What a second server gains at load ``n``; None when not measured.

        :attr:`spread`, linear between the loads measured, flat outside them.
        """
        pts = self.spread
        if not pts:
            return None
        if n <= pts[0][0]:
            return pts[0][1]
        for (c0, g0), (c1, g1) in itertools.pairwise(pts):
            if n <= c1:
                return g0 + (g1 - g0) * (n - c0) / (c1 - c0)
        return pts[-1][1]

    def marginal(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s gained by giving ``mode``'s backend one more request at load ``n``."""
        after, before = self.aggregate(mode, n + 1), self.aggregate(mode, n)
        return None if after is None or before is None else after - before

    def threshold(self) -> int | None:
        """The smallest measured load at which plain decoding's aggregate is the highest.

        Speculation's worth falls as the batch grows; from this load on, a baseline
        backend alone serves more tok/s than any speculative one alone. None when
        baseline has no curve or never comes first.
        """
        base = self.points.get(Mode.BASELINE)
        if not base:
            return None
        for c, rate in base:
            others = [self.aggregate(m, c) for m in self.points if m is not Mode.BASELINE]
            if all(o is None or rate >= o for o in others):
                return c
        return None

    def as_dict(self) -> JSONObject:
        """JSON-ready: the points, threshold, source, spread and draft lengths.

        ``{"points": {mode: [[c, tok/s], …]}, "threshold", "source", "spread",
        "draft_lengths": {mode: [[c, n_max], …]} or null}``.
        """
        return {
            "points": {str(m): [[c, round(r, 1)] for c, r in p] for m, p in self.points.items()},
            "threshold": self.threshold(),
            "source": self.source,
            "spread": [[c, round(g, 3)] for c, g in self.spread],
            "draft_lengths": self.lengths.as_dict() if self.lengths is not None else None,
        }


def load_key(settings: Settings) -> str:
    """:func:`calibration_key` plus ``|np<slots>``: load curves hold for one slot count.

    Raises:
        FrondeError: as :func:`calibration_key`.
    """
    return f"{calibration_key(settings)}|np{settings.backend.parallel}"


def load_curves(cache_dir: Path, key: str) -> LoadCurves | None:
    """The curves saved for ``key``, or None (no file, no entry, nothing readable)."""
    entry = _read(cache_dir / LOAD_FILE).get(key)
    if not isinstance(entry, dict):
        return None
    raw = entry.get("points")
    points: dict[Mode, tuple[tuple[int, float], ...]] = {}
    for name, pts in (raw if isinstance(raw, dict) else {}).items():
        try:
            mode = Mode(name)
            pairs = _pairs(pts)
        except (ValueError, TypeError):
            continue
        if pairs and all(c > 0 for c, _ in pairs):
            points[mode] = pairs
    source = str(entry.get("source", ""))
    try:
        spread = _pairs(entry.get("spread") or [])
    except (ValueError, TypeError):
        spread = ()
    if any(c <= 0 or g <= 0 for c, g in spread):
        spread = ()
    lengths = schedule_from(entry.get("draft_lengths"))
    return LoadCurves(points, source, spread, lengths) if points else None


def save_load_curves(cache_dir: Path, key: str, curves: LoadCurves) -> None:
    """Record ``curves`` under ``key`` in ``<cache_dir>/load.json`` (replacing any)."""
    path = cache_dir / LOAD_FILE
    data = _read(path)
    data[key] = {**curves.as_dict(), "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write(path, data)


def resolve_load(settings: Settings) -> tuple[LoadCurves | None, str]:
    """The load curves the ``measured`` rule uses, and one line saying where from.

    None (the rule then acts as ``spread``) when llama-server is not found or nothing
    was measured for :func:`load_key`.
    """
    try:
        key = load_key(settings)
    except FrondeError:
        return None, "no load curves (llama-server not found): spread when busy"
    curves = load_curves(settings.cache_dir, key)
    if curves is None:
        return None, (
            f"no load curves for {key} (`fronde bench load` measures them): spread when busy"
        )
    return curves, f"load curves from {curves.source or 'load.json'} for {key}"
