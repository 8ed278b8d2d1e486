"""The serving side's public face, for what stands beside it: the benchmarks, ``scripts/``.

A benchmark drives Fronde from outside, as a user would: it starts `fronde serve`, or
one llama-server with the argv `fronde serve` gives a mode's backend, and it writes the
files `fronde serve` reads at start. What it may use of the serving floors is named
here, and only here (an import-linter contract keeps ``fronde/bench/`` to this face):

- launching: :func:`plan_pool` (the argv of each mode's backend under some settings),
  :class:`LaunchSpec` and :class:`LlamaServerProcess` (one llama-server: start, wait
  for ``/health``, stop), :func:`free_port`, :func:`log_tail`, :func:`die_with_parent`;
- calibration, the files a benchmark writes and `fronde serve` reads: this machine's
  floor (:func:`save_floor` under :func:`calibration_key`, in :data:`FLOORS_FILE`) and
  the load curves (:class:`LoadCurves`, :func:`save_load_curves` under
  :func:`load_key`) and the draft length by load they carry (:class:`DraftSchedule`);
- the n-gram replay that estimates α from token ids (``fronde bench shadow`` measures
  it): :class:`NgramModTable`, :class:`ShadowStats`, :func:`shadow_ngram_simple`,
  :func:`shadow_ngram_mod`;
- the fit of what a drafted token costs a server (:class:`ServedCostFit`), the one the
  router keeps per mode, which ``fronde bench load`` and ``fronde bench verdict`` apply to
  the answers they measured.

The code lives, and changes, in ``fronde/backends/`` and ``fronde/evidence/``; a name
re-exported here is one they keep for the outside.
"""

from __future__ import annotations

from fronde.backends.pool import plan_pool
from fronde.backends.process import (
    NO_CACHE_IDLE_SLOTS,
    LaunchSpec,
    LlamaServerProcess,
    die_with_parent,
    free_port,
    log_tail,
)
from fronde.evidence.calibration import (
    FLOORS_FILE,
    LoadCurves,
    calibration_key,
    load_key,
    save_floor,
    save_load_curves,
)
from fronde.evidence.draft_schedule import DraftSchedule
from fronde.evidence.ngram_replay import (
    NgramModTable,
    ShadowStats,
    shadow_ngram_mod,
    shadow_ngram_simple,
)
from fronde.evidence.served_cost import ServedCostFit

__all__ = [
    "FLOORS_FILE",
    "NO_CACHE_IDLE_SLOTS",
    "DraftSchedule",
    "LaunchSpec",
    "LlamaServerProcess",
    "LoadCurves",
    "NgramModTable",
    "ServedCostFit",
    "ShadowStats",
    "calibration_key",
    "die_with_parent",
    "free_port",
    "load_key",
    "log_tail",
    "plan_pool",
    "save_floor",
    "save_load_curves",
    "shadow_ngram_mod",
    "shadow_ngram_simple",
]
