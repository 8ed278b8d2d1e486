"""The prompt-hash cache: a request seen before goes to the mode chosen for it then.

The original FRONDE router's cache is unbounded; this one is an LRU with a TTL,
so a long-running proxy keeps a bounded memory and re-measures stale choices.
The key hashes what decides the output: every field of the request but the few
that only say how the answer travels (:data:`NOT_KEY_FIELDS`). Pure; the clock is passed in.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from fronde.config_router import ROUTER_DEFAULTS
from fronde.modes import Mode

__all__ = ["NOT_KEY_FIELDS", "RouteCache", "cache_key"]

NOT_KEY_FIELDS = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "service_tier",
        "timings_per_token",
        "return_progress",
        "sse_ping_interval",
        "cache_prompt",
        "id_slot",
        "verbose",
        "response_fields",
    }
)
"""Request fields that change how an answer travels, not what it says: left out of the key.

Every other field may decide the output (the messages, the sampling fields, a grammar or a
schema, the tools), so each one is in the key: two requests that differ only in their
schema are two requests, and each gets the mode measured for it."""


def cache_key(body: dict[str, Any]) -> str:
    """Return the sha256 hex key of a request: its fields but :data:`NOT_KEY_FIELDS`, as JSON."""
    picked = {k: v for k, v in body.items() if k not in NOT_KEY_FIELDS}
    canonical = json.dumps(picked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class _Entry:
    mode: Mode
    stored_at: float


class RouteCache:
    """LRU + TTL map from request key to the mode chosen for it.

    Args:
        max_entries: capacity; the least recently used entry goes first.
        ttl_s: entries older than this are not served, seconds.
    """

    def __init__(
        self,
        max_entries: int = ROUTER_DEFAULTS.cache_max_entries,
        ttl_s: float = ROUTER_DEFAULTS.cache_ttl_s,
    ) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, now: float, excluded: Container[Mode] = ()) -> Mode | None:
        """Return the cached mode for ``key``, or None.

        An expired entry is dropped. An entry whose mode is in ``excluded``
        (quarantined, on probation, not ready) is not served, but kept.
        """
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now - entry.stored_at > self.ttl_s:
            del self._entries[key]
            return None
        if entry.mode in excluded:
            return None
        self._entries.move_to_end(key)
        return entry.mode

    def put(self, key: str, mode: Mode, now: float) -> None:
        """Store ``mode`` for ``key``, evicting the least recently used past capacity."""
        self._entries[key] = _Entry(mode, now)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget_mode(self, mode: Mode) -> int:
        """Drop every entry pointing at ``mode`` (e.g. after a collapse); return how many."""
        keys = [k for k, e in self._entries.items() if e.mode == mode]
        for k in keys:
            del self._entries[k]
        return len(keys)
