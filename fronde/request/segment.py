"""One segment of a probed answer: the prompt's token ids, and ids streamed from a backend.

A probe-and-continue answer (:mod:`fronde.request.splice`) is a run of segments, each
a ``/completion`` stream over token ids on one backend: :func:`prompt_ids` renders and
tokenizes the prompt once, :func:`segment_stream` streams one segment into its
:class:`Segment`, and :func:`assistant_prefill` is the text a final ``assistant``
message makes the answer start with. :mod:`fronde.request.hindsight` reuses
:func:`prompt_ids`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from fronde.backends.client import BackendClient
from fronde.errors import BackendConnectionError, BackendStreamError, InvalidRequestError
from fronde.json_types import JSON, JSONObject, json_int
from fronde.modes import Mode
from fronde.request.native import Kind
from fronde.timings import TimingsTrail

__all__ = ["Segment", "assistant_prefill", "prompt_ids", "segment_stream"]


@dataclass
class Segment:
    """One backend's share of a generation.

    Attributes:
        mode: the mode that generated it.
        tokens: generated token ids.
        text: generated text, as the backend sent it.
        stop_type: llama-server's ``stop_type`` (``eos``, ``limit``), ``word`` when Fronde
            ended it on a stop string, or None while running.
        timings: llama-server's latest ``timings`` of this segment (sent per token), as
            its :class:`~fronde.timings.TimingsTrail` folds them (a segment cut on a stop
            string inside a verify pass counts only the accepted drafts it sent).
        truncated: llama-server stopped because the slot's context was full (its final
            event's ``truncated``, ``tools/server/server-context.cpp``): nothing can
            follow, on any backend.
        slot: the slot it ran on (its last event's ``id_slot``: b11434 sets it in the
            final result only, ``send_final_response``, and sends -1 before), or None.
    """

    mode: Mode
    tokens: list[int] = field(default_factory=list[int])
    text: str = ""
    stop_type: str | None = None
    timings: JSONObject = field(default_factory=dict[str, JSON])
    truncated: bool = False
    slot: int | None = None
    trail: TimingsTrail = field(default_factory=TimingsTrail, repr=False, compare=False)

    @property
    def decode_tok_s(self) -> float:
        """llama-server's decode tok/s for this segment (0.0 if unknown)."""
        tps = self.timings.get("predicted_per_second")
        return float(tps) if isinstance(tps, int | float) else 0.0

    @property
    def generated(self) -> int:
        """Tokens this segment generated: llama-server's ``predicted_n``, else the ids seen."""
        n = self.timings.get("predicted_n")
        return int(n) if isinstance(n, int) else len(self.tokens)


def assistant_prefill(kind: Kind, body: JSONObject) -> str:
    """The text of a final ``assistant`` message that llama-server continues, or "".

    llama-server (``prefill_assistant``, on by default) continues a chat whose last
    message is the assistant's, and its chat endpoint answers with that message's
    text followed by the continuation.
    """
    if kind != "chat":
        return ""
    messages = body.get("messages") or []
    last: JSON = messages[-1] if isinstance(messages, list) and messages else {}
    if not isinstance(last, dict):  # the API checked: every message is an object
        return ""
    content = last.get("content")
    if last.get("role") != "assistant" or not content:
        return ""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(
        str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
    )


async def prompt_ids(client: BackendClient, url: str, kind: Kind, body: JSONObject) -> list[int]:
    """Render (chat) and tokenize the request's prompt on a backend, with BOS.

    Raises:
        InvalidRequestError: a completion prompt that is not a string.
        BackendError: from the backend calls.
    """
    if kind == "chat":
        # The whole body: the template also reads chat_template_kwargs, reasoning_effort,
        # add_generation_prompt and the like (llama-server's oaicompat_chat_params_parse).
        rendered = await client.post_json(url, "/apply-template", body)
        text = rendered.get("prompt")
    else:
        text = body.get("prompt")
    if not isinstance(text, str):
        raise InvalidRequestError("the prompt must be a string", param="prompt")
    out = await client.post_json(
        url, "/tokenize", {"content": text, "add_special": True, "parse_special": True}
    )
    ids = out.get("tokens")
    if not isinstance(ids, list):
        raise BackendConnectionError(f"{url}/tokenize returned no tokens")
    return [json_int(t) for t in ids]


def _native_body(prompt: list[int], params: JSONObject, n_predict: int) -> JSONObject:
    return {
        **{k: v for k, v in params.items() if k != "stop"},  # Fronde matches stop strings
        "prompt": list[JSON](prompt),
        "n_predict": n_predict,
        "stream": True,
        "timings_per_token": True,
        "return_tokens": True,
        "cache_prompt": True,
    }


async def segment_stream(
    client: BackendClient,
    url: str,
    seg: Segment,
    prompt: list[int],
    params: JSONObject,
    n_predict: int,
) -> AsyncGenerator[str]:
    """Stream one native ``/completion`` segment, filling ``seg``; yield text pieces.

    ``params`` may hold ``stop``: it is not sent (the caller matches stop strings).

    Raises:
        BackendError: the backend refused the request or failed mid-stream.
    """
    body = _native_body(prompt, params, n_predict)
    async with client.stream(url, "/completion", body) as upstream:
        lines = upstream.lines()
        while True:
            try:
                line = await anext(lines)
                event: JSON = json.loads(line[6:]) if line.startswith("data: ") else None
            except StopAsyncIteration:
                break
            except BackendStreamError as exc:
                # A backend that died mid-body: a backend error (502 or an in-band
                # error event), never an internal one.
                raise BackendConnectionError(f"{seg.mode} failed mid-stream: {exc.cause}") from exc
            except ValueError as exc:
                raise BackendConnectionError(f"{seg.mode} sent an event that is not JSON") from exc
            if not isinstance(event, dict):  # llama-server's events are objects
                continue
            if "error" in event:
                raise BackendConnectionError(f"{seg.mode} failed: {event['error']}")
            slot = event.get("id_slot")
            if isinstance(slot, int) and slot >= 0:  # b11434 sends -1 until the last event
                seg.slot = slot
            tokens = event.get("tokens") or []
            seg.tokens.extend(json_int(t) for t in (tokens if isinstance(tokens, list) else []))
            seg.timings = seg.trail.add(event.get("timings")) or seg.timings
            piece = event.get("content") or ""
            if isinstance(piece, str) and piece:
                seg.text += piece
                yield piece
            if event.get("stop"):
                stop_type = event.get("stop_type")
                seg.stop_type = stop_type if isinstance(stop_type, str) else None
                seg.truncated = bool(event.get("truncated"))
                return
    raise BackendConnectionError(f"{seg.mode} closed the stream before its last event")
