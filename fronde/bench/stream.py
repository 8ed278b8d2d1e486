"""Client side of a streamed ``/v1/completions`` call, timed chunk by chunk.

Shared by the benchmarks and ``demo.py``: both measure decode speed the way a
client sees it, from the arrival times of the streamed chunks.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from fronde.errors import FrondeError

__all__ = ["StreamedCompletion", "collect_completion", "stream_completion"]


@dataclass
class StreamedCompletion:
    """What a client measured of one streamed completion so far.

    Attributes:
        mode: the ``x-fronde-mode`` response header, or None (a direct backend).
        t_start: ``time.perf_counter()`` when the request was sent, seconds.
        first: arrival of the first chunk with text, seconds (perf_counter).
        last: arrival of the latest chunk with text, seconds (perf_counter).
        chunks: chunks that carried text (llama-server sends one per token).
        text: the text so far.
        timings: llama-server's ``timings`` from the final chunk (empty until then).
        route: the ``x-fronde-class`` response header, or None.
        fronde: the router's ``fronde`` report from the final chunk, or None.
        request_id: the ``x-fronde-request-id`` response header (the request's row in
            ``/fronde/v1/router``), or None.
    """

    mode: str | None
    t_start: float
    first: float | None = None
    last: float | None = None
    chunks: int = 0
    text: str = ""
    timings: dict[str, Any] = field(default_factory=dict[str, Any])
    route: str | None = None
    fronde: dict[str, Any] | None = None
    request_id: str | None = None

    def client_tok_s(self, tokens: int | None = None) -> float:
        """Decode tok/s as received: (tokens − 1) ÷ (last − first chunk time).

        Args:
            tokens: generated tokens; default ``timings.predicted_n`` if known, else
                the number of chunks.

        Returns:
            tok/s, or 0.0 before two chunks arrived.
        """
        n = tokens if tokens is not None else int(self.timings.get("predicted_n", self.chunks))
        if self.first is None or self.last is None or self.last <= self.first or n < 2:
            return 0.0
        return (n - 1) / (self.last - self.first)

    def alpha(self) -> float | None:
        """α = ``draft_n_accepted`` ÷ ``draft_n``, or None when nothing was drafted."""
        drafted = self.timings.get("draft_n")
        return self.timings.get("draft_n_accepted", 0) / drafted if drafted else None


def stream_completion(
    http: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Iterator[StreamedCompletion]:
    """POST a streamed completion and yield the measurement after every event.

    Args:
        http: a client with a read timeout fit for a CPU prefill.
        url: full URL of ``/v1/completions`` (Fronde's or a llama-server's).
        body: the request; ``stream`` must be true.
        headers: extra request headers (e.g. ``x-fronde-mode``).

    Yields:
        The same :class:`StreamedCompletion`, updated.

    Raises:
        FrondeError: a non-200 answer, or an in-band error event.
    """
    result = StreamedCompletion(mode=None, t_start=time.perf_counter())
    with http.stream("POST", url, json=body, headers=headers or {}) as resp:
        if resp.status_code != 200:
            raise FrondeError(f"{url} answered {resp.status_code}: {resp.read()[:300]!r}")
        result.mode = resp.headers.get("x-fronde-mode")
        result.route = resp.headers.get("x-fronde-class")
        result.request_id = resp.headers.get("x-fronde-request-id")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise FrondeError(f"{url} streamed an error: {event['error']}")
            piece = "".join(c.get("text") or "" for c in event.get("choices", []))
            if piece:
                now = time.perf_counter()
                result.first = result.first or now
                result.last = now
                result.chunks += 1
                result.text += piece
            result.timings = event.get("timings", result.timings)
            result.fronde = event.get("fronde", result.fronde)
            yield result


def collect_completion(
    http: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> StreamedCompletion:
    """Run :func:`stream_completion` to the end and return the final measurement.

    Raises:
        FrondeError: as :func:`stream_completion`, or the stream had no text or no
            final ``timings``.
    """
    final: deque[StreamedCompletion] = deque(stream_completion(http, url, body, headers), maxlen=1)
    if not final or final[0].first is None or not final[0].timings:
        raise FrondeError(f"{url}: the stream ended without text or timings")
    return final[0]
