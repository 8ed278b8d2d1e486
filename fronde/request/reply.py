"""What the dispatcher hands back to the API layer: a whole answer or a stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fronde.json_types import JSON

if TYPE_CHECKING:
    from fronde.request.push import PushRelay

__all__ = ["Answer", "Streamed", "Whole"]


@dataclass(frozen=True)
class Whole:
    """A JSON answer, ready to send.

    Attributes:
        body: the OpenAI (or llama-server) response: an object, or a list (``GET /slots``).
        headers: Fronde's headers (``x-fronde-mode``, ``x-fronde-class``, ...).
    """

    body: JSON
    headers: dict[str, str] = field(default_factory=dict[str, str])


@dataclass(frozen=True)
class Streamed:
    """An SSE answer: its events, its headers, and what to run when it is over.

    The events' own ``finally`` releases what the request held; ``close`` runs it
    too, for a stream that was never iterated (the client left before the first byte).

    Attributes:
        events: encoded SSE lines.
        headers: Fronde's headers.
        close: idempotent clean-up.
        keepalive_s: an SSE comment goes out after this many silent seconds (a long
            prefill or probe; proxies with an idle timeout would cut the stream); None:
            never.
        push: the same answer written from the upstream's reads
            (:mod:`fronde.request.push`), where the API layer can write to the client
            at once; None: only ``events``. One of the two is used, never both.
    """

    events: AsyncIterator[bytes]
    headers: dict[str, str]
    close: Callable[[], Awaitable[None]]
    keepalive_s: float | None = None
    push: PushRelay | None = None


Answer = Whole | Streamed
"""What :class:`~fronde.request.dispatcher.Dispatcher` returns for one request."""
