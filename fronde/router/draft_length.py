"""A speculative request's draft length on the shared server, from the load it runs under.

On the single topology a request's draft length is a field of its body
(``speculative.n_max``, ``docs/llama-patches.md``), so Fronde can do per request what
vLLM's ``num_speculative_tokens_per_batch_size`` and SGLang's threshold do from a schedule
the user writes: draft shorter as the batch grows. The schedule here is measured
(:class:`~fronde.evidence.draft_schedule.DraftSchedule`, saved by ``fronde bench load
--draft-lengths``); :class:`DraftLengths` reads it for a mode and the requests in flight.
The request's life sets the field (``fronde.request.sender``), under the client's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.evidence.calibration import load_curves, load_key
from fronde.evidence.draft_schedule import DraftSchedule
from fronde.json_types import JSONObject
from fronde.modes import Mode, draft_max

__all__ = ["DraftLengths", "resolve_draft_lengths"]


@dataclass(frozen=True)
class DraftLengths:
    """The draft length by load in use, and each mode's configured maximum.

    Attributes:
        schedule: the measured schedule, or None (no request gets a length).
        caps: mode → the longest draft its configuration makes, tokens
            (:func:`~fronde.modes.draft_max`): a length is never set above it, so the
            server never refuses it (llama-server answers 400 above its maximum).
        why: where the schedule came from, or why there is none, for
            ``/fronde/v1/router`` and the log.
    """

    schedule: DraftSchedule | None
    caps: Mapping[Mode, int]
    why: str

    def n_max(self, mode: Mode, n: int) -> int | None:
        """The ``speculative.n_max`` for a ``mode`` request with ``n`` in flight, or None.

        ``n`` counts the request itself (the schedule's c is the load it was measured
        at). None, and so the body as without a schedule, when there is no schedule or
        no point for ``mode``, or when its length caps nothing (at or above the mode's
        configured maximum).
        """
        length = self.schedule.n_max(mode, n) if self.schedule is not None else None
        cap = self.caps.get(mode, 0)
        if length is None or length >= cap:
            return None
        return length

    def snapshot(self) -> JSONObject:
        """JSON-ready: ``{"why", "schedule": {mode: [[c, n_max], …]} or null, "caps"}``."""
        return {
            "why": self.why,
            "schedule": self.schedule.as_dict() if self.schedule is not None else None,
            "caps": {str(m): k for m, k in self.caps.items()},
        }


def resolve_draft_lengths(settings: Settings) -> DraftLengths:
    """The draft lengths ``settings`` serve with (``router.draft_lengths``).

    The schedule saved with the load curves for :func:`~fronde.evidence.calibration.
    load_key` (the same build, model, CPUs and slots); none with ``off``, when
    llama-server is not found, or when nothing was measured. It is applied only where
    one server serves every mode (the request's life checks that).
    """
    caps = {m: k for m in settings.modes if (k := draft_max(m, settings.speculation)) > 0}
    if settings.router.draft_lengths == "off":
        return DraftLengths(None, caps, "off (router.draft_lengths): configured n_max")
    try:
        key = load_key(settings)
    except FrondeError:
        return DraftLengths(None, caps, "none (llama-server not found): configured n_max")
    curves = load_curves(settings.cache_dir, key)
    if curves is None or curves.lengths is None:
        return DraftLengths(
            None,
            caps,
            f"none measured for {key} (`fronde bench load --draft-lengths` measures them): "
            "configured n_max",
        )
    source = curves.source or "load.json"
    return DraftLengths(
        curves.lengths, caps, f"draft lengths by load from {source} for {key} (single topology)"
    )
