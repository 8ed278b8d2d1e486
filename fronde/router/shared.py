"""Router state shared through Redis, so that Fronde replicas learn together.

Several Fronde replicas behind an ordinary load balancer each keep their own
:class:`~fronde.router.engine.Router`; with ``shared.redis_url`` set they also
share, in one Redis:

- the prompt-hash cache: ``{ns}:route:{key}`` → mode, with the cache's TTL. A
  replica that misses locally asks Redis before planning, so a prompt routed on
  replica A is a cache hit on replica B;
- the EMAs: one hash ``{ns}:ema`` with a field per EMA (``speed|mode``,
  ``alpha|mode``, ``tau|mode``, ``class|mode|cls``) and its sample count
  (``...#n``), updated atomically by a Lua script with the same formula as
  :class:`~fronde.evidence.measure.Ema`; every ``sync_s`` each replica adopts them;
- quarantines: ``{ns}:quarantine:{mode}`` with the quarantine's remaining time as
  its expiry.

The local state stays authoritative for planning (planning is synchronous and
never waits on Redis); Redis is written through in background tasks and read
by the periodic sync and the one cache lookup per request. Losing Redis
degrades each replica to local state: the failure is logged once
(``shared_state.lost``), no request fails, and the sync keeps trying until
Redis answers again (``shared_state.restored``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import Measurement
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.router.cache import RouteCache
from fronde.router.ports import StoreView

__all__ = ["REDIS_TIMEOUT_S", "SharedState"]

log = get_logger(__name__)

REDIS_TIMEOUT_S = 0.25
"""Connect and command timeout, seconds: a slow Redis must not slow requests down."""

# KEYS[1]: the EMA hash; ARGV: field, x, weight. Returns the new value as a string.
# The same formula as fronde.evidence.measure.Ema: value ← w·x + (1 − w)·value.
_EMA_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local x, w = tonumber(ARGV[2]), tonumber(ARGV[3])
local new = x
if old then new = w * x + (1 - w) * tonumber(old) end
redis.call('HSET', KEYS[1], ARGV[1], tostring(new))
redis.call('HINCRBY', KEYS[1], ARGV[1] .. '#n', 1)
return tostring(new)
"""


