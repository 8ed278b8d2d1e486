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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["DECODE_BUCKETS", "Metrics"]

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
    ) -> None:
        self._up = up
        self._in_flight = in_flight
        self._queued = queued

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


class Metrics:
    """The app's instruments, in their own :class:`CollectorRegistry`.

    Args:
        up: returns mode → backend ready, at scrape time.
        in_flight: returns mode → requests running, at scrape time.
        queued: returns mode → requests waiting for residency, at scrape time.
    """

    def __init__(
        self,
        up: Callable[[], dict[str, bool]],
        in_flight: Callable[[], dict[str, int]],
        queued: Callable[[], dict[str, int]] = dict,
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
        r.register(_Live(up, in_flight, queued))

    def swap(self, record: dict[str, Any]) -> None:
        """Record one finished swap (a :class:`~fronde.backends.swap.SwapScheduler` record)."""
        outcome = "ok" if record.get("ok") else "failed"
        self.swaps.labels(record.get("from") or "", record["to"], outcome).inc()
        self.swap_seconds.observe(float(record.get("seconds") or 0.0))

    def generation(
        self, mode: str, tokens: int, decode_tok_s: float, drafted: int, accepted: int
    ) -> None:
        """Record one finished generation (tokens, decode tok/s, drafted and accepted)."""
        self.tokens.labels(mode).inc(tokens)
        self.decode.labels(mode).observe(decode_tok_s)
        if drafted:
            self.drafted.labels(mode).inc(drafted)
            self.accepted.labels(mode).inc(accepted)
