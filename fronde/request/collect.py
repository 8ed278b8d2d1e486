"""A non-streamed answer: asked whole where the server stops it for a gone client, else assembled.

llama-server b11434 stops a *streamed* task the moment its connection closes, but a
non-streamed one only when no other task's result has come for a second
(``server_response::recv_with_timeout`` restarts its wait at every wake, so
``server_response_reader::next`` never polls the connection while other slots decode;
measured on gemma: a 400-token answer whose client left after 1.5 s still held the slot
4 s later; a stream freed it in 0.07 s). So on a stock server Fronde asks for a stream
even when the client wants one JSON answer: a client that leaves frees its slot on every
route, and the stop strings, usage and timings come through the same relay as a
stream's (:func:`~fronde.request.relay.relay_sse`): the stop strings by the stream's own
rule (:func:`~fronde.request.choices.take_stops`), so on a server with patch 0009 they
stay upstream and no event is matched in Python.

On a server with Fronde's patch 0010 (``/props`` says
``whole_answer_stops_for_gone_client``: the wait polls the connection once a second under
any load) a request for one choice is sent as the client sent it, ``"stream": false``,
and llama-server's own answer is passed on (:func:`answer_whole`): the server then skips
a stream's work per token (a partial result, its JSON, a write) and Fronde parses one
body instead of an event a token. It is the answer that server gives a client alone; the
assembled one differs from it only where llama-server's two paths differ (a
``"logprobs": null`` the stream's chunks carry; the log-probabilities of a token held
back for a stop string).

:func:`collect` folds the relayed chunks into OpenAI's non-streamed shape: the
``content`` (and ``reasoning_content``) pieces joined, tool-call deltas merged by
index (the first carries ``id``, ``type`` and ``function.name``; the rest append to
``function.arguments``), list-valued ``logprobs`` concatenated, the last
``finish_reason``, the usage chunk, and the final chunk's other top-level fields
(``timings`` among them: the last choice's to end). Each choice is folded apart, by its
``index``: a text completion with several prompts has one choice per prompt, in the
order of the prompts, and its usage chunk sums them
(:mod:`fronde.request.choices`). Source: OpenAI API reference, "The chat
completion chunk object" and "The chat completion object".
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fronde.backends.client import BackendClient
from fronde.backends.held_stop import HeldStopText
from fronde.errors import BackendConnectionError
from fronde.json_types import JSON, JSONObject
from fronde.request.choices import choice_index, take_stops
from fronde.request.native import Kind
from fronde.request.prompts import prompt_count
from fronde.request.relay import DONE_LINE, relay_sse

__all__ = ["answer_whole", "collect"]

_CHUNK_OBJECT = {"chat": "chat.completion", "text": "text_completion"}

_NOT_TOP = ("choices", "usage", "object")
"""A chunk's fields that are not carried to the answer's top level as they are."""

_scan: Callable[[str, int], tuple[JSON, int]] = vars(json.JSONDecoder())["scan_once"]
"""One JSON value at an index of a string: (value, its end); JSONDecodeError if none
(the C scanner :meth:`json.JSONDecoder.raw_decode` calls; typeshed does not name it)."""


def _merge_logprobs(into: JSONObject, part: JSONObject) -> None:
    for key, value in part.items():
        before = into.get(key)
        if isinstance(value, list) and isinstance(before, list):
            into[key] = [*before, *value]
        else:
            into[key] = value


@dataclass
class _Call:
    """One tool call, merged from its deltas (the first names it, the rest add arguments)."""

    id: JSON = None
    type: JSON = "function"
    name: JSON = ""
    arguments: str = ""

    def as_json(self) -> JSONObject:
        """The call as OpenAI's message shapes it."""
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }


