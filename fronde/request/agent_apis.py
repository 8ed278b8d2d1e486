"""The APIs an agent tool speaks besides chat and text completions, as the router sees them.

llama-server b11434 answers OpenAI Responses (``/v1/responses``, Codex CLI), Anthropic
Messages (``/v1/messages``, Claude Code and the ``anthropic`` SDK) and fill-in-the-middle
(``/infill``, llama.vim and llama.vscode) itself: it converts the first two to a chat
request (``server_chat_convert_responses_to_chatcmpl`` and
``server_chat_convert_anthropic_to_oai`` in ``tools/server/server-chat.cpp``) and renders
the answer in each API's shape. Fronde does not translate them a second time: it routes the
request like a chat request, then passes the body as sent to the chosen mode's backend, so
the answer is exactly what that mode alone gives through its own endpoint.

What the router needs from each API is described here, per :class:`Api`:

- a **chat view** of the body (``messages``, the sampling fields, the budget as
  ``max_tokens``, and the fields that make a request unsafe for speculation: ``tools``, a
  structured output format, logprobs, a grammar), for the classifier, the route cache,
  the prompt's self-overlap and the token budget;
- how its event stream **ends** (Responses: ``response.completed``; Messages:
  ``message_stop``; infill: the event with ``"stop": true``), so that a stream cut before
  its end is reported as an in-band error in the API's own shape, never as an answer;
- what its stream lacks: b11434's Responses events have no ``output_index``,
  ``content_index`` or ``sequence_number``, which the ``openai`` SDK's stream helper
  needs; :class:`ResponsesIndexer` adds them;
- what its answer gets wrong: b11434 ends a Messages answer cut by one of its
  ``stop_sequences`` with ``stop_reason: "end_turn"``; :class:`StopSequenceReason`
  makes it Anthropic's ``"stop_sequence"``, streamed or not;
- where its **timings** are: b11434 puts ``timings`` on the last event of a streamed
  Responses answer and on infill's last event or whole body; a Messages answer and a
  non-streamed Responses answer carry none, so they are routed but measure nothing.

Sources: OpenAI API reference "Responses" and its streaming events; Anthropic API
reference "Messages" and "Streaming Messages", "Errors"; llama.cpp b11434
``tools/server/server-task.cpp`` (``to_json_oaicompat_resp_stream``,
``to_json_anthropic_stream``, ``to_json_non_oaicompat``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fronde.errors import openai_error_body
from fronde.json_types import JSON, JSONObject
from fronde.request.agent_views import infill_view, messages_view, responses_view
from fronde.request.native import Kind

__all__ = [
    "INFILL",
    "MESSAGES",
    "MESSAGES_PATH",
    "RESPONSES",
    "Api",
    "ResponsesIndexer",
    "StopSequenceReason",
    "anthropic_error_body",
    "error_body_for",
    "infill_view",
    "messages_view",
    "responses_view",
]

MESSAGES_PATH = "/v1/messages"
"""Anthropic Messages' endpoint, and the prefix of its token count."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
"""HTTP status → Anthropic error type (Anthropic API reference, "Errors"); else ``api_error``."""


def anthropic_error_body(status: int, message: str) -> JSONObject:
    """``{"type": "error", "error": {"type", "message"}}``, as Anthropic's API returns it.

    Args:
        status: the HTTP status of the error.
        message: one line saying what went wrong.
    """
    kind = _ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body_for(path: str, status: int, body: JSONObject) -> JSONObject:
    """The error body a client of ``path`` reads.

    Anthropic's under ``/v1/messages``, else ``body`` itself (OpenAI's
    ``{"error": {"message", ...}}``).

    Raises:
        KeyError, TypeError: ``body`` is not OpenAI's error shape.
    """
    if path.startswith(MESSAGES_PATH):
        err = body["error"]
        if not isinstance(err, dict):
            raise TypeError("an OpenAI error body's 'error' is an object")
        return anthropic_error_body(status, str(err["message"]))
    return body


Mender = Callable[[JSONObject], JSONObject]
"""Completes one event (or a whole answer) in place and returns it."""


def _sse(event: str | None, data: JSONObject) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


@dataclass(frozen=True)
class Api:
    """What the dispatcher needs to route and relay one of these APIs (module docstring).

    Attributes:
        name: ``responses``, ``messages`` or ``infill`` (logs, metrics, the router's rows).
        path: the endpoint, on Fronde and on llama-server alike.
        view: the body's chat (or text) view, for the router.
        kind: the view's kind: ``chat`` or ``text``.
        final: the ``type`` of the data event that ends a stream (None: the one with
            ``"stop": true``, llama-server's native streams).
        delta: the ``type`` of the data events that carry generated text (None: every
            data event does), counted as the stream's progress.
        error_event: the in-band error that ends a broken stream, as the API shapes it.
        mender: makes, from the request's body, the function that completes each data
            event of its stream (None: the events go through untouched).
        mends: the bytes a data line holds when the mender may change it (None: every
            line goes through it), so that only those lines are parsed.
        whole: the mender of a whole (non-streamed) answer, made like ``mender``; None:
            the answer goes through untouched.
    """

    name: str
    path: str
    view: Callable[[JSONObject], dict[str, Any]]
    kind: Kind
    final: str | None
    delta: tuple[str, ...]
    error_event: Callable[[str], bytes]
    mender: Callable[[JSONObject], Mender] | None = None
    mends: bytes | None = None
    whole: Callable[[JSONObject], Mender] | None = None

    def ends(self, data: JSONObject) -> bool:
        """Whether the data event ``data`` is the stream's last."""
        if self.final is None:
            return data.get("stop") is True
        return data.get("type") == self.final

    def counts(self, data: JSONObject) -> bool:
        """Whether ``data`` carries generated text (one more event of progress)."""
        return not self.delta or data.get("type") in self.delta