class SharedState:
    """Write-through and periodic sync of one router's state with Redis.

    Implements :class:`~fronde.router.engine.StateStore`; it holds the router's
    measurements and cache, never the router itself (no back-reference).

    Args:
        url: ``redis://host:port/db``.
        measurements: the replica's EMAs and quarantines (synced both ways).
        cache: the replica's prompt-hash cache (routes are shared).
        namespace: key prefix, so that several Fronde clusters share one Redis.
        sync_s: seconds between two syncs of EMAs and quarantines.
    """

    def __init__(
        self,
        url: str,
        measurements: Measurements,
        cache: RouteCache,
        namespace: str = "fronde",
        sync_s: float = 1.0,
    ) -> None:
        self.url = url
        self.measurements = measurements
        self.cache = cache
        self.version = 0
        """Bumped on every sync that adopted shared state (the live page polls it)."""
        self.ns = namespace
        self.sync_s = sync_s
        self.redis = aioredis.Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
            url,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
            decode_responses=True,
            # After a Redis restart the pooled connections are dead: retry a command
            # once on a fresh connection rather than drop the write (seen in a trial).
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._ema = self.redis.register_script(_EMA_LUA)
        self.healthy = True
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sync_task: asyncio.Task[None] | None = None

    # --- health -----------------------------------------------------------------------

    def _lost(self, exc: Exception) -> None:
        if self.healthy:
            self.healthy = False
            log.warning(
                "shared_state.lost",
                url=self.url,
                error=f"{type(exc).__name__}: {exc}",
                fallback="local state",
            )

    def _ok(self) -> None:
        if not self.healthy:
            self.healthy = True
            log.info("shared_state.restored", url=self.url)

    def _background(self, coro: Any) -> None:
        """Run a write in the background; a failure marks Redis lost, never raises."""
        if not self.healthy:
            coro.close()
            return

        async def guarded() -> None:
            try:
                await coro
            except (RedisError, OSError) as exc:
                self._lost(exc)

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- writes (called by the router, synchronously) ------------------------------------

    def route_chosen(self, key: str, mode: Mode, ttl_s: float) -> None:
        """The cache learnt ``key`` → ``mode``: share it for ``ttl_s`` seconds."""
        self._background(self.redis.set(f"{self.ns}:route:{key}", str(mode), ex=max(1, int(ttl_s))))

    def measured(self, mode: Mode, cls: str, m: Measurement) -> None:
        """Fold one generation into the shared EMAs (the same fields as the local ones)."""
        w = self.measurements.ema_alpha
        fields = [(f"speed|{mode}", m.decode_tok_s), (f"class|{mode}|{cls}", m.decode_tok_s)]
        if m.alpha is not None:
            fields.append((f"alpha|{mode}", m.alpha))
        if m.tau is not None:
            fields.append((f"tau|{mode}", m.tau))

        async def write() -> None:
            for field, x in fields:
                await self._ema(keys=[f"{self.ns}:ema"], args=[field, x, w])

        self._background(write())

    def quarantined(self, mode: Mode, seconds: float) -> None:
        """``mode`` collapsed here: quarantine it on every replica for ``seconds``."""
        key = f"{self.ns}:quarantine:{mode}"
        self._background(self.redis.set(key, "1", px=max(1, int(seconds * 1000))))

    # --- reads ---------------------------------------------------------------------------

    async def lookup_route(self, key: str) -> None:
        """Before planning: on a local cache miss, take ``key``'s mode from Redis if known."""
        if not self.healthy or self.cache.get(key, time.monotonic()) is not None:
            return
        try:
            value = await self.redis.get(f"{self.ns}:route:{key}")
        except (RedisError, OSError) as exc:
            self._lost(exc)
            return
        if value:
            with contextlib.suppress(ValueError):
                self.cache.put(key, Mode(value), time.monotonic())

    async def sync(self) -> None:
        """Adopt the shared EMAs and quarantines (also how a lost Redis is retried)."""
        try:
            raw = await self.redis.hgetall(f"{self.ns}:ema")  # pyright: ignore[reportUnknownMemberType, reportGeneralTypeIssues]
            ttls = [await self.redis.pttl(f"{self.ns}:quarantine:{m}") for m in Mode]
        except (RedisError, OSError) as exc:
            self._lost(exc)
            return
        self._ok()
        emas = {str(k): str(v) for k, v in raw.items()}  # decode_responses: already str
        ms = self.measurements
        for field, value in emas.items():
            if field.endswith("#n"):
                continue
            kind, _, rest = field.partition("|")
            mode_name, _, cls = rest.partition("|")
            with contextlib.suppress(ValueError):
                samples = int(emas.get(f"{field}#n", "1"))
                ms.adopt(Mode(mode_name), kind, float(value), samples, cls)
        now = time.monotonic()
        for mode, ttl_ms in zip(Mode, ttls, strict=True):
            if ttl_ms > 0:
                ms.impose_quarantine(mode, now + ttl_ms / 1000)
        self.version += 1

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Sync once, then every ``sync_s`` in the background."""
        await self.sync()
        if self.healthy:
            log.info("shared_state.connected", url=self.url, namespace=self.ns)

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.sync_s)
                await self.sync()

        self._sync_task = asyncio.create_task(loop())

    async def stop(self) -> None:
        """Stop syncing, let pending writes finish (bounded by the timeouts), close."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sync_task
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()

    def snapshot(self) -> StoreView:
        """JSON-ready view for ``/fronde/v1/router``."""
        return {"url": self.url, "namespace": self.ns, "healthy": self.healthy}