class _Answer:
    """The fields of one choice, accumulated chunk by chunk."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.text: list[str] = []
        self.saw_content = False
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.logprobs: JSONObject | None = None
        self.finish: JSON = None

    def add(self, choice: JSONObject) -> None:
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            self.logprobs = self.logprobs or {}
            _merge_logprobs(self.logprobs, lp)
        if self.kind == "text":
            piece = choice.get("text")
            if isinstance(piece, str):
                self.text.append(piece)
            return
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        content = delta.get("content")
        if isinstance(content, str):
            self.saw_content = True
            self.text.append(content)
        reasoning = delta.get("reasoning_content")
        if isinstance(reasoning, str):
            self.reasoning.append(reasoning)
        calls = delta.get("tool_calls") or []
        # A non-list (llama-server sends none) holds no call.
        for raw in calls if isinstance(calls, list) else []:
            if isinstance(raw, dict):
                self._call(raw)

    def _call(self, delta: JSONObject) -> None:
        index = delta.get("index", len(self.calls))
        call = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), _Call())
        if delta.get("id"):
            call.id = delta["id"]
        if delta.get("type"):
            call.type = delta["type"]
        fn = delta.get("function")
        if isinstance(fn, dict):
            if fn.get("name"):
                call.name = fn["name"]
            arguments = fn.get("arguments")
            if isinstance(arguments, str):
                call.arguments += arguments

    def choice(self, index: int) -> JSONObject:
        text = "".join(self.text)
        out: JSONObject = {
            "index": index,
            "finish_reason": self.finish,
            "logprobs": self.logprobs,
        }
        if self.kind == "text":
            out["text"] = text
            return out
        message: JSONObject = {"role": "assistant"}
        message["content"] = text if self.saw_content or not self.calls else None
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[i].as_json() for i in sorted(self.calls)]
        out["message"] = message
        return out


def _events(piece: bytes) -> Iterator[JSON]:
    """A relayed piece's ``data: {...}`` events, parsed, in order; None for ``[DONE]``.

    A piece holds whole lines (:func:`~fronde.request.relay.relay_sse` yields the lines
    of one upstream read, each with its newline; a hindsight folds a whole answer).
    Each event goes straight to the C scanner: :func:`json.loads` adds two regex
    matches and three Python calls an event, and the payload, stripped and opening with
    ``{``, has no whitespace around it to skip. Lazy, so that what follows an error
    event or ``[DONE]`` is never decoded (as when the stream is read line by line).

    Raises:
        UnicodeDecodeError: a line is not UTF-8.
        ValueError: a data line is not one JSON value.
    """
    for raw in piece.split(b"\n"):
        line = raw.decode().strip()
        if line.startswith("data: {"):
            payload = line[6:]  # "{...": an object
            event, end = _scan(payload, 0)
            if end != len(payload):
                raise json.JSONDecodeError("Extra data", payload, end)
            yield event
        elif line.startswith(DONE_LINE):
            yield None
            return


async def collect(lines: AsyncIterator[bytes], kind: Kind) -> dict[str, Any]:
    """Fold relayed SSE lines into one non-streamed OpenAI answer.

    Args:
        lines: what :func:`~fronde.request.relay.relay_sse` yields (normalized: one
            ``[DONE]``, a usage chunk when asked for, an error event on failure).
        kind: ``chat`` or ``text``.

    Returns:
        The ``chat.completion`` or ``text_completion`` object, with llama-server's
        ``timings`` when the stream carried them (as its non-streamed answer does). Built
        as :data:`~fronde.json_types.JSONObject`; handed out with ``Any`` values
        because its readers (the API, tests) index its choices by OpenAI's keys.

    Raises:
        BackendConnectionError: the stream carried an error event or ended without
            ``[DONE]`` (nothing reached the client yet: an ordinary 502).
    """
    answers: dict[int, _Answer] = {}
    top: JSONObject = {}
    usage: JSON = None
    timings: JSON = None
    done = False
    async for piece in lines:
        if done:
            # Read on: the relay ends once the upstream body has (nothing follows
            # [DONE]), which leaves its connection in the pool for the next request.
            continue
        for event in _events(piece):
            if event is None:
                done = True
                break
            if not isinstance(event, dict):
                continue
            if "error" in event:
                err = event["error"]
                message = err.get("message") if isinstance(err, dict) else err
                raise BackendConnectionError(str(message or "the backend's stream failed"))
            choices = event.get("choices")
            if event.get("usage") is not None:
                usage = event["usage"]
            if isinstance(event.get("timings"), dict):
                timings = event["timings"]  # b11434 puts them on the usage chunk
            if not choices:
                continue
            for choice in choices if isinstance(choices, list) else []:
                if isinstance(choice, dict):
                    index = choice_index(choice)
                    answer = answers.get(index)
                    if answer is None:
                        answer = answers[index] = _Answer(kind)
                    answer.add(choice)
            top.update(event)  # its choices, usage and object go at the end
    if not done:
        raise BackendConnectionError("the backend's stream ended before [DONE]")
    for key in _NOT_TOP:
        top.pop(key, None)
    folded: list[JSON] = [answers[i].choice(i) for i in sorted(answers)]
    folded = folded or [_Answer(kind).choice(0)]
    out: JSONObject = {"object": _CHUNK_OBJECT[kind], **top, "choices": folded}
    if usage is not None:
        out["usage"] = usage
    if timings is not None:
        out["timings"] = timings  # as llama-server's own non-streamed answer has them
    return out


async def answer_whole(
    client: BackendClient,
    url: str,
    path: str,
    body: JSONObject,
    mode: str,
    on_timings: Callable[[JSONObject], None] | None = None,
    *,
    held: HeldStopText,
) -> dict[str, Any]:
    """One non-streamed OpenAI answer from ``url + path`` (see the module docstring).

    Args:
        client: the backend client.
        url: the backend's base URL.
        path: ``/v1/chat/completions`` or ``/v1/completions``.
        body: the client's (non-streamed) request body.
        mode: the backend's mode, for errors and logs.
        on_timings: called with llama-server's ``timings`` (for the router).
        held: the server's ``/props`` facts: whether it stops a whole answer for a
            gone client (then the answer is asked whole), and whether its streams send
            the text held back for a stop string (the stop strings stay upstream there,
            as a relayed stream's do: :func:`~fronde.request.choices.take_stops`).

    Returns:
        The answer, as llama-server's non-streamed endpoint shapes it.

    Raises:
        BackendError: the backend refused the request or failed (before any byte
            reached the client).
    """
    kind: Kind = "chat" if path.endswith("/chat/completions") else "text"
    if await _asked_whole(held, url, kind, body):
        return await _whole(client, url, path, body, on_timings)
    upstream, stops = await take_stops(body, chat=kind == "chat", url=url, held=held)
    sent: JSONObject = {**upstream, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream(url, path, sent) as resp:
        relayed = relay_sse(resp, mode, on_timings, include_usage=True, stops=stops)
        return await collect(relayed, kind)


async def _asked_whole(held: HeldStopText, url: str, kind: Kind, body: JSONObject) -> bool:
    """Whether ``body`` goes to ``url`` as one non-streamed request.

    Where the server stops a whole answer for a gone client (patch 0010) and the request
    asks one choice (``n`` > 1 is refused before; a text completion of several prompts is
    not): llama-server joins several prompts' answers into one object with the first
    prompt's usage, where the assembled answer sums them.
    """
    if kind == "text" and prompt_count(body.get("prompt")) != 1:
        return False
    return await held.whole_stops(url)


async def _whole(
    client: BackendClient,
    url: str,
    path: str,
    body: JSONObject,
    on_timings: Callable[[JSONObject], None] | None,
) -> dict[str, Any]:
    """llama-server's own non-streamed answer to ``body``; its ``timings`` to ``on_timings``.

    Raises:
        BackendError: the backend refused the request or failed.
    """
    sent: JSONObject = {k: v for k, v in body.items() if k != "stream_options"}
    sent["stream"] = False
    async with client.stream(url, path, sent, whole=True) as resp:
        data = await resp.json_object()
    timings = data.get("timings")
    if on_timings is not None and isinstance(timings, dict):
        with contextlib.suppress(ValueError, KeyError, TypeError):  # as the relay's report
            on_timings(timings)
    return data
