"""Which llama-server slot a request runs on: the lowest free one.

llama-server b11434 started with an explicit ``-np N`` keeps one KV stream per slot
(``kv_unified`` is only turned on when ``-np`` is left to auto, ``tools/server/server.cpp``),
and a decode step's batch is then cut into one micro-batch per run of consecutive slot
ids (``llama_batch_allocr::split_equal`` with ``sequential``, ``src/llama-batch.cpp``:
"accept only increasing sequence ids"). Each extra micro-batch is another forward pass,
and alternating ones keep llama.cpp's CUDA graphs from being reused. The server itself
picks a slot by prompt similarity, then the least recently used (``get_available_slot``
in ``tools/server/server-context.cpp``), so the busy ids scatter over the slots as
requests come and go. Sending each generation with ``id_slot`` = the lowest id not in
use keeps the busy ids at 0…n−1 whatever the history.

Only for llama-servers Fronde started itself (``backend.pin_slots``): a remote replica's
slots are shared with clients Fronde does not see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["GENERATION_PATHS", "SlotPins"]

GENERATION_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/completions",
        "/completion",
        "/v1/messages",
        "/v1/responses",
        "/infill",
    }
)
"""The llama-server paths whose requests take a slot (``/tokenize`` and the like do not)."""


def _unpinned(_url: str) -> int:
    return 0


class SlotPins:
    """The slot ids Fronde's requests hold on each backend, and the next one to use.

    Not thread-safe: used from the proxy's one event loop, with no await between
    :meth:`take` and the request that carries the id.
    """

    def __init__(self) -> None:
        self._count: Callable[[str], int] = _unpinned
        self._taken: dict[str, set[int]] = {}

    def count_with(self, count: Callable[[str], int]) -> None:
        """Pin on the backends for which ``count(base_url)`` (their ``-np``) is above 1."""
        self._count = count

    def take(self, base_url: str, path: str, body: dict[str, Any]) -> int | None:
        """The lowest free slot id of ``base_url`` for a request to ``path``, now held.

        None (the server picks) for a path that takes no slot, a backend with one
        slot or none pinned, a body that names its own ``id_slot``, or every slot
        held (the server queues the request until one frees).
        """
        n = self._count(base_url)
        if n <= 1 or path not in GENERATION_PATHS or "id_slot" in body:
            return None
        taken = self._taken.setdefault(base_url, set())
        slot = next((i for i in range(n) if i not in taken), None)
        if slot is not None:
            taken.add(slot)
        return slot

    def give(self, base_url: str, slot: int | None) -> None:
        """Release ``slot`` (from :meth:`take`; None is a no-op)."""
        if slot is not None:
            self._taken.get(base_url, set()).discard(slot)

    def held(self, base_url: str) -> frozenset[int]:
        """The slot ids held on ``base_url`` now."""
        return frozenset(self._taken.get(base_url, ()))
