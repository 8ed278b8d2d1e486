"""Which llama-server slot a request runs on: one next to the busy ones.

llama-server b11434 started with an explicit ``-np N`` keeps one KV stream per slot
(``kv_unified`` is only turned on when ``-np`` is left to auto, ``tools/server/server.cpp``),
and a decode step's batch is then cut into one micro-batch per run of consecutive slot
ids (``llama_batch_allocr::split_equal`` with ``sequential``, ``src/llama-batch.cpp``:
"accept only increasing sequence ids"). Each extra micro-batch is another forward pass,
and alternating ones keep llama.cpp's CUDA graphs from being reused. The server itself
picks a slot by prompt similarity, then the least recently used (``get_available_slot``
in ``tools/server/server-context.cpp``), so the busy ids scatter over the slots as
requests come and go. Sending each generation with ``id_slot`` set by Fronde keeps
them together: a free id next to the held ones (one that joins two runs first, then one
that extends a run, the lowest on a tie; 0 when none is held), so that a client whose
next request comes before Fronde has let go of its last slot does not open a gap.
Measured on an H200, one server with 16 slots, SmolLM2 streamed chat: 287, 656 and 1,253
tok/s at c = 2, 4 and 8 where the server picks, 832, 1,230 and 1,503 with the busy ids
together (``results/serving-probe-gpu-h200-20261204-pins/``).

Only for llama-servers Fronde started itself (``backend.pin_slots``): a remote replica's
slots are shared with clients Fronde does not see. A slot is let go when Fronde's request
ends; after a client that left, llama-server frees it 0.05–1.5 s later, and b11434 holds
a request sent to that slot meanwhile until it is free (it does not fail it).
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
        """A free slot id of ``base_url`` for a request to ``path``, now held.

        The id keeps the held ids in as few runs of consecutive ids as it can (module
        docstring): the lowest free one while the held ones are 0…k−1.

        None (the server picks) for a path that takes no slot, a backend with one
        slot or none pinned, a body that names its own ``id_slot``, or every slot
        held (the server queues the request until one frees).
        """
        n = self._count(base_url)
        if n <= 1 or path not in GENERATION_PATHS or "id_slot" in body:
            return None
        taken = self._taken.setdefault(base_url, set())
        free = [i for i in range(n) if i not in taken]
        if not free:
            return None
        # Runs of consecutive held ids after taking i: one fewer where i joins two, the
        # same where it extends one, one more where it stands alone.
        slot = max(free, key=lambda i: ((i - 1 in taken) + (i + 1 in taken), -i))
        taken.add(slot)
        return slot

    def give(self, base_url: str, slot: int | None) -> None:
        """Release ``slot`` (from :meth:`take`; None is a no-op)."""
        if slot is not None:
            self._taken.get(base_url, set()).discard(slot)

    def held(self, base_url: str) -> frozenset[int]:
        """The slot ids held on ``base_url`` now."""
        return frozenset(self._taken.get(base_url, ()))
