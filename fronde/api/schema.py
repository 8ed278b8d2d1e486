"""Checks on OpenAI request bodies, before anything reaches a backend.

Fronde forwards bodies as the client sent them (so fields it does not know still
reach llama-server), but the fields it relies on are checked here, each failure a
400 naming the field (OpenAI's ``param``). These rewrites are made:

- a request that names no ``max_tokens`` / ``max_completion_tokens`` gets
  ``server.default_max_tokens``, so no generation is unbounded; when both are
  given, ``max_completion_tokens`` (OpenAI's current name) wins, since
  llama-server reads both as ``n_predict``;
- the role ``developer`` (OpenAI's newer name for ``system``) becomes ``system``,
  which chat templates know;
- a ``null`` where a message's optional string belongs (``name``, ``tool_call_id``,
  ``reasoning_content``, a tool call's ``id``) is dropped, as if absent: clients send
  it, and llama-server answers a 500 when it reads one.

A body is refused (400 naming the field) when it holds what JSON cannot carry to a
backend: ``NaN`` or ``Infinity`` (Python's parser accepts them, llama-server's JSON
does not) or a lone UTF-16 surrogate (an escaped high surrogate with no partner, which no UTF-8
text can hold), and with a 415 when its ``Content-Type`` says it is not JSON (a form,
``text/plain``; a missing one is read as JSON).

Sources: OpenAI API reference, "Create chat completion" and "Create completion".
"""

from __future__ import annotations

import json
import math
import re
from typing import cast

from starlette.requests import Request

from fronde.errors import InvalidRequestError, PayloadTooLargeError, UnsupportedMediaTypeError
from fronde.json_types import JSON, JSONObject

__all__ = [
    "ROLES",
    "TEXT_PART_TYPES",
    "check_chat",
    "check_common",
    "check_completion",
    "check_number",
    "read_json_body",
]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
"""Message roles OpenAI defines."""

TEXT_PART_TYPES = frozenset({"text", "input_text"})
"""Content-part types a text-only model reads; images, audio and files are refused."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""An escaped surrogate (U+D800 to U+DFFF): the only way a lone one gets into parsed JSON."""


