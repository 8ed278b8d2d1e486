"""The other APIs agent tools speak: OpenAI Responses, Anthropic Messages, infill, embeddings.

``POST /v1/responses`` (Codex CLI, ``client.responses.create``), ``POST /v1/messages``
(the ``anthropic`` SDK, Claude Code) and ``POST /infill`` (llama.vim, llama.vscode) are
routed like chat and passed through as sent to the chosen mode's llama-server
(:mod:`fronde.request.agent_apis` says why and what is measured). Each body is checked
here first, so that a client mistake is a 400 naming the field (llama-server b11434
answers a 500 for a Messages body without ``messages``), and each gets a budget when it
names none (``server.default_max_tokens``), so that no generation is unbounded. Errors on
``/v1/messages`` take Anthropic's shape (the app factory does that); the others OpenAI's.

``/v1/embeddings`` and ``/v1/rerank``: llama-server serves them only when started with
``--embeddings`` / ``--reranking``, which restricts it to that use (an embedding model);
no profile here runs one, so they answer a 404 saying so, in OpenAI's shape.

Sources: OpenAI API reference "Create a model response"; Anthropic API reference
"Messages"; llama.cpp ``tools/server/README.md`` (``/infill``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fronde.api.asgi import answered, render
from fronde.api.deps import RuntimeDep, runtime_of
from fronde.api.schema import check_number, read_json_body
from fronde.client_request import PassedRequest
from fronde.errors import InvalidRequestError, NotFoundError
from fronde.json_types import JSON, JSONObject
from fronde.request.agent_apis import INFILL, MESSAGES, RESPONSES, Api

__all__ = [
    "COUNT_TOKENS_PATH",
    "EMBEDDING_PATHS",
    "agents",
    "check_infill",
    "check_message_list",
    "check_messages",
    "check_responses",
]

agents = APIRouter()

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
"""Anthropic's token count (Claude Code calls it), checked here, counted by a backend."""

EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings", "/v1/rerank", "/rerank")
"""Endpoints of embedding and reranking models, which no profile serves."""

_ANTHROPIC_ROLES = frozenset({"user", "assistant"})
_ANTHROPIC_TEXT_BLOCKS = frozenset({"text", "tool_use", "tool_result", "thinking"})


