"""The benchmark's one streaming client: a request sent, every token's arrival timed.

The same OpenAI request goes to every arm, streamed with
``stream_options.include_usage``. Per request (:meth:`Sample.record`): ``wall_s``
(sent → last event, what a user waits for), ``ttft_s`` (sent → first text),
``decode_tok_s`` ((tokens − 1) ÷ (last text − first text); a routed request's probe
text arrives at once, so the verdict uses ``wall_s``), ``tokens`` (usage, else
``timings.predicted_n``), llama-server's ``timings`` (α, τ), the ``x-fronde-*``
headers, the ``fronde`` report, and of a whole answer its tool calls, logprobs and
``accepted_prediction_tokens``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from fronde.errors import FrondeError
from fronde.timings import Timings

__all__ = ["Sample", "bench_http", "repetition_score", "send", "stream"]

PATHS = {"completion": "/v1/completions", "chat": "/v1/chat/completions", "native": "/completion"}
"""The endpoint of each request form (``native``: llama-server's own)."""


def repetition_score(text: str, n: int = 4) -> float:
    """Share of word ``n``-grams that repeat an earlier one: 0.0 none, near 1.0 a loop."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


@dataclass
class Sample:
    """One streamed request as the client saw it (times in seconds, perf_counter)."""

    sent: float
    first: float | None = None
    last: float | None = None
    end: float | None = None
    text: str = ""
    ids: list[int] = field(default_factory=list[int])
    pieces: int = 0
    tokens: int = 0
    finish: str | None = None
    timings: Timings | None = None
    headers: dict[str, str] = field(default_factory=dict[str, str])
    fronde: dict[str, Any] | None = None
    arrivals: list[float] = field(default_factory=list[float])
    """When each text event arrived (perf_counter s), for the load benchmark's window."""
    tool_calls: list[Any] | None = None
    logprobs: dict[str, Any] | None = None
    accepted_prediction_tokens: int | None = None

    def feed(self, line: str) -> bool:
        """Take one SSE line; return True once ``[DONE]`` arrived.

        Raises:
            FrondeError: an in-band error event.
        """
        if line == "data: [DONE]":
            self.end = time.perf_counter()
            return True
        if not line.startswith("data: {"):
            return False
        event: dict[str, Any] = json.loads(line[6:])
        if "error" in event:
            raise FrondeError(f"the stream carried an error: {event['error']}")
        self.ids += [int(t) for t in cast("list[int]", event.get("tokens") or [])]
        if piece := _piece(event):
            now = time.perf_counter()
            self.first = self.first if self.first is not None else now
            self.last = now
            self.arrivals.append(now)
            self.text += piece
            self.pieces += 1
        for c in cast("list[dict[str, Any]]", event.get("choices") or []):
            self.finish = c.get("finish_reason") or self.finish
            message = cast("dict[str, Any]", c.get("message") or {})
            self.tool_calls = message.get("tool_calls") or self.tool_calls
            self.logprobs = c.get("logprobs") or self.logprobs
        self.timings = Timings.parse(event.get("timings")) or self.timings
        usage = cast("dict[str, Any]", event.get("usage") or {})
        self.tokens = int(usage.get("completion_tokens") or self.tokens)
        details = cast("dict[str, Any]", usage.get("completion_tokens_details") or {})
        got = details.get("accepted_prediction_tokens", self.accepted_prediction_tokens)
        self.accepted_prediction_tokens = got
        self.fronde = cast("dict[str, Any] | None", event.get("fronde")) or self.fronde
        if event.get("stop") is True:  # llama-server's own stream ends so, without [DONE]
            self.end = time.perf_counter()
            return True
        return False

    def done(self, url: str) -> Sample:
        """Check the stream ended with ``[DONE]``; fill ``tokens`` from ``timings`` if unset.

        Raises:
            FrondeError: no ``[DONE]`` (a broken stream never counts as an answer).
        """
        if self.end is None:
            raise FrondeError(f"{url}: the stream ended without [DONE]")
        if not self.tokens:
            self.tokens = self.timings.predicted_n if self.timings else self.pieces
        return self

    @property
    def mode(self) -> str | None:
        """The ``x-fronde-mode`` response header (None from a plain llama-server)."""
        return self.headers.get("x-fronde-mode")

    @property
    def route(self) -> str | None:
        """The ``x-fronde-class`` response header (forced, edit, cache, probe or fallback)."""
        return self.headers.get("x-fronde-class")

    @property
    def request_id(self) -> str | None:
        """The ``x-fronde-request-id`` response header (its row in ``/fronde/v1/router``)."""
        return self.headers.get("x-fronde-request-id")

    @property
    def alpha(self) -> float | None:
        """α from llama-server's ``timings``, None when nothing was drafted."""
        return self.timings.alpha if self.timings else None

    def decode_tok_s(self) -> float:
        """(tokens − 1) ÷ (last − first text arrival), as received; 0.0 before two."""
        n = self.tokens or self.pieces
        if self.first is None or self.last is None or self.last <= self.first or n < 2:
            return 0.0
        return (n - 1) / (self.last - self.first)

    def record(self) -> dict[str, Any]:
        """The JSON-ready measurement (see the module docstring for each figure)."""
        t = self.timings
        decode = self.decode_tok_s()
        return {
            "wall_s": round((self.end or time.perf_counter()) - self.sent, 4),
            "ttft_s": round(self.first - self.sent, 4) if self.first is not None else None,
            "decode_tok_s": round(decode, 2) if decode else None,
            "tokens": self.tokens,
            "finish": self.finish,
            "alpha": t.alpha if t else None,
            "tau": t.tau if t else None,
            "timings": t.as_json() if t else None,
            "sha256": hashlib.sha256(self.text.encode()).hexdigest(),
            "repetition": round(repetition_score(self.text), 3),
            "text": self.text,
            "route": {k[9:]: v for k, v in self.headers.items() if k.startswith("x-fronde-")},
            "fronde": self.fronde,
        } | {k: v for k, v in self._whole().items() if v is not None}

    def _whole(self) -> dict[str, Any]:
        """What only some answers carry: token ids, tool calls, logprobs, prediction tokens."""
        ids = self.ids or None
        return {"ids": ids, "tool_calls": self.tool_calls, "logprobs": self.logprobs} | {
            "accepted_prediction_tokens": self.accepted_prediction_tokens
        }


def bench_http() -> httpx.AsyncClient:
    """An HTTP client for benchmark requests: long reads, a new connection per request.

    Pooled connections lost one request in three to llama-server closing a connection
    the pool was about to reuse.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(900.0, connect=10.0), limits=httpx.Limits(max_keepalive_connections=0)
    )


def _piece(event: dict[str, Any]) -> str:
    if "choices" not in event:  # llama-server's own /completion
        content = event.get("content")
        return content if isinstance(content, str) else ""
    choices = cast("list[dict[str, Any]]", event.get("choices") or [])
    parts: list[str] = []
    for c in choices:
        delta = cast("dict[str, Any]", c.get("delta") or {})
        message = cast("dict[str, Any]", c.get("message") or delta)
        text = c.get("text") if "text" in c else message.get("content")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


async def send(
    http: httpx.AsyncClient,
    base_url: str,
    form: str,
    body: dict[str, Any],
    headers: dict[str, str],
    sample: Sample | None = None,
) -> Sample:
    """POST one request to ``base_url`` (no ``/v1``) and time it to its last event.

    ``form`` picks the endpoint (:data:`PATHS`); a ``body`` without ``stream`` is one
    event. ``sample``: the :class:`Sample` to fill (a caller that may cancel the request
    keeps what arrived), a new one by default.

    Raises:
        FrondeError: a non-200 answer, an in-band error event, or no ``[DONE]``
            (a stream that broke never counts as an answer).
    """
    s = sample or Sample(sent=time.perf_counter())
    url = base_url + PATHS[form]
    if not body.get("stream"):
        resp = await http.post(url, json=body, headers=headers)
        if resp.status_code != 200:
            raise FrondeError(f"{url} answered {resp.status_code}: {resp.text[:300]!r}")
        s.headers = {k.lower(): v for k, v in resp.headers.items()}
        s.feed("data: " + resp.text.replace("\n", " "))
        s.first = s.last = s.end = time.perf_counter()
        return s.done(url)
    async with http.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise FrondeError(f"{url} answered {resp.status_code}: {(await resp.aread())[:300]!r}")
        s.headers = {k.lower(): v for k, v in resp.headers.items()}
        async for line in resp.aiter_lines():
            if s.feed(line):
                break
    return s.done(url)


def stream(
    http: httpx.Client, base_url: str, form: str, body: dict[str, Any], headers: dict[str, str]
) -> Iterator[Sample]:
    """:func:`send`, synchronous, yielding the :class:`Sample` after every line (``demo.py``).

    Raises:
        FrondeError: as :func:`send`.
    """
    s = Sample(sent=time.perf_counter())
    url = base_url + PATHS[form]
    with http.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise FrondeError(f"{url} answered {resp.status_code}: {resp.read()[:300]!r}")
        s.headers = {k.lower(): v for k, v in resp.headers.items()}
        for line in resp.iter_lines():
            if s.feed(line):
                break
            yield s
    yield s.done(url)