class ResponsesIndexer:
    """Adds the indices llama-server b11434 leaves out of a streamed Responses answer.

    Its events carry no ``sequence_number``, and its item events no ``output_index``
    or ``content_index`` (``to_json_oaicompat_resp_stream`` in
    ``tools/server/server-task.cpp``), which the OpenAI API reference marks required:
    the ``openai`` SDK's ``client.responses.stream`` helper files each delta under its
    ``output_index`` and fails without it. The text and the items are left as they are;
    only the missing numbers are added: events counted from 0, items numbered in the
    order they were added (an event's ``item_id`` names its item), one content part
    per message (index 0), ``logprobs`` ``[]`` on text events when absent.
    """

    def __init__(self) -> None:
        self._sequence = 0
        self._items: dict[str, int] = {}

    def _index(self, item_id: JSON) -> int:
        key = str(item_id)
        return self._items.setdefault(key, len(self._items))

    def __call__(self, event: JSONObject) -> JSONObject:
        """Complete one event in place and return it."""
        event.setdefault("sequence_number", self._sequence)
        self._sequence += 1
        kind = str(event.get("type", ""))
        if kind.startswith("response.output_item."):
            item = event.get("item")
            if "output_index" not in event and isinstance(item, dict):
                event["output_index"] = self._index(item.get("id"))
        elif "item_id" in event:
            if "output_index" not in event:
                event["output_index"] = self._index(event["item_id"])
            if kind.startswith(("response.content_part.", "response.output_text.")):
                event.setdefault("content_index", 0)
            if kind.startswith("response.output_text."):
                event.setdefault("logprobs", [])
        return event


class StopSequenceReason:
    """Sets Anthropic's ``stop_reason: "stop_sequence"`` on a Messages answer a stop string cut.

    llama-server b11434 reports a stop string as an end of turn: ``to_json_anthropic``
    and ``to_json_anthropic_stream`` (``tools/server/server-task.cpp``) write
    ``stop_reason: "end_turn"`` for ``STOP_TYPE_WORD`` as for end of generation, with the
    matched string in ``stop_sequence``. Anthropic answers ``"stop_sequence"`` there, and
    clients branch on it. Only the request's own ``stop_sequences`` count: a stop string
    the chat template adds (``additional_stops``, e.g. ``</assistant>``) ends the turn,
    so its ``stop_sequence`` becomes null, as Anthropic's would be. Mends the whole
    answer (``"type": "message"``) and the stream's ``message_delta`` event.

    Args:
        body: the Messages request.
    """

    def __init__(self, body: JSONObject) -> None:
        stops = body.get("stop_sequences")
        listed = stops if isinstance(stops, list) else []
        self.stops = frozenset(s for s in listed if isinstance(s, str))

    def _mend(self, fields: JSONObject) -> None:
        word = fields.get("stop_sequence")
        if fields.get("stop_reason") != "end_turn" or not isinstance(word, str):
            return
        if word in self.stops:
            fields["stop_reason"] = "stop_sequence"
        else:
            fields["stop_sequence"] = None

    def __call__(self, event: JSONObject) -> JSONObject:
        """Mend a whole answer or one stream event in place and return it."""
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "message":
            self._mend(event)
        elif kind == "message_delta" and isinstance(delta, dict):
            self._mend(delta)
        return event


def _responses_error(message: str) -> bytes:
    body: JSONObject = {
        "type": "error",
        "code": "backend_stream_error",
        "message": message,
        "param": None,
    }
    return _sse("error", body)


def _messages_error(message: str) -> bytes:
    return _sse("error", anthropic_error_body(502, message))


def _infill_error(message: str) -> bytes:
    return _sse(None, openai_error_body(message, "server_error", None, "backend_stream_error"))


RESPONSES = Api(
    name="responses",
    path="/v1/responses",
    view=responses_view,
    kind="chat",
    final="response.completed",
    delta=("response.output_text.delta", "response.function_call_arguments.delta"),
    error_event=_responses_error,
    mender=lambda _body: ResponsesIndexer(),
)
"""OpenAI Responses."""

MESSAGES = Api(
    name="messages",
    path=MESSAGES_PATH,
    view=messages_view,
    kind="chat",
    final="message_stop",
    delta=("content_block_delta",),
    error_event=_messages_error,
    mender=StopSequenceReason,
    mends=b'"message_delta"',
    whole=StopSequenceReason,
)
"""Anthropic Messages."""

INFILL = Api(
    name="infill",
    path="/infill",
    view=infill_view,
    kind="text",
    final=None,
    delta=(),
    error_event=_infill_error,
)
"""llama-server's fill-in-the-middle."""