def _fail(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def _budget(body: JSONObject, name: str, default: int) -> None:
    """Check the integer budget ``name``; set it to ``default`` when absent."""
    v = body.get(name)
    if v is None:
        body[name] = default
    elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise _fail(f"'{name}' must be an integer of at least 1", name)


def _shared(body: JSONObject, temperature_max: float) -> None:
    """``stream``, ``model``, ``temperature``, ``top_p``, ``tools``: types and ranges."""
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _fail("'stream' must be a boolean", "stream")
    if "model" in body and not isinstance(body["model"], str):
        raise _fail("'model' must be a string", "model")
    check_number(body, "temperature", 0.0, temperature_max)
    check_number(body, "top_p", 0.0, 1.0)
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise _fail("'tools' must be an array", "tools")


def _text_only(kind: JSON, at: str) -> None:
    if kind in ("input_image", "input_file", "image", "document", "input_audio"):
        raise _fail(
            f"'{at}' is a part of type {kind!r}; this model reads text only "
            "(send the content as text)",
            at,
        )


def check_responses(body: JSONObject, default_max_tokens: int) -> None:
    """Check an OpenAI Responses body; set ``max_output_tokens`` when absent.

    An input item with a ``role`` and no ``type`` (the SDKs' shorthand,
    ``{"role": "assistant", "content": "Blue."}``) gets ``"type": "message"``, which
    OpenAI assumes: llama-server b11434 reads a typeless item only for the roles user,
    system and developer and answers any other a 400 ``Cannot determine type of 'item'``
    (``server_chat_convert_responses_to_chatcmpl``, ``tools/server/server-chat.cpp``).
    With the type, an assistant item's string content is read as text there as it is.

    Raises:
        InvalidRequestError: ``input`` missing or not a string or an array of
            objects, a non-text part, ``previous_response_id`` (Fronde and llama-server
            keep no conversation: send it whole in ``input``), or a field of the wrong
            type or range.
    """
    items = body.get("input")
    if not isinstance(items, str | list):
        raise _fail("'input' must be a string or an array of input items", "input")
    for i, raw in enumerate(items if isinstance(items, list) else []):
        if not isinstance(raw, dict):
            raise _fail(f"'input[{i}]' must be an object", f"input[{i}]")
        item = raw
        if item.get("type") is None and isinstance(item.get("role"), str):
            item["type"] = "message"
        content = item.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            _text_only(kind, f"input[{i}].content[{j}]")
    if body.get("previous_response_id"):
        raise _fail(
            "'previous_response_id' is not supported: no response is stored here; "
            "send the whole conversation in 'input'",
            "previous_response_id",
        )
    if "instructions" in body and not isinstance(body["instructions"], str | None):
        raise _fail("'instructions' must be a string", "instructions")
    if body.get("text") is not None and not isinstance(body["text"], dict):
        raise _fail("'text' must be an object", "text")
    if body.get("tool_choice") is not None and not isinstance(body["tool_choice"], str | dict):
        raise _fail("'tool_choice' must be a string or an object", "tool_choice")
    _shared(body, 2.0)
    _budget(body, "max_output_tokens", default_max_tokens)


def check_messages(body: JSONObject, default_max_tokens: int) -> None:
    """Check an Anthropic Messages body; set ``max_tokens`` when absent.

    Anthropic requires ``max_tokens``; Fronde lends ``server.default_max_tokens``
    instead of refusing, as it does for chat.

    Raises:
        InvalidRequestError: ``messages`` missing or empty, a role other than
            ``user`` / ``assistant``, content neither a string nor an array of blocks,
            a non-text block, ``system`` neither a string nor an array, or a field of
            the wrong type or range (``temperature`` from 0 to 1, as Anthropic's).
    """
    check_message_list(body)
    if body.get("system") is not None and not isinstance(body["system"], str | list):
        raise _fail("'system' must be a string or an array of text blocks", "system")
    stops = body.get("stop_sequences")
    if stops is not None and not (
        isinstance(stops, list) and all(isinstance(s, str) for s in stops)
    ):
        raise _fail("'stop_sequences' must be an array of strings", "stop_sequences")
    if body.get("tool_choice") is not None and not isinstance(body["tool_choice"], dict):
        raise _fail("'tool_choice' must be an object", "tool_choice")
    check_number(body, "top_k", 0, 1_000_000)
    _shared(body, 1.0)
    _budget(body, "max_tokens", default_max_tokens)


def check_message_list(body: JSONObject) -> None:
    """Check an Anthropic body's ``messages`` (Messages, and its token count).

    Raises:
        InvalidRequestError: missing or empty, a role other than ``user`` /
            ``assistant``, content neither a string nor an array of blocks, a non-text
            block.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail("'messages' must be a non-empty array", "messages")
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise _fail(f"'{where}' must be an object", where)
        msg = raw
        role = msg.get("role")
        if not isinstance(role, str) or role not in _ANTHROPIC_ROLES:
            raise _fail(f'\'{where}.role\' must be "user" or "assistant"', f"{where}.role")
        content = msg.get("content")
        if not isinstance(content, str | list):
            raise _fail(f"'{where}.content' must be a string or an array of blocks", where)
        for j, block in enumerate(content if isinstance(content, list) else []):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            _text_only(kind, at)
            if not isinstance(kind, str) or kind not in _ANTHROPIC_TEXT_BLOCKS:
                raise _fail(f"'{at}' must be a block of type text, tool_use or tool_result", at)


def check_infill(body: JSONObject, default_max_tokens: int) -> None:
    """Check a llama-server ``/infill`` body; set ``n_predict`` when absent.

    Raises:
        InvalidRequestError: ``input_prefix``, ``input_suffix`` or ``prompt`` not a
            string, ``input_extra`` not an array of ``{"filename", "text"}`` objects, or
            a field of the wrong type or range.
    """
    for name in ("input_prefix", "input_suffix", "prompt"):
        if name in body and not isinstance(body[name], str):
            raise _fail(f"'{name}' must be a string", name)
    extra = body.get("input_extra")
    if extra is not None and not (
        isinstance(extra, list)
        and all(isinstance(e, dict) and isinstance(e.get("text"), str) for e in extra)
    ):
        raise _fail("'input_extra' must be an array of {filename, text} objects", "input_extra")
    _shared(body, 2.0)
    if body.get("n_predict") == -1:  # llama-server's "until the end": bounded here
        del body["n_predict"]
    _budget(body, "n_predict", default_max_tokens)


_CHECKS = {
    RESPONSES.path: (RESPONSES, check_responses),
    MESSAGES.path: (MESSAGES, check_messages),
    INFILL.path: (INFILL, check_infill),
}


async def _routed(request: Request) -> Response:
    rt = runtime_of(request)
    api, check = _CHECKS[request.url.path]
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check(body, rt.settings.server.default_max_tokens)
    passed = PassedRequest.parse(body)
    work = rt.dispatcher.answer(api.kind, passed, request.headers.get("x-fronde-mode"), api)
    return await answered(request.receive, work)


async def _no_embeddings(request: Request) -> Response:
    raise NotFoundError(
        f"{request.url.path}: this Fronde serves no embedding or reranking model "
        "(llama-server serves them only from a server started with --embeddings or "
        "--reranking); send these requests to such a server"
    )


async def _count_tokens(request: Request, rt: RuntimeDep) -> Response:
    """``/v1/messages/count_tokens``: ``messages`` checked, then counted by a backend.

    llama-server b11434 answers a 500 for a body without ``messages``.
    """
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check_message_list(body)
    mode = request.headers.get("x-fronde-mode")
    return render(await rt.dispatcher.native.post(COUNT_TOKENS_PATH, body, mode))


def _add(api: Api) -> None:
    doc = f"{api.name}: routed like chat, passed through as sent (fronde.api.apis)."
    agents.add_api_route(api.path, _routed, methods=["POST"], description=doc)


for _api in (RESPONSES, MESSAGES, INFILL):
    _add(_api)
agents.add_api_route(COUNT_TOKENS_PATH, _count_tokens, methods=["POST"])
for _path in EMBEDDING_PATHS:
    agents.add_api_route(_path, _no_embeddings, methods=["POST"], include_in_schema=False)
