"""The composition root: ``build_runtime(settings)`` builds every part once, by constructor.

Nothing is patched on after construction: the router gets its measurements, cache,
shared store (Redis, with ``shared.redis_url``) and event sink (the Prometheus
metrics) in its constructor, the swap scheduler gets its swap sink, and the
dispatcher gets the router, the backends and the client. :meth:`Runtime.running`
starts what runs (shared-state sync, backends) and stops it in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fronde.backends.client import BackendClient
from fronde.backends.connections import connections_per_server, make_http_client
from fronde.backends.pool import BackendPool
from fronde.backends.pool_plan import LOG_RUNS_KEPT, remote_plan, run_log_dir
from fronde.backends.single import with_fields
from fronde.backends.swap import SwapScheduler
from fronde.config import Settings
from fronde.errors import BackendError, ConfigError
from fronde.evidence.measurement import measurement_from_timings
from fronde.logging import get_logger
from fronde.metrics import Metrics, merge_backend_metrics
from fronde.modes import Mode
from fronde.request.dispatcher import Dispatcher
from fronde.router.building import build_router, cache_from, measurements_from
from fronde.router.choice import MODEL_PREFIX
from fronde.router.engine import Router
from fronde.router.shared import SharedState
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of

__all__ = ["LOG_RUNS_KEPT", "Runtime", "build_pool", "build_runtime"]

log = get_logger(__name__)

BACKEND_METRICS_TIMEOUT_S = 2.0
"""A backend's ``/metrics`` that takes longer is left out of that scrape, seconds."""

STEP_PROMPTS = (
    "The committee met on Tuesday to review the budget for the coming year. After a long "
    "discussion of the costs of the new building, the members agreed that",
    "A small boat left the harbour at dawn, its sails full of a cold northern wind, and "
    "by noon the fishermen on board could see",
)
"""The prompts :meth:`Runtime.time_passes` continues on each backend, plain prose: the
first warms the server up untimed, the second is timed. Two texts, because a server
that has just seen one drafts its repetition from ngram-mod's memory."""

STEP_TOKENS = 32
"""Tokens each pass-timing generation decodes (after one untimed warm-up)."""

STEP_TIMEOUT_S = 30.0
"""Longest a backend may take for its two pass-timing generations, s: one that hangs is
left untimed instead of holding ``/health`` at 503 for ``upstream.read_timeout_s``."""


def build_pool(settings: Settings) -> BackendPool:
    """Build (not start) the pool for ``settings``: binary, profile, one spec per mode.

    Raises:
        InstallError: no llama-server is installed and none is configured.
        ManifestError: the profile does not exist or is malformed.
    """
    proxy_only = remote_plan(settings)
    if proxy_only is not None:
        # Every mode served elsewhere (remote.<mode> each, or remote.all): no
        # llama-server, model or profile manifest is needed here.
        return BackendPool.from_plan(settings, proxy_only)
    profile = profile_of(settings)
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    return BackendPool.from_settings(settings, profile, binary, run_log_dir(settings.cache_dir))


