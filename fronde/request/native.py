"""OpenAI request → llama-server native ``/completion`` parameters, and back.

The probe-and-continue path speaks llama-server's native API, because it must
send token ids (``prompt`` as an array) and get token ids back (``return_tokens``),
so that nothing is re-tokenized between the probe and its continuation. These
pure functions carry the OpenAI body's fields into native segments (all but the few
Fronde owns), tell which requests a hand-over cannot serve, and build OpenAI-shaped
responses and stream chunks from what came back.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from fronde.json_types import JSONObject

__all__ = [
    "HANDOVER_BLOCKERS",
    "SEGMENT_OWNED",
    "Kind",
    "chunk",
    "finish_reason",
    "full_response",
    "max_new_tokens",
    "new_id",
    "segment_params",
    "splice_safe",
    "usage",
]

Kind = Literal["chat", "text"]
"""``chat`` for /v1/chat/completions, ``text`` for /v1/completions."""

SEGMENT_OWNED = frozenset(
    {
        # the prompt, as token ids, and each segment's budget
        "prompt",
        "messages",
        "n_predict",
        "max_tokens",
        "max_completion_tokens",
        # Fronde matches stop strings over the whole answer (fronde.request.stops)
        "stop",
        # the shape of each segment's stream, which Fronde reads
        "stream",
        "stream_options",
        "return_tokens",
        "timings_per_token",
        "cache_prompt",
        "response_fields",
        "return_progress",
        "sse_ping_interval",
        "verbose",
        # where and how many: one slot, one answer
        "id_slot",
        "n",
        "n_cmpl",
        "model",
    }
)
"""Request fields a probe segment sets itself instead of copying them from the client.

Every other field reaches each segment as sent: llama-server b11434's ``/completion``
reads the same sampling fields as its OpenAI routes (``tools/server/server-schema.cpp``,
``make_llama_cmpl_schema``), so a sampler the client tunes (``dry_*``, ``xtc_*``,
``mirostat*``, ``samplers``, ``logit_bias``, ``ignore_eos``, ...) runs on every segment.
Fields only the chat template reads (``chat_template_kwargs``, ``add_generation_prompt``)
shape the prompt, which ``/apply-template`` renders from the whole body; ``/completion``
ignores them.
"""

HANDOVER_BLOCKERS = (
    "grammar",
    "json_schema",
    "response_format",
    "tools",
    "functions",
    "grammar_triggers",
    "preserved_tokens",
)
"""Fields whose effect a hand-over cannot carry: a request with one is never spliced.

A grammar's state lives in one slot's sampler: b11434 feeds the prompt's tokens to every
sampler but the grammar (``server_slot::init_sampler`` calls ``common_sampler_accept``
with ``accept_grammar`` false), so a continuation would start the grammar again in the
middle of the answer. On chat, the template also turns ``response_format`` and ``tools``
into a grammar and an output parser of its own (``oaicompat_chat_params_parse``), which
``/completion`` takes no field for. Such a request runs whole on the mode the router
picked, exactly as that mode's server alone answers it.
"""


def max_new_tokens(body: JSONObject) -> int | None:
    """The client's token budget: ``max_completion_tokens``, else ``max_tokens``, else None."""
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def splice_safe(body: JSONObject) -> bool:
    """Whether an answer to ``body`` may be handed over between backends mid-generation.

    False when a field of :data:`HANDOVER_BLOCKERS` is set: not None nor empty, and for
    ``response_format`` a type other than ``text``.
    """
    for name in HANDOVER_BLOCKERS:
        value = body.get(name)
        if value is None or value in ("", [], {}):
            continue
        kind = value.get("type") if isinstance(value, dict) else None
        if name == "response_format" and kind in (None, "text"):
            continue
        return False
    return True


def segment_params(body: JSONObject) -> JSONObject:
    """The client's fields for a native ``/completion`` segment: all but :data:`SEGMENT_OWNED`.

    ``stop`` (a string or a list) comes back as a list, for the caller's stop matcher (the
    segment body leaves it out). The caller sets the budget and the prompt.
    """
    out: JSONObject = {k: v for k, v in body.items() if k not in SEGMENT_OWNED}
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop"] = [stop]
    elif isinstance(stop, list):
        out["stop"] = [s for s in stop if isinstance(s, str)]
    return out


def finish_reason(stop_type: str | None) -> str | None:
    """OpenAI ``finish_reason`` for llama-server's ``stop_type`` (eos, word, limit)."""
    return {"eos": "stop", "word": "stop", "limit": "length"}.get(stop_type or "")


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The OpenAI ``usage`` object, every token counted once."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def new_id(kind: Kind) -> str:
    """A response id in OpenAI's style (``chatcmpl-…`` or ``cmpl-…``)."""
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def chunk(
    kind: Kind,
    rid: str,
    model: str,
    created: int,
    *,
    text: str | None = None,
    role: bool = False,
    finish: str | None = None,
) -> JSONObject:
    """One OpenAI stream chunk (``chat.completion.chunk`` or ``text_completion``)."""
    if kind == "chat":
        delta: JSONObject = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: JSONObject = {"index": 0, "delta": delta, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]}


def full_response(
    kind: Kind,
    model: str,
    text: str,
    finish: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    extra: JSONObject | None = None,
) -> JSONObject:
    """A whole non-streamed OpenAI response (``chat.completion`` or ``text_completion``)."""
    if kind == "chat":
        choice: JSONObject = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    out: JSONObject = {
        "id": new_id(kind),
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {**usage(prompt_tokens, completion_tokens)},
    }
    out.update(extra or {})
    return out
