"""OpenAI Predicted Outputs (``prediction: {"type": "content", "content": ...}``) on llama.cpp.

OpenAI drafts from the prediction. llama-server b11434 has no such field, but its
ngram-mod drafter keeps one n-gram pool per server, across requests, and adds every
prompt's n-grams to it once the prompt is evaluated (``common_speculative_begin`` after
the prefill in ``tools/server/server-context.cpp``; ``begin`` in
``common/speculative.cpp`` adds each n-gram of the prompt). So before such a request
Fronde sends the chosen backend, when it runs ngram-mod (alone or in the cascade), a
native ``/completion`` of one token whose prompt is the prediction: its n-grams are then
in the pool, and the answer can be drafted from the prediction even where the prompt
does not hold it. The feed costs the prediction's prefill (measured in the closing note
of issue 22); it cannot change the answer, only what is drafted.

The answer's ``usage.completion_tokens_details`` then carries OpenAI's two counts,
computed from token ids on the same backend (its ``/tokenize``):
``accepted_prediction_tokens``, the prediction's tokens that appear in the answer in
order (the matching blocks of :class:`difflib.SequenceMatcher`), and
``rejected_prediction_tokens``, the rest of the prediction. Only whole (non-streamed)
answers get them.

Source: OpenAI API reference, "Predicted Outputs" and ``completion_tokens_details``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from fronde.backends.client import BackendClient
from fronde.errors import BackendError
from fronde.json_types import JSONObject, json_int
from fronde.logging import get_logger
from fronde.modes import Mode

__all__ = ["FEEDS_POOL", "feed_pool", "prediction_counts", "prediction_text", "with_counts"]

log = get_logger(__name__)

FEEDS_POOL = frozenset({Mode.NGRAM_MOD, Mode.CASCADE})
"""Modes whose server keeps a cross-request n-gram pool a prediction can be fed into."""


def prediction_text(body: JSONObject) -> str | None:
    """The text of the body's ``prediction`` (a string, or text parts), or None."""
    pred = body.get("prediction")
    if not isinstance(pred, dict):
        return None
    content = pred.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        text = "".join(t for t in parts if isinstance(t, str))
        return text or None
    return None


async def feed_pool(
    client: BackendClient, url: str, text: str, fields: Mapping[str, Any] | None = None
) -> bool:
    """Put ``text``'s n-grams in the pool of the ngram-mod server at ``url``.

    One native ``/completion`` of one greedy token whose prompt is ``text``, with the
    mode's ``fields`` where one server serves every mode. A failure is logged and
    ignored (the request then runs without the feed).

    Returns:
        Whether the backend answered.
    """
    body: JSONObject = {"prompt": text, "n_predict": 1, "temperature": 0, "cache_prompt": True}
    body |= fields or {}
    try:
        await client.post_json(url, "/completion", body)
    except BackendError as exc:
        log.warning("prediction.feed_failed", url=url, error=exc.message)
        return False
    return True


def prediction_counts(predicted: list[int], generated: list[int]) -> tuple[int, int]:
    """``(accepted, rejected)`` prediction tokens, as OpenAI counts them.

    Accepted: tokens of ``predicted`` found in ``generated`` in order (the matching
    blocks of a :class:`difflib.SequenceMatcher`, autojunk off); rejected: the rest.
    """
    matcher = difflib.SequenceMatcher(None, predicted, generated, autojunk=False)
    accepted = sum(block.size for block in matcher.get_matching_blocks())
    return accepted, len(predicted) - accepted


async def with_counts(
    client: BackendClient, url: str, data: JSONObject, prediction: str, answer: str
) -> None:
    """Add ``accepted_prediction_tokens`` and ``rejected_prediction_tokens`` to ``data``'s usage.

    Both texts are tokenized by the backend at ``url``; on a failure the counts are left out.
    """
    try:
        ids: list[list[int]] = []
        for text in (prediction, answer):
            got = await client.post_json(url, "/tokenize", {"content": text})
            tokens = got.get("tokens") or []
            if not isinstance(tokens, list):
                raise TypeError("/tokenize answered tokens that are not a list")
            ids.append([json_int(t) for t in tokens])
    except (BackendError, TypeError, ValueError) as exc:
        log.warning("prediction.count_failed", error=str(exc))
        return
    accepted, rejected = prediction_counts(ids[0], ids[1])
    usage = data.setdefault("usage", {})
    if isinstance(usage, dict):
        details = usage.setdefault("completion_tokens_details", {})
        if isinstance(details, dict):
            details.update(accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected)