@dataclass
class Runtime:
    """Everything one app serves with, built by :func:`build_runtime`.

    Attributes:
        settings: the settings tree.
        pool: the llama-server backends.
        client: the HTTP client to them.
        router: routing state and policy.
        metrics: the Prometheus instruments.
        dispatcher: runs requests (the API's one way in).
        swap: the swap scheduler with ``residency = "swap"``, else None.
        store: the Redis-shared state with ``shared.redis_url``, else None.
        on_fatal: called with a one-line reason when no backend could start.
        on_ready: called once with the modes up when the backends have started and
            at least one serves (the CLI prints its ready line then).
        started_at: when it was built, epoch seconds.
        warming: ``"starting"`` while the backends start and their passes are to be
            timed, ``"timing passes"`` while :meth:`time_passes` runs, else None:
            ``/health`` answers 503 with it as ``status`` until it is None.
    """

    settings: Settings
    pool: BackendPool
    client: BackendClient
    router: Router
    metrics: Metrics
    dispatcher: Dispatcher
    swap: SwapScheduler | None = None
    store: SharedState | None = None
    on_fatal: Callable[[str], None] | None = None
    on_ready: Callable[[list[Mode]], None] | None = None
    started_at: float = 0.0
    warming: str | None = None

    # --- views for the API -------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        """OpenAI ``GET /v1/models``: ``fronde`` (routed) and ``fronde:<mode>`` per mode.

        Modes left out of this pool are listed under ``unavailable`` with the reason,
        outside ``data`` so that tools offering a model picker do not offer them.
        """
        created = int(self.started_at)
        modes = [f"{MODEL_PREFIX}{m}" for m in Mode if m in self.pool.backends]
        return {
            "object": "list",
            "data": [
                {"id": i, "object": "model", "created": created, "owned_by": "fronde"}
                for i in [self.settings.public_model, *modes]
            ],
            "unavailable": [
                {"id": f"{MODEL_PREFIX}{m}", "reason": reason}
                for m, reason in self.pool.left_out.items()
            ],
        }

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Proxy and backend states: (ready to serve, ``/health`` body).

        Ready once the floor of last resort can serve: baseline when it runs,
        otherwise any mode; with swap residency, whatever is resident. Not while
        :attr:`warming`: passes to time (:meth:`time_passes`) hold ``/health`` until
        they are timed, so that a client that waits for it does not decode beside the
        timed generations (a request sent anyway is served).
        """
        ready = self.pool.ready_modes()
        if self.swap is not None:  # whatever is resident serves (and swaps bring the rest)
            floor_ready = bool(ready)
        elif Mode.BASELINE in self.pool.backends:
            floor_ready = Mode.BASELINE in ready
        else:
            floor_ready = bool(ready)
        status = "ok" if floor_ready else "unavailable"
        if self.warming is not None:
            floor_ready, status = False, self.warming
        return floor_ready, {
            "status": status,
            "uptime_s": round(time.time() - self.started_at, 1),
            "residency": self.settings.residency,
            "topology": self.pool.topology,
            "topology_why": self.pool.topology_why,
            "backends": self.pool.status(),
        }

    def state(self) -> dict[str, Any]:
        """The router's live state, with the swap scheduler's (``/fronde/v1/router``)."""
        state = self.router.snapshot()
        state["swap"] = self.swap.snapshot() if self.swap is not None else None
        return state

    async def backend_metrics(self) -> bytes:
        """Every ready llama-server's metrics, merged with a ``mode`` label.

        In single the one server is read once, labelled ``mode="single"``: its counters
        are every mode's together (a label per mode would count them five times).
        """
        ready = self.pool.ready_modes()
        labels: dict[str, Mode] = {str(m): m for m in ready}
        if self.pool.topology == "single" and ready:
            labels = {"single": ready[0]}

        async def one(label: str, mode: Mode) -> tuple[str, str]:
            url = self.pool.get(mode).url
            text = await self.client.get_text(url, "/metrics", BACKEND_METRICS_TIMEOUT_S)
            return label, text or ""

        texts = dict(await asyncio.gather(*(one(k, m) for k, m in labels.items())))
        return merge_backend_metrics(texts).encode()

    # --- life --------------------------------------------------------------------------

    async def _start_backends(self) -> None:
        # With passes to time, /health waits for them from the start: a request let in
        # as soon as baseline is up would decode beside the timed generations.
        book = self.router.counterfactual
        self.warming = "starting" if book is not None and book.own_baseline_step else None
        try:
            if self.swap is not None:
                await self.swap.start()  # only the first max_resident modes come up
            else:
                await self.pool.start()
            ready = self.pool.ready_modes()
            if ready and self.warming is not None:
                self.warming = "timing passes"
                await self.time_passes(ready)
        finally:
            self.warming = None
        if ready:
            url = self.settings.server.url
            log.info(
                "serve.ready",
                modes=[str(m) for m in ready],
                base_url=f"{url}/v1",
                ui=f"{url}/ui",
                upstream_client=self.settings.upstream.client,
            )
            if self.on_ready is not None:
                self.on_ready(ready)
            return
        reasons = "; ".join(
            f"{mode}: {info.get('error')}" for mode, info in self.pool.status().items()
        )
        log.error("serve.no_backend", reasons=reasons)
        if self.on_fatal is not None:
            self.on_fatal(f"no llama-server backend could start ({reasons})")

    async def time_passes(self, ready: list[Mode]) -> dict[Mode, float]:
        """Time one decode pass of each ready backend, when baseline runs flags of its own.

        Only with ``backend.plain_args`` (the counterfactual's ``own_baseline_step``):
        then a baseline pass and a speculative one cost different times by
        construction, and the router needs both before its first prediction. Each
        replayed mode's backend, one after another (two servers decoding at once on
        one GPU take turns, which would time the sharing), continues each of
        :data:`STEP_PROMPTS` greedily for :data:`STEP_TOKENS` tokens without the
        prompt cache, ignoring EOS; the second generation's ``timings`` give its pass
        (:meth:`~fronde.evidence.counterfactual.Counterfactual.seed_step`). A backend
        that fails or takes over :data:`STEP_TIMEOUT_S` is logged and left untimed
        (its ratio stays 1). The texts reach ngram-mod's pool on the server but not
        Fronde's mirror of it (a drift of two short texts, which the online
        calibration absorbs).

        Returns:
            mode → its step, ms a pass, for the modes timed.
        """
        book = self.router.counterfactual
        if book is None or not book.own_baseline_step or Mode.BASELINE not in ready:
            return {}
        warm, timed = (
            {
                "prompt": p,
                "n_predict": STEP_TOKENS,
                "temperature": 0.0,
                "cache_prompt": False,
                "ignore_eos": True,
            }
            for p in STEP_PROMPTS
        )
        steps: dict[Mode, float] = {}
        for mode in (m for m in book.modes if m in ready):
            url, fields = self.pool.get(mode).url, self.pool.fields(mode)
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    await self.client.post_json(url, "/completion", with_fields(warm, fields))
                    data = await self.client.post_json(
                        url, "/completion", with_fields(timed, fields)
                    )
            except (BackendError, TimeoutError) as exc:
                why = exc.message if isinstance(exc, BackendError) else f"over {STEP_TIMEOUT_S} s"
                log.warning("router.pass_timing_failed", mode=str(mode), error=why)
                continue
            m = measurement_from_timings(data.get("timings"))
            step = book.seed_step(mode, m) if m is not None else None
            if step is not None:
                steps[mode] = step
        log.info("router.passes_timed", pass_ms={str(m): round(v, 3) for m, v in steps.items()})
        return steps

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Sync shared state, start the backends in the background; stop all on exit.

        Backends start in the background, so ``/health`` answers 503 while they load.
        """
        self.started_at = time.time()
        self.pool.count_load_with(lambda url: self.client.in_flight[url])
        if self.settings.backend.pin_slots:
            self.client.pins.count_with(self.pool.local_slots)
        if self.store is not None:
            await self.store.start()
        starter = asyncio.create_task(self._start_backends())
        try:
            yield
        finally:
            if self.store is not None:
                await self.store.stop()
            starter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starter
            await self.dispatcher.hindsight.aclose()
            if self.swap is not None:
                await self.swap.stop()
            await self.pool.stop()
            await self.client.http.aclose()


@dataclass
class _Late:
    """Parts the metrics read at scrape time, built after the metrics themselves.

    The router reports to the metrics, and the metrics read the router.
    """

    router: Router | None = None
    swap: SwapScheduler | None = None


def _metrics(pool: BackendPool, late: _Late) -> Metrics:
    """The instruments, reading live values at scrape time."""

    def in_flight() -> dict[str, int]:
        return {str(m): n for m, n in late.router.in_flight.items()} if late.router else {}

    def queued() -> dict[str, int]:
        return {str(m): len(q) for m, q in late.swap.queues.items()} if late.swap else {}

    def alpha() -> dict[str, float]:
        if late.router is None:
            return {}
        snap = late.router.measurements.snapshot(time.monotonic())
        return {str(m): s["alpha_ema"] for m, s in snap.items() if s["alpha_ema"] is not None}

    return Metrics(
        up=lambda: {str(m): m in pool.ready_modes() for m in pool.backends},
        in_flight=in_flight,
        queued=queued,
        restarts=lambda: {str(m): n for m, n in pool.restarts.items()},
        alpha=alpha,
    )


def build_runtime(
    settings: Settings,
    pool: BackendPool | None = None,
    on_fatal: Callable[[str], None] | None = None,
    on_ready: Callable[[list[Mode]], None] | None = None,
) -> Runtime:
    """Build every part of a Fronde server for ``settings`` (nothing starts yet).

    Args:
        settings: the settings tree.
        pool: a pool to use instead of :func:`build_pool` (tests pass one with a fake
            llama-server).
        on_fatal: called with a one-line reason when no backend could start.
        on_ready: called once with the modes up when the backends have started.

    Raises:
        InstallError, ManifestError: from :func:`build_pool`.
        ConfigError: no mode can run.
    """
    the_pool = pool if pool is not None else build_pool(settings)
    if not the_pool.backends:
        reasons = "; ".join(f"{m}: {why}" for m, why in the_pool.left_out.items())
        raise ConfigError(f"no mode can run ({reasons or 'the `modes` setting is empty'})")
    late = _Late()
    metrics = _metrics(the_pool, late)
    swap: SwapScheduler | None = None
    if settings.residency == "swap":
        sw = settings.swap
        swap = SwapScheduler(
            the_pool,
            [m for m in Mode if m in the_pool.backends],
            max_resident=sw.max_resident,
            max_epoch_s=sw.max_epoch_s,
            max_wait_s=sw.max_wait_s,
            fallback=sw.fallback,
            policy=sw.policy,
            on_swap=metrics.swap,
        )
    measurements, cache = measurements_from(settings), cache_from(settings)
    store = None
    if settings.shared.redis_url:
        sh = settings.shared
        store = SharedState(sh.redis_url, measurements, cache, sh.namespace, sh.sync_s)
    router = build_router(
        settings, measurements=measurements, cache=cache, store=store, events=metrics
    )
    late.router, late.swap = router, swap
    per_server = connections_per_server(settings.backend.parallel)
    client = BackendClient(make_http_client(settings.upstream, per_server))
    dispatcher = Dispatcher(settings, the_pool, client, router, swap)
    return Runtime(
        settings, the_pool, client, router, metrics, dispatcher, swap, store, on_fatal, on_ready
    )
