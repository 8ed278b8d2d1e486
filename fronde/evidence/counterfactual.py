"""Counterfactual measurement: what every model-free mode would have done on each request.

A probe measures one candidate on 48 tokens and pays a hand-over; this book measures
every n-gram mode on every answer, at no decoding cost. Once a request is answered the
proxy has its prompt's and its answer's token ids; :mod:`fronde.evidence.ngram_replay` replays
what baseline, ngram-simple, ngram-mod and the cascade would have drafted and accepted
on them, and the verify-cost model turns the counts into decode time:

    decode_ms(m) = step_ms × k_m × (passes_m + c_m × drafted_m)

- ``step_ms``: the time of one target pass on *this* request, from the mode that ran,
  ``decode_ms ÷ (passes + c × drafted)`` with its real counts (llama-server
  ``timings``); it carries the machine's load and the context length of the moment.
- ``c_m``: what a drafted token of mode ``m`` costs its server, in passes: the fit over
  the answers ``m`` served (:mod:`fronde.evidence.served_cost`, once 8 of them drafted;
  ``router.fit_draft_cost``), else the one ``fronde bench verdict`` saved for this
  machine (``prior_costs``), else ``router.draft_cost``
  (:data:`~fronde.evidence.measure.DRAFT_COST`). One ``c`` for every mode priced
  ngram-simple's drafts at 0.2 of a pass where its server paid 0.5, and the book sent
  agent-session steps to it that ngram-mod decoded faster.
- ``passes_m``, ``drafted_m``: the replay's counts for mode ``m``. ngram-mod and the
  cascade replay against a **mirror** of their server's table, fed with every request
  that server saw, so their memory across requests is in the estimate; a request sent
  elsewhere is replayed on a fork and leaves the mirror as it was.
- ``k_m``: the online calibration, an EMA of actual ÷ replayed decode time over the
  requests ``m`` served (1 until then): replay error, re-tokenized answers and a mirror
  that drifted all land here.
- ``step_ms`` is the served mode's, taken as every mode's: a pass that costs more on
  one server (its drafting work, a bigger verify batch) is not modelled. One
  exception, ``own_baseline_step``: when the baseline backend runs flags of its own
  (``backend.plain_args``, e.g. ``--backend-sampling``, which on the H200 made
  gemma's plain pass 1.3× faster at one request and no speculative server can use),
  a pass differs between baseline and the others by construction, and baseline's
  time against a speculative mode's is scaled by the ratio of their **timed passes**
  (``pass_ms(baseline) ÷ pass_ms(served)``, and its inverse): one generation on each
  backend, one after the other, before the first request
  (:meth:`Counterfactual.seed_step`), so that both were timed under the same
  conditions. The served mode's step EMA is not used for it: only the served mode's
  moves, with the load and the context, and against the other's stale value the
  ratio would cancel exactly the slowdown it should predict. Otherwise each mode's
  own step time is an EMA reported, not used (it moved 30 % with the contexts of one
  session on 2 CPU cores; ``results/verdict-cpu-gemma-270m-20261202-counterfactual-stepcost/``).

Each request then gives every replayable mode a sample of its speed-up over baseline,
``decode_ms(baseline) ÷ decode_ms(m)``, folded into an EMA per **bucket**: the static
class and the prompt's self-overlap (:mod:`fronde.evidence.bucket`). Before a request is
generated, :meth:`Counterfactual.predict` reads its bucket; the policy
(:func:`~fronde.router.policy.plan_route`) takes the best prediction and, within
``band``, the floor, whose server keeps its n-gram memory whole. The prediction made
for the chosen mode is compared with its actual decode tok/s afterwards
(:meth:`Counterfactual.errors`).

Pure bookkeeping, no I/O; the dispatcher fetches the token ids and calls
:meth:`Counterfactual.observe`.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from fronde.evidence.counterfactual_view import CounterfactualView, Observation
from fronde.evidence.measurement import DRAFT_COST, EMA_ALPHA, MIN_TOKENS, Ema, Measurement
from fronde.evidence.ngram_replay import (
    NgramModTable,
    ShadowStats,
    shadow_cascade,
    shadow_ngram_mod,
    shadow_ngram_simple,
)
from fronde.evidence.paired import PairedGain
from fronde.evidence.served_cost import ServedCostFit
from fronde.modes import Mode, SpeculationSettings

__all__ = [
    "MIN_BUCKET_SAMPLES",
    "REPLAYABLE",
    "Counterfactual",
    "Observation",
]

REPLAYABLE = (Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE)
"""Modes the replay can stand in for: the model-free ones (a draft model's drafts need it)."""

MIN_BUCKET_SAMPLES = 2
"""Requests a bucket needs before its predictions are used."""


ERRORS_KEPT = 200
"""Recent prediction errors kept for their median."""

MIN_MODE_ERRORS = 5
"""Predictions of a mode checked against its actual speed before its median error counts.

:meth:`Counterfactual.mode_errors`; with fewer, the median would be one or two answers'.
"""


_Pairs = dict[tuple[Mode, Mode], PairedGain]


@dataclass
class _Bucket:
    ratio: dict[Mode, Ema] = field(default_factory=dict[Mode, Ema])  # speed-up over baseline
    speed: dict[Mode, Ema] = field(default_factory=dict[Mode, Ema])  # decode tok/s
    pairs: _Pairs = field(default_factory=_Pairs)  # ln(speed a ÷ speed b), one per pair
    samples: int = 0


class Counterfactual:
    """Counterfactual speeds per bucket, the n-gram mirrors, and the prediction errors.

    Args:
        spec: the speculation settings the backends run with (ngram-mod's table).
        modes: the modes running here; only those among :data:`REPLAYABLE` are replayed.
        draft_cost: verify cost of a drafted token, in decode steps (``c``).
        ema_alpha: EMA smoothing weight.
        band: within this fraction of the best prediction the floor is kept.
        own_baseline_step: the baseline backend's pass is timed apart from the others'
            (it runs flags of its own; see the module docstring).
        fit_cost: price a mode's drafted tokens by its server's fit once it has one,
            by ``prior_costs`` before (:meth:`cost`); False: ``draft_cost`` for every mode.
        prior_costs: mode → the draft cost its server paid on this machine before.
    """

    def __init__(
        self,
        spec: SpeculationSettings,
        modes: Collection[Mode],
        draft_cost: float = DRAFT_COST,
        ema_alpha: float = EMA_ALPHA,
        band: float = 0.03,
        own_baseline_step: bool = False,
        fit_cost: bool = True,
        prior_costs: Mapping[Mode, float] | None = None,
    ) -> None:
        self.spec = spec
        self.fit_cost = fit_cost
        self.prior_costs = dict(prior_costs or {}) if fit_cost else {}
        self.modes = tuple(m for m in REPLAYABLE if m in modes)
        self.draft_cost = draft_cost
        self.ema_alpha = ema_alpha
        self.band = band
        self.own_baseline_step = own_baseline_step
        self.mirrors: dict[Mode, NgramModTable] = {
            m: self._table() for m in (Mode.NGRAM_MOD, Mode.CASCADE) if m in self.modes
        }
        self.served_costs: dict[Mode, ServedCostFit] = {}
        self.calibration: dict[Mode, Ema] = {}
        self.step_ms: dict[Mode, Ema] = {}
        self.pass_ms: dict[Mode, float] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._errors: dict[str, deque[float]] = {
            "predicted": deque(maxlen=ERRORS_KEPT),
            "replay": deque(maxlen=ERRORS_KEPT),
        }
        self._mode_errors: dict[Mode, deque[float]] = {}
        self._mode_medians: dict[Mode, float] = {}  # read per request: kept, not recomputed

    @property
    def compares(self) -> bool:
        """Whether the book replays two modes or more: with one there is nothing to compare."""
        return len(self.modes) >= 2

    def _table(self) -> NgramModTable:
        s = self.spec
        return NgramModTable(s.ngram_mod_n_match, s.ngram_mod_n_max, s.ngram_mod_n_min)

    def seed_step(self, mode: Mode, m: Measurement) -> float | None:
        """Record ``mode``'s timed pass: one generation made to time its backend.

        For a generation the runtime makes before real requests come (when
        ``own_baseline_step``), each backend in turn. The pass, ms, goes to
        :attr:`pass_ms` (what :meth:`pass_ratio` reads) and to the step EMA.

        Returns:
            The pass, ms, or None when ``m`` is shorter than
            :data:`~fronde.evidence.measure.MIN_TOKENS`, has no decode time, or no pass.
        """
        work = self._measured_work(m, mode)
        if m.tokens < MIN_TOKENS or m.decode_ms <= 0 or work <= 0:
            return None
        step = m.decode_ms / work
        self.pass_ms[mode] = step
        self.step_ms.setdefault(mode, Ema(self.ema_alpha)).update(step)
        return step

    def pass_ratio(self, mode: Mode, served: Mode) -> float:
        """How much longer a pass of ``mode``'s backend takes than one of ``served``'s.

        1.0 unless ``own_baseline_step``, exactly one of the two is baseline and both
        passes were timed (:meth:`seed_step`): then ``pass_ms(mode) ÷ pass_ms(served)``.
        """
        if not self.own_baseline_step or (mode is Mode.BASELINE) == (served is Mode.BASELINE):
            return 1.0
        a, b = self.pass_ms.get(mode), self.pass_ms.get(served)
        return a / b if a and b else 1.0

    def cost(self, mode: Mode) -> float:
        """A drafted token of ``mode``, in passes (:mod:`fronde.evidence.served_cost`).

        Its server's fit over the answers ``mode`` served, else its prior, else ``c``.
        """
        fit = self.served_costs.get(mode) if self.fit_cost else None
        fitted = fit.draft_cost() if fit is not None else None
        return fitted if fitted is not None else self.prior_costs.get(mode, self.draft_cost)

    def _measured_work(self, m: Measurement, mode: Mode) -> float:
        """A real generation's cost-weighted passes: tokens − accepted + c(mode) × drafted."""
        return m.tokens - m.accepted + self.cost(mode) * m.drafted

    def _work(self, st: ShadowStats, mode: Mode) -> float:
        """Cost-weighted target passes: passes + c(mode) × drafted."""
        return st.passes + self.cost(mode) * st.drafted

    def _table_for(self, mode: Mode, served: Mode) -> NgramModTable:
        """``mode``'s mirror when its server answered, else a fork that leaves it as it was."""
        mirror = self.mirrors[mode]
        return mirror if mode is served else mirror.fork()

    def replay(
        self, served: Mode, prompt: Sequence[int], generated: Sequence[int], budget: int | None
    ) -> dict[Mode, ShadowStats]:
        """Replay every replayable mode over a request's ids; the served mode's mirror learns.

        Args:
            served: the mode whose server answered (its mirror takes the request in).
            prompt: the prompt's token ids.
            generated: the answer's token ids.
            budget: the request's token budget (None: the answer's length).
        """
        out: dict[Mode, ShadowStats] = {}
        n = len(generated)
        for mode in self.modes:
            match mode:
                case Mode.BASELINE:
                    out[mode] = ShadowStats(n, 0, 0, max(n, 1))
                case Mode.NGRAM_SIMPLE:
                    out[mode] = shadow_ngram_simple(prompt, generated, n_predict=budget)
                case Mode.NGRAM_MOD:
                    table = self._table_for(mode, served)
                    out[mode] = shadow_ngram_mod(prompt, generated, table=table, n_predict=budget)
                case _:  # the cascade
                    table = self._table_for(mode, served)
                    out[mode] = shadow_cascade(prompt, generated, table=table, n_predict=budget)
        return out

    def seen(self, served: Mode, prompt: Sequence[int], generated: Sequence[int]) -> None:
        """A request the book does not measure (forced, probed) still reached a server's table."""
        if served in self.mirrors:
            self.replay(served, prompt, generated, None)

    def observe(
        self,
        bucket: str,
        served: Mode,
        m: Measurement,
        stats: Mapping[Mode, ShadowStats],
        *,
        predicted_tok_s: float | None = None,
    ) -> Observation | None:
        """Turn one request's replay into counterfactual speeds and fold them in.

        Args:
            bucket: the request's bucket (:func:`~fronde.evidence.bucket.bucket_of`).
            served: the mode that ran.
            m: its measurement (real counts and decode time).
            stats: :meth:`replay`'s result for the same request.
            predicted_tok_s: what was predicted for ``served`` before generating, if
                anything; its error is recorded.

        Returns:
            The observation, or None when the request is too short to measure
            (:data:`~fronde.evidence.measure.MIN_TOKENS`), lacks a decode time, or its
            mode is not replayed.
        """
        if served not in stats or m.tokens < MIN_TOKENS or m.decode_ms <= 0:
            return None
        real_work = self._measured_work(m, served)
        if real_work <= 0:
            return None
        step_ms = m.decode_ms / real_work
        own = self._work(stats[served], served)
        cal = self.calibration.setdefault(served, Ema(self.ema_alpha))
        replay_error = abs(step_ms * own * (cal.value or 1.0) / m.decode_ms - 1.0)
        if own > 0:
            cal.update(m.decode_ms / (step_ms * own))
        speed: dict[Mode, float] = {}
        for mode, st in stats.items():
            k = self.calibration[mode].value if mode in self.calibration else None
            ms = step_ms * self.pass_ratio(mode, served) * (k or 1.0) * self._work(st, mode)
            if ms > 0:
                speed[mode] = m.tokens / (ms / 1000.0)
        self.step_ms.setdefault(served, Ema(self.ema_alpha)).update(step_ms)
        paid = self.served_costs.setdefault(served, ServedCostFit())
        paid.add(m.tokens - m.accepted, m.drafted, m.decode_ms)
        b = self._buckets.setdefault(bucket, _Bucket())
        base = speed.get(Mode.BASELINE)
        for mode, tok_s in speed.items():
            b.speed.setdefault(mode, Ema(self.ema_alpha)).update(tok_s)
            if base:
                b.ratio.setdefault(mode, Ema(self.ema_alpha)).update(tok_s / base)
        for i, x in enumerate(speed):  # one per pair: (y, x) is (x, y) read backwards
            for y in list(speed)[i + 1 :]:
                b.pairs.setdefault((x, y), PairedGain(self.ema_alpha)).update(speed[x], speed[y])
        b.samples += 1
        self._errors["replay"].append(replay_error)
        if predicted_tok_s is not None and m.decode_tok_s > 0:
            error = abs(predicted_tok_s / m.decode_tok_s - 1.0)
            self._errors["predicted"].append(error)
            kept = self._mode_errors.setdefault(served, deque(maxlen=ERRORS_KEPT))
            kept.append(error)
            if len(kept) >= MIN_MODE_ERRORS:
                self._mode_medians[served] = statistics.median(kept)
        return Observation(served, speed, m.decode_tok_s, replay_error, dict(stats))

    def predict(self, bucket: str) -> dict[Mode, float]:
        """Predicted decode tok/s of each replayable mode for a request of ``bucket``.

        Empty until the bucket has :data:`MIN_BUCKET_SAMPLES` requests.
        """
        b = self._buckets.get(bucket)
        if b is None or b.samples < MIN_BUCKET_SAMPLES:
            return {}
        return {m: e.value for m, e in b.speed.items() if e.value is not None}

    def speedups(self, bucket: str) -> dict[Mode, float]:
        """Predicted speed-up over baseline of each mode for ``bucket`` (empty: not yet)."""
        b = self._buckets.get(bucket)
        if b is None or b.samples < MIN_BUCKET_SAMPLES:
            return {}
        return {m: e.value for m, e in b.ratio.items() if e.value is not None}

    def sure_gains(self, bucket: str, sigmas: float) -> dict[tuple[Mode, Mode], float]:
        """(a, b) → the speed ratio a ÷ b that ``bucket``'s paired samples support.

        ``sigmas`` standard errors below their weighted mean
        (:meth:`~fronde.evidence.paired.PairedGain.lower`); empty until the bucket has
        :data:`MIN_BUCKET_SAMPLES` requests, and with ``sigmas`` 0 (no such bar).
        """
        b = self._buckets.get(bucket)
        if b is None or b.samples < MIN_BUCKET_SAMPLES or sigmas <= 0:
            return {}
        lows = {(x, y): g.lower(sigmas) for (x, y), g in b.pairs.items()}
        lows |= {(y, x): g.lower(sigmas, reverse=True) for (x, y), g in b.pairs.items()}
        return {pair: low for pair, low in lows.items() if low is not None}

    def errors(self) -> dict[str, float | None]:
        """Median absolute relative errors, None while unmeasured.

        ``predicted``: the chosen mode's prediction before generating against its
        actual decode tok/s. ``replay``: the served mode's replay against its actual
        decode time, after the fact.
        """
        return {k: statistics.median(v) if v else None for k, v in self._errors.items()}

    def mode_errors(self) -> dict[Mode, float]:
        """Each mode's median error on its own predictions: |predicted ÷ actual − 1|.

        Only the predictions made for a request the mode then served (the ``predicted``
        error of :meth:`errors`, split by mode), and only for a mode with
        :data:`MIN_MODE_ERRORS` of them. The router reads it with parallel slots
        (:meth:`~fronde.router.engine.Router.plan`): a mode must beat the floor's
        prediction by its own error as well as by the band. On the H200 (gemma, c = 1,
        ``results/load-gpu-h200-cpu-gemma-270m-20261204-c1f``) the book sent 17 requests
        to ngram-simple or cascade predicted at 730–920 tok/s, and plain decoding was
        faster on 16 of them: it had missed ngram-simple by a median 57 % and cascade by
        41 % (baseline 3 %), where the band is 3 %. A mode the bar keeps off is not
        served, so its error stands until a bucket predicts it above the bar again.
        """
        return dict(self._mode_medians)

    def snapshot(self) -> CounterfactualView:
        """JSON-ready state for ``/fronde/v1/router``."""
        return {
            "band": self.band,
            "draft_cost": self.draft_cost,
            "own_baseline_step": self.own_baseline_step,
            "pass_ms": {str(m): v for m, v in self.pass_ms.items()},
            "calibration": {str(m): e.value for m, e in self.calibration.items()},
            "step_ms": {str(m): e.value for m, e in self.step_ms.items()},
            "mirror_entries": {str(m): len(t) for m, t in self.mirrors.items()},
            "median_error": self.errors(),
            "errors_counted": {k: len(v) for k, v in self._errors.items()},
            "mode_errors": {str(m): v for m, v in self.mode_errors().items()},
            "draft_cost_by_mode": {
                str(m): self.cost(m) for m in self.modes if m is not Mode.BASELINE
            },
            "buckets": {
                key: {
                    "samples": b.samples,
                    "decode_tok_s": {str(m): e.value for m, e in b.speed.items()},
                    "speedup": {str(m): e.value for m, e in b.ratio.items()},
                }
                for key, b in self._buckets.items()
            },
        }