def _path(parts: list[str | int]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "body"


def _find_unsendable(value: JSON, parts: list[str | int]) -> tuple[str, str] | None:
    """The first value JSON cannot carry on: ``(path, what)``, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return _path(parts), f"{value} is not a JSON number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _path(parts), "it holds a lone UTF-16 surrogate (half of an emoji?)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _find_unsendable(k, [*parts, "(key)"]) or _find_unsendable(v, [*parts, k])
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_unsendable(v, [*parts, i])
            if found:
                return found
    return None


def _check_json_type(content_type: str | None) -> None:
    """Refuse a body whose ``Content-Type`` says it is not JSON.

    A missing header is read as JSON (hand-written clients send none); so are
    ``application/json`` with parameters (``; charset=utf-8``) and the ``+json``
    structured suffix (RFC 6839), FastAPI's own rule for JSON bodies. A form or
    ``text/plain`` is refused rather than parsed: ``curl -d`` without
    ``-H 'Content-Type: application/json'`` sends a form type, and the 415 says what to send.

    Raises:
        UnsupportedMediaTypeError: any other media type (a form, ``text/plain``).
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if not media or media == "application/json":
        return
    main, _, sub = media.partition("/")
    if main == "application" and sub.endswith("+json"):
        return
    raise UnsupportedMediaTypeError(
        f"the body is sent as {media!r}; send the body as JSON with Content-Type: application/json"
    )


async def read_json_body(request: Request, max_bytes: int) -> JSONObject:
    """Read and parse a JSON object body, refusing more than ``max_bytes`` bytes.

    Raises:
        UnsupportedMediaTypeError: the ``Content-Type`` names a media type other than
            JSON (HTTP 415; a missing one is read as JSON).
        PayloadTooLargeError: the body (declared or received) is over ``max_bytes``.
        InvalidRequestError: not JSON, or not an object.
    """
    _check_json_type(request.headers.get("content-type"))
    declared = request.headers.get("content-length", "")
    too_big = f"the request body is over {max_bytes} bytes (server.max_body_bytes)"
    if declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(too_big)
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > max_bytes:
            raise PayloadTooLargeError(too_big)
    odd: list[bool] = []  # NaN, Infinity, or a number too large for a float

    def number(text: str) -> float:
        v = float(text)
        if not math.isfinite(v):
            odd.append(True)
        return v

    def constant(name: str) -> float:
        odd.append(True)
        return float(name.replace("Infinity", "inf"))

    try:
        body = json.loads(raw, parse_float=number, parse_constant=constant)
    except ValueError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    body = cast("JSONObject", body)  # json.loads makes JSON values only
    if odd or _SURROGATE_ESCAPE.search(raw):  # rare: only then walk the whole body
        found = _find_unsendable(body, [])
        if found is not None:
            where, what = found
            raise InvalidRequestError(f"'{where}' cannot be used: {what}", param=where)
    return body


def check_number(body: JSONObject, name: str, lo: float, hi: float) -> None:
    """Check that ``body[name]``, when present, is a number from ``lo`` to ``hi``.

    Raises:
        InvalidRequestError: it is not (``param`` names the field).
    """
    v = body.get(name)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise InvalidRequestError(f"'{name}' must be a number from {lo:g} to {hi:g}", param=name)


def _integer(body: JSONObject, name: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f"from {lo} to {hi}" if hi is not None else f"of at least {lo}"
        raise InvalidRequestError(f"'{name}' must be an integer {span}", param=name)
    return v


def check_common(body: JSONObject, default_max_tokens: int) -> None:
    """Check the fields chat and text completions share; set the token budget.

    Args:
        body: the parsed request (modified in place: the token budget).
        default_max_tokens: the budget when the request names none, tokens.

    Raises:
        InvalidRequestError: a field has the wrong type or range, or ``n`` > 1.
    """
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidRequestError("'stream' must be a boolean", param="stream")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidRequestError("'model' must be a string", param="model")
    n = _integer(body, "n", 1)
    if n is not None and n > 1:
        raise InvalidRequestError(
            f"'n' = {n} is not supported: Fronde returns one choice per request; "
            "send n requests instead",
            param="n",
        )
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    check_number(body, "presence_penalty", -2.0, 2.0)
    check_number(body, "frequency_penalty", -2.0, 2.0)
    # llama.cpp's own sampling fields, which OpenAI SDKs send through extra_body.
    check_number(body, "min_p", 0.0, 1.0)
    check_number(body, "typical_p", 0.0, 1.0)
    check_number(body, "top_k", -1, 1_000_000)
    check_number(body, "repeat_penalty", 0.0, 100.0)
    check_number(body, "repeat_last_n", -1, 1_000_000)
    _integer(body, "seed", -(2**63), 2**64 - 1)
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise InvalidRequestError("'stop' must be a string or an array of strings", param="stop")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidRequestError("'stream_options' must be an object", param="stream_options")
    budget = _integer(body, "max_completion_tokens", 1)
    max_tokens = _integer(body, "max_tokens", 1)
    chosen = budget if budget is not None else max_tokens
    if chosen is None:
        chosen = default_max_tokens
    body["max_tokens"] = chosen
    if budget is not None:
        body["max_completion_tokens"] = chosen


def check_chat(body: JSONObject, default_max_tokens: int) -> None:
    """Check a ``/v1/chat/completions`` body (see :func:`check_common`).

    Raises:
        InvalidRequestError: ``messages`` missing or malformed, an unknown role,
            ``logprobs`` / ``top_logprobs`` / ``tools`` / ``tool_choice`` /
            ``response_format`` of the wrong type, or a shared field as in
            :func:`check_common`.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty array", param="messages")
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise InvalidRequestError(f"'{where}' must be an object", param=where)
        msg = raw
        role = msg.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidRequestError(
                f"'{where}.role' is {role!r}; expected one of {', '.join(sorted(ROLES))}",
                param=f"{where}.role",
            )
        content = msg.get("content")
        if content is None and role != "assistant":
            raise InvalidRequestError(f"'{where}.content' is required", param=f"{where}.content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequestError(
                f"'{where}.content' must be a string or an array of parts",
                param=f"{where}.content",
            )
        if isinstance(content, list):
            _check_parts(content, f"{where}.content")
        _check_message_strings(msg, where)
        if role == "developer":
            msg["role"] = "system"
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise InvalidRequestError("'logprobs' must be a boolean", param="logprobs")
    _integer(body, "top_logprobs", 0, 20)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequestError("'tools' must be an array", param="tools")
    choice = body.get("tool_choice")
    if choice is not None and not isinstance(choice, str | dict):
        raise InvalidRequestError(
            "'tool_choice' must be a string or an object", param="tool_choice"
        )
    fmt = body.get("response_format")
    if fmt is not None and not isinstance(fmt, dict):
        raise InvalidRequestError("'response_format' must be an object", param="response_format")
    check_common(body, default_max_tokens)


_OPTIONAL_STRINGS = ("name", "tool_call_id", "reasoning_content")
"""Message fields that are strings when present; a ``null`` one is dropped."""


def _check_message_strings(msg: JSONObject, where: str) -> None:
    """Drop null optional strings; check them and the assistant's ``tool_calls``."""
    for name in _OPTIONAL_STRINGS:
        if name in msg and msg[name] is None:
            del msg[name]
        elif name in msg and not isinstance(msg[name], str):
            raise InvalidRequestError(f"'{where}.{name}' must be a string", param=f"{where}.{name}")
    calls = msg.get("tool_calls")
    if calls is None:
        msg.pop("tool_calls", None)
        return
    if not isinstance(calls, list):
        raise InvalidRequestError(
            f"'{where}.tool_calls' must be an array", param=f"{where}.tool_calls"
        )
    for j, raw in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(raw, dict):
            raise InvalidRequestError(f"'{at}' must be an object", param=at)
        call = raw
        if call.get("id", "") is None:
            del call["id"]
        elif not isinstance(call.get("id", ""), str):
            raise InvalidRequestError(f"'{at}.id' must be a string", param=f"{at}.id")
        if call.get("type", "function") != "function":
            raise InvalidRequestError(f"'{at}.type' must be \"function\"", param=f"{at}.type")
        call["type"] = "function"
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidRequestError(
                f"'{at}.function' must be an object with a string 'name'",
                param=f"{at}.function",
            )
        args = fn.get("arguments")
        if not isinstance(args, str | dict):
            raise InvalidRequestError(
                f"'{at}.function.arguments' must be a JSON string",
                param=f"{at}.function.arguments",
            )


def _check_parts(parts: list[JSON], where: str) -> None:
    """Content parts: text only (the profiles' models read no images, audio or files)."""
    for j, raw in enumerate(parts):
        at = f"{where}[{j}]"
        if not isinstance(raw, dict):
            raise InvalidRequestError(f"'{at}' must be an object", param=at)
        part = raw
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in TEXT_PART_TYPES:
            raise InvalidRequestError(
                f"'{at}' is a part of type {kind!r}; this model reads text only "
                "(send the content as text parts or a string)",
                param=at,
            )
        if not isinstance(part.get("text"), str):
            raise InvalidRequestError(f"'{at}.text' must be a string", param=f"{at}.text")


def check_completion(body: JSONObject, default_max_tokens: int) -> None:
    """Check a ``/v1/completions`` body (see :func:`check_common`).

    Raises:
        InvalidRequestError: ``prompt`` is not a string or an array, ``logprobs``
            is not an integer from 0 to 5, or a shared field as in :func:`check_common`.
    """
    if not isinstance(body.get("prompt"), str | list):
        raise InvalidRequestError("'prompt' must be a string or an array", param="prompt")
    _integer(body, "logprobs", 0, 5)
    check_common(body, default_max_tokens)
