"""OpenAI request → llama-server native ``/completion`` parameters, and back.

The probe-and-continue path speaks llama-server's native API, because it must
send token ids (``prompt`` as an array) and get token ids back (``return_tokens``),
so that nothing is re-tokenized between the probe and its continuation. These
pure functions translate the OpenAI body into native sampling parameters and
build OpenAI-shaped responses and stream chunks from what came back.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

__all__ = [
    "Kind",
    "chunk",
    "finish_reason",
    "full_response",
    "max_new_tokens",
    "new_id",
    "sampling_params",
    "usage",
]

Kind = Literal["chat", "text"]
"""``chat`` for /v1/chat/completions, ``text`` for /v1/completions."""

# OpenAI name → llama-server native name (tools/server/server-schema.cpp).
_PARAMS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "typical_p": "typical_p",
    "logit_bias": "logit_bias",
}


def max_new_tokens(body: dict[str, Any]) -> int | None:
    """The client's token budget: ``max_completion_tokens``, else ``max_tokens``, else None."""
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def sampling_params(body: dict[str, Any]) -> dict[str, Any]:
    """Native ``/completion`` parameters equivalent to the OpenAI body's sampling fields.

    ``stop`` (a string or a list) becomes a list. Budget and prompt are set by the caller.
    """
    out = {native: body[name] for name, native in _PARAMS.items() if name in body}
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop"] = [stop]
    elif isinstance(stop, list):
        out["stop"] = [s for s in stop if isinstance(s, str)]  # pyright: ignore[reportUnknownVariableType]
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
) -> dict[str, Any]:
    """One OpenAI stream chunk (``chat.completion.chunk`` or ``text_completion``)."""
    if kind == "chat":
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
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
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole non-streamed OpenAI response (``chat.completion`` or ``text_completion``)."""
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    out: dict[str, Any] = {
        "id": new_id(kind),
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, completion_tokens),
    }
    out.update(extra or {})
    return out
