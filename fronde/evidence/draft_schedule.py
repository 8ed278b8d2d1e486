"""The draft length by load: per speculative mode, the ``n_max`` that served the most at c.

vLLM (``num_speculative_tokens_per_batch_size``) and SGLang turn speculation down as the
batch grows, from a schedule the user writes. ``fronde bench load --draft-lengths L``
measures it instead: each speculative mode's server at each length L and at its own
configured maximum, at each concurrency c; the length whose server read the most
aggregate tok/s at c is the schedule's point. It is saved beside the load curves
(``load.json``, :class:`~fronde.evidence.calibration.LoadCurves`), and on the single
topology each request of that mode gets it as ``speculative.n_max``
(:class:`~fronde.router.draft_length.DraftLengths`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fronde.json_types import JSON, JSONObject, json_int
from fronde.modes import Mode

__all__ = ["DraftSchedule", "schedule_from"]


@dataclass(frozen=True)
class DraftSchedule:
    """The measured draft length per speculative mode and load.

    Attributes:
        points: mode → ((c, n_max), …), ``c`` ascending: the draft length (tokens) whose
            server served the most aggregate decode tok/s with ``c`` requests in flight,
            as ``fronde bench load --draft-lengths`` measured it.
    """

    points: Mapping[Mode, tuple[tuple[int, int], ...]]

    def n_max(self, mode: Mode, n: int) -> int | None:
        """The draft length for ``mode`` with ``n`` requests in flight; None without a point.

        The point of the largest measured c ≤ ``n`` (a step, not a line: a length is
        measured or not), else the smallest measured c's.
        """
        pts = self.points.get(mode)
        if not pts:
            return None
        chosen = pts[0][1]
        for c, length in pts:
            if c > n:
                break
            chosen = length
        return chosen

    def as_dict(self) -> JSONObject:
        """JSON-ready: ``{mode: [[c, n_max], …]}``."""
        return {str(m): [[c, k] for c, k in pts] for m, pts in self.points.items()}


def schedule_from(raw: JSON) -> DraftSchedule | None:
    """A schedule from ``load.json``'s ``draft_lengths`` entry; None when absent or unreadable.

    A mode whose name is unknown, or whose points are no ``[[c ≥ 1, n_max ≥ 0], …]``, is
    left out (a file written by other code must not stop ``fronde serve``).
    """
    if not isinstance(raw, dict):
        return None
    points: dict[Mode, tuple[tuple[int, int], ...]] = {}
    for name, pts in raw.items():
        try:
            mode = Mode(name)
            pairs = sorted(_pair(p) for p in (pts if isinstance(pts, list) else []))
        except (ValueError, TypeError):
            continue
        if pairs and all(c >= 1 and k >= 0 for c, k in pairs):
            points[mode] = tuple(pairs)
    return DraftSchedule(points) if points else None


def _pair(raw: JSON) -> tuple[int, int]:
    """``[c, n_max]`` as two ints.

    Raises:
        ValueError, TypeError: not a list of two whole numbers.
    """
    if not isinstance(raw, list) or len(raw) != 2:
        raise ValueError("not a pair")
    return json_int(raw[0]), json_int(raw[1])
