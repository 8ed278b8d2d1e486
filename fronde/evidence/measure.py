"""What the router has measured: decode speed, α and τ per mode, collapses, quarantines.

Pure bookkeeping with an explicit clock (``now`` in seconds, monotonic): no I/O,
so every rule is testable with numbers.

- **EMA** of decode tok/s per mode and per (mode, class), smoothing
  ``EMA_ALPHA = 0.30`` (original FRONDE router). Decode tok/s is llama-server's
  ``timings.predicted_per_second``, which excludes prefill and the first token.
- **α** (acceptance rate) = ``draft_n_accepted`` ÷ ``draft_n``.
- **τ** (mean accepted length) = tokens produced per target forward pass. Each
  verify pass yields its accepted drafts plus one token of its own, so the number
  of passes is ``predicted_n − draft_n_accepted`` and
  τ = ``predicted_n`` ÷ (``predicted_n`` − ``draft_n_accepted``); 1.0 means no gain
  (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
  Decoding", call it the expected number of tokens per iteration).
- **Collapse** is a fault of the mode's server, not its content. A request's decode
  time is compared with what its own tokens should have cost: its target passes
  (``predicted_n − draft_n_accepted``) plus ``draft_cost`` decode steps per drafted
  token (the verify cost of a draft token, :data:`DRAFT_COST`), so a request with
  nothing to copy and one that copied 100 tokens both come to the same **step rate**
  (cost-weighted target passes per second) on a healthy server. A step rate below
  ``EMA_COLLAPSE = 0.5`` × the mode's step-rate EMA (before the update) is a strike;
  ``COLLAPSE_STRIKES = 2`` strikes in a row quarantine the mode for
  ``QUARANTINE_S = 120`` seconds (original FRONDE router; the strikes are Fronde's: one
  sample taken while the machine was busy with something else quarantined a healthy
  mode). The original rule compared decode tok/s with the mode's global EMA, and
  quarantined ngram-mod whenever a request with nothing to copy followed copy-heavy
  edits (11 of 12 router sessions, issue 21). When the quarantine expires the mode is
  *on probation*: with ``probe = "always"`` it gets no traffic until a probe has
  measured it again (hysteresis, no flapping); otherwise it simply comes back.
  **Only where generations run one at a time** (the decode gate is 1, the default
  without parallel slots): with parallel slots a request's step rate is set by the
  batch it shares, not by its server's health, so no collapse is judged (the EMAs
  still fold every sample). Measured on the H200 (gemma at c = 32, 32 slots,
  ``results/load-gpu-h200-cpu-gemma-270m-20261203-c32b``): a request that decoded
  before the other 31 had joined read 761 tok/s, those decoding with them 62, and
  baseline, serving as fast as the plain static server, collapsed 16 and 15 times
  in two of three repetitions (each re-arming its quarantine for the rest of the
  block), and 15 and 16 requests went to servers with half its throughput.
- **Trusted speed** (what floors and probes compare against): the median of the last
  ``SPEED_WINDOW = 5`` samples of a (mode, class), counted only when at least
  ``MIN_TRUSTED_SAMPLES = 3`` of them are younger than ``STALE_S = 600`` seconds;
  otherwise None, and the router measures the mode again. A single noisy sample
  (1.3 tok/s during outside load, against 37–42 in the requests around it) set a
  class floor for good when the EMA alone decided.
- **Speed summary** (the live page's figure for a mode, :func:`speed_summary`): the same
  median over the mode's last ``SPEED_WINDOW`` samples of any class, with their count
  and age, and a state: ``unmeasured``, ``stale`` (none younger than ``STALE_S``),
  ``few`` (fewer than ``MIN_TRUSTED_SAMPLES`` fresh ones) or ``trusted``.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TypedDict

from fronde.config_router import ROUTER_DEFAULTS
from fronde.evidence.measurement import (
    DRAFT_COST,
    EMA_ALPHA,
    MIN_TOKENS,
    MIN_TRUSTED_SAMPLES,
    SPEED_WINDOW,
    STALE_S,
    Ema,
    Measurement,
    SpeedSummary,
    SpeedView,
    speed_summary,
)
from fronde.modes import Mode

__all__ = ["COLLAPSE_STRIKES", "EMA_COLLAPSE", "QUARANTINE_S", "Measurements", "ModeView"]

EMA_COLLAPSE: float = ROUTER_DEFAULTS.collapse
"""A speed below this fraction of the EMA is a collapse: 0.5 (original FRONDE router;
``router.collapse``)."""

QUARANTINE_S: float = ROUTER_DEFAULTS.quarantine_s
"""How long a collapsed mode is kept out: 120 s (original FRONDE router;
``router.quarantine_s``)."""

MIN_SAMPLES_FOR_COLLAPSE = 3
"""An EMA must have seen this many samples before it can call a collapse."""

COLLAPSE_STRIKES = 2
"""Collapsed samples in a row that quarantine a mode (one is noise, two a fault)."""


class ModeView(TypedDict):
    """One mode in :meth:`Measurements.snapshot` (EMAs in tok/s, α, τ; seconds)."""

    decode_tok_s_ema: float | None
    step_rate_ema: float | None
    samples: int
    alpha_ema: float | None
    tau_ema: float | None
    quarantined_for_s: float | None
    on_probation: bool
    collapses: int
    by_class: dict[str, float | None]
    by_class_trusted: dict[str, float | None]
    speed: SpeedView
    by_class_speed: dict[str, SpeedView]


@dataclass
class _ModeState:
    speed: Ema = field(default_factory=Ema)
    steps: Ema = field(default_factory=Ema)
    alpha: Ema = field(default_factory=Ema)
    tau: Ema = field(default_factory=Ema)
    quarantined_until: float | None = None
    on_probation: bool = False
    collapses: int = 0
    strikes: int = 0
    recent: deque[tuple[float, float]] = field(
        default_factory=lambda: deque[tuple[float, float]](maxlen=SPEED_WINDOW)
    )


@dataclass
class _ClassSpeed:
    """One (mode, class): its EMA, and its recent samples as ``(time s, tok/s)``."""

    ema: Ema
    recent: deque[tuple[float, float]] = field(
        default_factory=lambda: deque[tuple[float, float]](maxlen=SPEED_WINDOW)
    )


class Measurements:
    """Per-mode and per-(mode, class) EMAs, quarantines and probation.

    Args:
        ema_alpha: EMA smoothing weight.
        collapse: collapse threshold as a fraction of the step-rate EMA.
        quarantine_s: quarantine length, seconds.
        draft_cost: verify cost of a drafted token, decode steps (:data:`DRAFT_COST`).
        alone: generations run one at a time (a decode gate of 1), so that one
            request's step rate can be compared with another's; False: no collapse is
            ever judged (see the module docstring).
    """

    def __init__(
        self,
        ema_alpha: float = EMA_ALPHA,
        collapse: float = EMA_COLLAPSE,
        quarantine_s: float = QUARANTINE_S,
        draft_cost: float = DRAFT_COST,
        *,
        alone: bool = True,
    ) -> None:
        self.ema_alpha = ema_alpha
        self.collapse = collapse
        self.quarantine_s = quarantine_s
        self.draft_cost = draft_cost
        self.alone = alone
        self._modes: dict[Mode, _ModeState] = {}
        self._by_class: dict[tuple[Mode, str], _ClassSpeed] = {}

    def _class(self, mode: Mode, cls: str) -> _ClassSpeed:
        key = (mode, cls)
        if key not in self._by_class:
            self._by_class[key] = _ClassSpeed(Ema(self.ema_alpha))
        return self._by_class[key]

    def _mode(self, mode: Mode) -> _ModeState:
        if mode not in self._modes:
            a = self.ema_alpha
            self._modes[mode] = _ModeState(Ema(a), Ema(a), Ema(a), Ema(a))
        return self._modes[mode]

    def record(self, mode: Mode, cls: str, m: Measurement, now: float, judged: bool = True) -> bool:
        """Fold one generation into the EMAs; return True if it was a collapse.

        A sample whose step rate is below ``collapse`` × the mode's step-rate EMA
        (with enough history, and only when generations run :attr:`alone`) is a
        strike and is not folded in;
        :data:`COLLAPSE_STRIKES` in a row quarantine the mode until
        ``now + quarantine_s``. With ``judged`` False (a generation held to a grammar,
        whose every step pays the grammar: on the 2-core CPU a JSON schema's answers ran
        at 4-6 tok/s where the mode's EMA was 20-60, and two in a row quarantined
        ngram-mod) such a sample is neither a strike nor folded in. A measurement of a
        mode on probation clears the probation (unless it collapses again).
        Generations under :data:`MIN_TOKENS` tokens are ignored.
        """
        if m.tokens < MIN_TOKENS or m.decode_tok_s <= 0:
            return False
        st = self._mode(mode)
        before = st.steps.value
        rate = m.step_rate(self.draft_cost)
        low = (
            self.alone
            and before is not None
            and st.steps.samples >= MIN_SAMPLES_FOR_COLLAPSE
            and rate < self.collapse * before
        )
        if low and not judged:
            return False
        if low:
            st.strikes += 1
            if st.strikes < COLLAPSE_STRIKES:
                return False  # one low sample is noise: neither folded in nor punished
            st.strikes = 0
            st.quarantined_until = now + self.quarantine_s
            st.on_probation = False
            st.collapses += 1
            return True  # a collapsed sample does not drag the EMA down
        st.strikes = 0
        st.speed.update(m.decode_tok_s)
        st.recent.append((now, m.decode_tok_s))
        st.steps.update(rate)
        per_class = self._class(mode, cls)
        per_class.ema.update(m.decode_tok_s)
        per_class.recent.append((now, m.decode_tok_s))
        if m.alpha is not None:
            st.alpha.update(m.alpha)
        if m.tau is not None:
            st.tau.update(m.tau)
        st.on_probation = False
        return False

    def adopt(self, mode: Mode, kind: str, value: float, samples: int, cls: str = "") -> None:
        """Take an EMA's value from shared state (:mod:`fronde.router.shared`).

        Args:
            mode: the mode.
            kind: ``speed``, ``alpha``, ``tau`` (per mode) or ``class`` (per class).
            value: the shared EMA's value.
            samples: how many measurements the shared EMA folded in.
            cls: the class, for ``kind == "class"``.
        """
        ema = self._class(mode, cls).ema if kind == "class" else getattr(self._mode(mode), kind)
        ema.value, ema.samples = value, max(ema.samples, samples)

    def impose_quarantine(self, mode: Mode, until: float) -> None:
        """Quarantine ``mode`` until ``until`` (monotonic s) as another replica decided."""
        st = self._mode(mode)
        if st.quarantined_until is None or st.quarantined_until < until:
            st.quarantined_until = until
            st.on_probation = False

    def speed(self, mode: Mode, cls: str | None = None) -> float | None:
        """EMA decode tok/s of ``mode`` (for class ``cls`` if given), or None if unmeasured."""
        if cls is not None:
            per_class = self._by_class.get((mode, cls))
            return per_class.ema.value if per_class else None
        st = self._modes.get(mode)
        return st.speed.value if st else None

    def trusted_speed(self, mode: Mode, cls: str, now: float) -> float | None:
        """The speed floors and probes rely on: the median of fresh recent samples.

        Returns:
            The median decode tok/s of this (mode, class)'s samples younger than
            :data:`STALE_S`, when there are at least :data:`MIN_TRUSTED_SAMPLES`; an
            EMA taken from other replicas (no local sample yet) with that many
            samples; else None (measure it again).
        """
        per_class = self._by_class.get((mode, cls))
        if per_class is None:
            return None
        fresh = [v for t, v in per_class.recent if now - t <= STALE_S]
        if len(fresh) >= MIN_TRUSTED_SAMPLES:
            return statistics.median(fresh)
        if not per_class.recent and per_class.ema.samples >= MIN_TRUSTED_SAMPLES:
            return per_class.ema.value  # shared by another replica
        return None

    def summary(self, mode: Mode, cls: str | None, now: float) -> SpeedSummary:
        """:func:`speed_summary` of ``mode``'s recent samples (of class ``cls`` if given)."""
        if cls is None:
            st = self._modes.get(mode)
            return speed_summary(st.recent if st else (), now)
        per_class = self._by_class.get((mode, cls))
        return speed_summary(per_class.recent if per_class else (), now)

    def classes(self) -> list[str]:
        """The classes measured on any mode, sorted."""
        return sorted({c for _, c in self._by_class})

    def quarantined(self, mode: Mode, now: float) -> bool:
        """True while ``mode`` is quarantined; on expiry it moves to probation."""
        st = self._modes.get(mode)
        if st is None or st.quarantined_until is None:
            return False
        if now < st.quarantined_until:
            return True
        st.quarantined_until = None
        st.on_probation = True
        return False

    def on_probation(self, mode: Mode, now: float) -> bool:
        """True when ``mode`` left quarantine and has not been probed since."""
        self.quarantined(mode, now)  # moves an expired quarantine to probation
        st = self._modes.get(mode)
        return bool(st and st.on_probation)

    def held_out(self, now: float) -> tuple[set[Mode], set[Mode]]:
        """The modes :meth:`quarantined` now, and those :meth:`on_probation`, in one pass.

        Over the modes with a record (no other is either): a plan reads both sets on
        every request, without a call per member of :class:`Mode`.
        """
        quarantined = {m for m in self._modes if self.quarantined(m, now)}
        return quarantined, {m for m in self._modes if self.on_probation(m, now)}

    def unavailable(self, now: float) -> set[Mode]:
        """Modes that must get no routed traffic now: quarantined or on probation."""
        quarantined, on_probation = self.held_out(now)
        return quarantined | on_probation

    def snapshot(self, now: float) -> dict[str, ModeView]:
        """JSON-ready state for ``/fronde/v1/router``: EMAs, α, τ, quarantines.

        ``speed`` is the mode's :class:`SpeedSummary` (the live page's figure),
        ``by_class_speed`` the same per class (its median is the trusted speed when
        its state is ``trusted``).
        """
        out: dict[str, ModeView] = {}
        for mode, st in self._modes.items():
            q = st.quarantined_until
            out[str(mode)] = {
                "decode_tok_s_ema": st.speed.value,
                "step_rate_ema": st.steps.value,
                "samples": st.speed.samples,
                "alpha_ema": st.alpha.value,
                "tau_ema": st.tau.value,
                "quarantined_for_s": round(q - now, 1) if q is not None and q > now else None,
                "on_probation": st.on_probation,
                "collapses": st.collapses,
                "by_class": {c: e.ema.value for (m, c), e in self._by_class.items() if m == mode},
                "by_class_trusted": {
                    c: self.trusted_speed(m, c, now) for (m, c) in self._by_class if m == mode
                },
                "speed": self.summary(mode, None, now).as_dict(),
                "by_class_speed": {
                    c: self.summary(m, c, now).as_dict() for (m, c) in self._by_class if m == mode
                },
            }
        return out
