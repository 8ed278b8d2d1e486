"""Prometheus metrics: one registry per app, served at ``GET /metrics``.

Names follow Prometheus conventions (base units, ``_total`` for counters):

- ``fronde_requests_total{path, status, mode, route}``: HTTP requests answered;
  ``mode`` and ``route`` are the ``x-fronde-mode`` / ``x-fronde-class`` headers
  (empty for requests that were not routed).
- ``fronde_generated_tokens_total{mode}``: tokens generated, per backend mode.
- ``fronde_decode_tokens_per_second{mode}``: decode tok/s of each finished
  generation (llama-server ``predicted_per_second``, prefill excluded).
- ``fronde_draft_tokens_total{mode}`` / ``fronde_draft_accepted_tokens_total{mode}``:
  drafted and accepted tokens; α = accepted ÷ drafted.
- ``fronde_quarantines_total{mode}``: collapses that quarantined a mode.
- ``fronde_backend_up{mode}``: 1 when the mode's llama-server is ready.
- ``fronde_in_flight{mode}``: requests running on each backend.
- ``fronde_backend_restarts_total{mode}``: crashed llama-servers restarted by the pool.
- ``fronde_probes_total{mode, outcome}``: probes of the aggressive mode, ``won`` when
  it finished the answer, ``lost`` when the floor did.
- ``fronde_overhead_seconds``: Fronde's own time before the upstream call (parse,
  classify, plan; a probe's render and tokenize), decode-gate wait excluded.
- ``fronde_alpha{mode}``: the acceptance rate α's EMA per mode (gauge).
- ``fronde_swaps_total``, ``fronde_swap_seconds``, ``fronde_swap_queue_depth``: swap
  residency (see :mod:`fronde.backends.swap`).
- ``fronde_llamacpp_*{mode}``: each backend's own llama-server metrics
  (``llamacpp:*``), renamed and labelled by mode (:func:`merge_backend_metrics`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fronde.backends.swap_ports import SwapRecord
from fronde.modes import Mode
from fronde.timings import Timings

__all__ = ["DECODE_BUCKETS", "OVERHEAD_BUCKETS", "Metrics", "merge_backend_metrics"]

OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
"""Histogram buckets for Fronde's overhead, seconds (issue 9's goal: p50 ≤ 1 ms)."""

_LLAMACPP_LINE = re.compile(r"^(# (?:HELP|TYPE) )?llamacpp:(\w+)(.*)$")


def merge_backend_metrics(texts: dict[str, str]) -> str:
    """Merge llama-server ``/metrics`` texts into one, renamed and labelled by mode.

    ``llamacpp:prompt_tokens_total 12`` from the ``baseline`` backend becomes
    ``fronde_llamacpp_prompt_tokens_total{mode="baseline"} 12``; ``HELP`` and ``TYPE``
    lines are kept once per metric. Lines in another shape are dropped.

    Args:
        texts: mode → that backend's exposition text.

    Returns:
        Prometheus exposition text (ends with a newline, or empty).
    """
    heads: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for mode, text in texts.items():
        for line in text.splitlines():
            m = _LLAMACPP_LINE.match(line.strip())
            if m is None:
                continue
            head, name, rest = m.group(1), f"fronde_llamacpp_{m.group(2)}", m.group(3)
            if head:
                heads.setdefault(name, [])
                if len(heads[name]) < 2:
                    heads[name].append(f"{head}{name}{rest}")
                continue
            labels, _, value = rest.strip().rpartition(" ")
            inner = labels.strip()[1:-1] if labels.strip().startswith("{") else ""
            joined = f'mode="{mode}"' + (f",{inner}" if inner else "")
            samples.setdefault(name, []).append(f"{name}{{{joined}}} {value}")
    out: list[str] = []
    for name, lines in samples.items():
        out += heads.get(name, [])[:2] + lines
    return "\n".join(out) + "\n" if out else ""


DECODE_BUCKETS = (5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 200.0, 400.0, 800.0, 1600.0)
"""Histogram buckets for decode tok/s: gemma-270m on 2 CPU cores decodes ~45 tok/s,
ngram modes 2-3× that; a GPU runs into the hundreds."""


class _Live(Collector):
    """Gauges read at scrape time from the pool and the router."""

    def __init__(
        self,
        up: Callable[[], dict[str, bool]],
        in_flight: Callable[[], dict[str, int]],
        queued: Callable[[], dict[str, int]],
        restarts: Callable[[], dict[str, int]],
        alpha: Callable[[], dict[str, float]],
    ) -> None:
        self._up = up
        self._in_flight = in_flight
        self._queued = queued
        self._restarts = restarts
        self._alpha = alpha

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "fronde_backend_up", "1 when the mode's backend is ready", labels=["mode"]
        )
        for mode, ready in self._up().items():
            up.add_metric([mode], 1.0 if ready else 0.0)
        yield up
        busy = GaugeMetricFamily(
            "fronde_in_flight", "requests running per backend", labels=["mode"]
        )
        for mode, n in self._in_flight().items():
            busy.add_metric([mode], float(n))
        yield busy
        queued = GaugeMetricFamily(
            "fronde_swap_queue_depth",
            "requests waiting for their mode to be swapped in (swap residency)",
            labels=["mode"],
        )
        for mode, n in self._queued().items():
            queued.add_metric([mode], float(n))
        yield queued
        restarts = CounterMetricFamily(
            "fronde_backend_restarts",
            "crashed llama-servers restarted by the pool",
            labels=["mode"],
        )
        for mode, n in self._restarts().items():
            restarts.add_metric([mode], float(n))
        yield restarts
        alpha = GaugeMetricFamily(
            "fronde_alpha", "acceptance rate α (accepted ÷ drafted), EMA per mode", labels=["mode"]
        )
        for mode, a in self._alpha().items():
            alpha.add_metric([mode], a)
        yield alpha


class Metrics:
    """The app's instruments, in their own :class:`CollectorRegistry`.

    Args:
        up: returns mode → backend ready, at scrape time.
        in_flight: returns mode → requests running, at scrape time.
        queued: returns mode → requests waiting for residency, at scrape time.
        restarts: returns mode → backend restarts so far, at scrape time.
        alpha: returns mode → α EMA, at scrape time (modes that drafted).
    """

    def __init__(
        self,
        up: Callable[[], dict[str, bool]],
        in_flight: Callable[[], dict[str, int]],
        queued: Callable[[], dict[str, int]] = dict,
        restarts: Callable[[], dict[str, int]] = dict,
        alpha: Callable[[], dict[str, float]] = dict,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "fronde_requests",
            "HTTP requests answered",
            ["path", "status", "mode", "route"],
            registry=r,
        )
        self.tokens = Counter("fronde_generated_tokens", "tokens generated", ["mode"], registry=r)
        self.decode = Histogram(
            "fronde_decode_tokens_per_second",
            "decode tok/s per finished generation (prefill excluded)",
            ["mode"],
            buckets=DECODE_BUCKETS,
            registry=r,
        )
        self.drafted = Counter("fronde_draft_tokens", "draft tokens proposed", ["mode"], registry=r)
        self.accepted = Counter(
            "fronde_draft_accepted_tokens", "draft tokens accepted", ["mode"], registry=r
        )
        self.quarantines = Counter(
            "fronde_quarantines", "collapses that quarantined a mode", ["mode"], registry=r
        )
        self.swaps = Counter(
            "fronde_swaps",
            "backend swaps (swap residency): stop one llama-server, start another",
            ["from_mode", "to_mode", "outcome"],
            registry=r,
        )
        self.swap_seconds = Histogram(
            "fronde_swap_seconds",
            "wall time of one swap: stop, start, healthy",
            buckets=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0),
            registry=r,
        )
        self.probes = Counter(
            "fronde_probes",
            "probes of the aggressive mode: won (it finished the answer) or lost",
            ["mode", "outcome"],
            registry=r,
        )
        self.overhead = Histogram(
            "fronde_overhead_seconds",
            "Fronde's own time before the upstream call, decode-gate wait excluded",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        r.register(_Live(up, in_flight, queued, restarts, alpha))

    def finished(
        self, overhead_ms: float | None, probed: str | None, probe_won: bool | None
    ) -> None:
        """Record one finished request: its overhead and, if it probed, the outcome."""
        if overhead_ms is not None:
            self.overhead.observe(overhead_ms / 1000)
        if probed is not None and probe_won is not None:
            self.probes.labels(probed, "won" if probe_won else "lost").inc()

    def swap(self, record: SwapRecord) -> None:
        """Record one finished swap (a :class:`~fronde.backends.swap.SwapScheduler` record)."""
        outcome = "ok" if record.get("ok") else "failed"
        self.swaps.labels(record.get("from") or "", record["to"], outcome).inc()
        self.swap_seconds.observe(float(record.get("seconds") or 0.0))

    def generation(self, mode: Mode, timings: Timings, collapsed: bool) -> None:
        """Record one finished generation from llama-server's ``timings``.

        Tokens, decode tok/s, drafted and accepted; ``collapsed``: it quarantined the
        mode. (:class:`~fronde.router.engine.RouterEvents`.)
        """
        m = str(mode)
        self.tokens.labels(m).inc(timings.predicted_n)
        self.decode.labels(m).observe(timings.predicted_per_second)
        if timings.draft_n:
            self.drafted.labels(m).inc(timings.draft_n)
            self.accepted.labels(m).inc(timings.draft_n_accepted)
        if collapsed:
            self.quarantines.labels(m).inc()
