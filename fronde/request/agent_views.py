"""The router's view of an agent tool's body: a chat (or text) request's fields.

:mod:`fronde.request.agent_apis` routes OpenAI Responses, Anthropic Messages and
llama-server's ``/infill`` like chat or text requests; these functions give the fields
the router reads (the classifier, the route cache, the prompt's self-overlap, the
budget): ``messages`` or ``prompt``, the sampling fields, the budget as ``max_tokens``,
and the fields that make a request unsafe for speculation. Sources: OpenAI API
reference "Responses"; Anthropic API reference "Messages"; llama.cpp b11434
``tools/server/server-chat.cpp`` (the conversions these views mirror).
"""

from __future__ import annotations

import json
from typing import Any

from fronde.json_types import JSON, JSONObject

__all__ = ["infill_view", "messages_view", "responses_view"]

_SAMPLING = ("model", "temperature", "top_p", "top_k", "min_p", "seed")
"""Fields copied as they are into a chat view (they decide the output: the cache key)."""


def _texts(content: JSON) -> list[str]:
    """Every text in a content value: a string, or a list of blocks with text of any kind.

    Reads ``text`` (text blocks of all three APIs), ``content`` (an Anthropic
    ``tool_result``), ``output`` (a Responses ``function_call_output``), ``arguments``
    (a Responses ``function_call``) and ``input`` (an Anthropic ``tool_use``, as JSON).
    """
    if isinstance(content, str):
        return [content]
    if isinstance(content, dict):
        out: list[str] = []
        for key in ("text", "content", "output", "arguments", "thinking"):
            out += _texts(content.get(key))
        if isinstance(content.get("input"), dict | list):
            out.append(json.dumps(content["input"], ensure_ascii=False))
        return out
    if isinstance(content, list):
        return [t for part in content for t in _texts(part)]
    return []


def _json(body: dict[str, Any]) -> JSONObject:
    """A view's body as the JSON it is.

    The views take and give dicts of ``Any`` values: their tests hand them dict literals,
    whose inferred types (``dict[str, str]`` and the like) a ``JSONObject`` parameter
    refuses, ``dict`` being invariant in its values.
    """
    return body


def _message(role: str, content: JSON) -> JSON:
    return {"role": role, "content": "\n".join(_texts(content))}


def _budget(view: JSONObject, value: JSON) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        view["max_tokens"] = value


def responses_view(body: dict[str, Any]) -> dict[str, Any]:
    """The chat view of an OpenAI Responses body (see the module docstring).

    ``instructions`` becomes a system message, a string ``input`` one user message, and
    each input item a message of its role (function calls and their outputs as text);
    ``max_output_tokens`` is the budget. A ``text.format`` other than plain text, ``tools``
    or ``top_logprobs`` make it unsafe for speculation, as ``response_format``, ``tools``
    and ``logprobs`` do in chat.
    """
    data = _json(body)
    view: JSONObject = {k: data[k] for k in _SAMPLING if k in data}
    messages: list[JSON] = []
    if isinstance(data.get("instructions"), str):
        messages.append(_message("system", data["instructions"]))
    items = data.get("input")
    if isinstance(items, str):
        messages.append(_message("user", items))
    elif isinstance(items, list):
        for item in items:
            if isinstance(item, dict):
                role = item.get("role")
                messages.append(_message(role if isinstance(role, str) else "assistant", item))
    view["messages"] = messages
    _budget(view, data.get("max_output_tokens"))
    if data.get("tools"):
        view["tools"] = data["tools"]
    text = data.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        view["response_format"] = fmt
    if data.get("top_logprobs"):
        view["logprobs"] = True
    return view


def messages_view(body: dict[str, Any]) -> dict[str, Any]:
    """The chat view of an Anthropic Messages body (see the module docstring).

    ``system`` (a string or text blocks) becomes a system message; every content block's
    text, tool use and tool result is read; ``stop_sequences`` is ``stop``; ``tools``
    make it unsafe for speculation.
    """
    data = _json(body)
    view: JSONObject = {k: data[k] for k in _SAMPLING if k in data}
    messages: list[JSON] = []
    if data.get("system") is not None:
        messages.append(_message("system", data["system"]))
    listed = data.get("messages") or []
    for item in listed if isinstance(listed, list) else []:  # the API checked: a list
        if isinstance(item, dict):
            role = item.get("role")
            messages.append(
                _message(role if isinstance(role, str) else "user", item.get("content"))
            )
    view["messages"] = messages
    _budget(view, data.get("max_tokens"))
    if isinstance(data.get("stop_sequences"), list):
        view["stop"] = data["stop_sequences"]
    if data.get("tools"):
        view["tools"] = data["tools"]
    return view


def infill_view(body: dict[str, Any]) -> dict[str, Any]:
    """The text-completion view of a llama-server ``/infill`` body.

    The prompt is what the model reads: the extra context chunks, the prefix, the
    ``prompt`` (text typed at the cursor) and the suffix; ``n_predict`` is the budget.
    ``grammar``, ``json_schema`` and ``n_probs`` keep their names (unsafe, as in chat).
    """
    data = _json(body)
    view: JSONObject = {k: data[k] for k in _SAMPLING if k in data}
    parts = _texts(data.get("input_extra"))
    for key in ("input_prefix", "prompt", "input_suffix"):
        piece = data.get(key)
        if isinstance(piece, str):
            parts.append(piece)
    view["prompt"] = "\n".join(parts)
    _budget(view, data.get("n_predict"))
    for key in ("grammar", "json_schema", "n_probs", "stop"):
        if key in data:
            view[key] = data[key]
    return view
