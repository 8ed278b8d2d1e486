"""Static request classes, decided from the request body alone (pure, no I/O).

- ``unsafe-for-spec``: fields that speculation must not touch, found by the
  structured-output matrix (``fronde bench structured``; ``results/structured-*``):
  ``logprobs``, ``top_logprobs`` and ``n_probs`` (under every spec mode, accepted draft
  tokens came back without their alternatives: 0 of 8 answers whole under ngram-mod
  and the cascade, SmolLM2-135M, 2026-12-02), and ``tools`` / ``functions`` where the
  chat template describes tools, which no offline model's does, so tool calls under
  speculation are untested. ``grammar``, ``json_schema`` and ``response_format`` held
  in every exercised cell (every answer parsed and validated, drafts accepted, at
  temperature 0 and 0.8): they are routed like any other request
  (``router.speculate_structured``), as are ``tools`` where the template ignores them
  (llama-server then renders and decodes the request as plain chat: no call, no
  grammar). (``n`` > 1 never gets here: the schema refuses it with a 400.)
- ``edit``: a fenced code or JSON block of at least ``EDIT_BLOCK_CHARS`` plus an edit
  verb (English or French), or OpenAI's ``prediction`` field (Predicted Outputs).
  The original FRONDE router sends these straight to ngram-mod: the answer mostly
  copies the block, which is what n-gram drafting accelerates.
- ``general``: everything else; the router measures it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from fronde.config_router import ROUTER_DEFAULTS
from fronde.json_types import JSON, JSONObject

__all__ = [
    "EDIT_BLOCK_CHARS",
    "TOOL_FIELDS",
    "UNSAFE_FIELDS",
    "VERIFIED_FIELDS",
    "RequestClass",
    "classify",
    "constrained",
    "edit_signals",
    "request_text",
    "unsafe_fields",
]

EDIT_BLOCK_CHARS: int = ROUTER_DEFAULTS.edit_block_chars
"""Smallest code/JSON block that makes an edit: 800 characters (original FRONDE router;
``router.edit_block_chars``)."""

UNSAFE_FIELDS = (
    "logprobs",
    "top_logprobs",
    "n_probs",
    "grammar",
    "json_schema",
    "response_format",
    "tools",
    "functions",
)
"""Request fields that send a request to baseline (present and not null/false/empty),
unless the structured-output matrix cleared them (:data:`VERIFIED_FIELDS`,
:data:`TOOL_FIELDS`)."""

VERIFIED_FIELDS = frozenset({"grammar", "json_schema", "response_format"})
"""Fields whose output stayed valid under every spec mode in the matrix."""

TOOL_FIELDS = frozenset({"tools", "functions"})
"""Fields that are plain chat where the chat template ignores tools."""

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_JSON_BLOCK = re.compile(r"[\[{][\s\S]*[\]}]")
_EDIT_VERBS = re.compile(
    r"\b("
    # English
    r"edit|fix|rename|refactor|change|update|modify|replace|rewrite|correct|patch|"
    r"apply|remove|delete|add|insert|convert|migrate|bump|"
    # French (infinitive and imperative forms)
    r"modifie[rz]?|corrige[rz]?|renomme[rz]?|remplace[rz]?|r[ée][ée]cri(?:re|s|vez)|"
    r"mets? [àa] jour|mettre [àa] jour|ajoute[rz]?|supprime[rz]?|refactorise[rz]?|"
    r"change[rz]?|transforme[rz]?|convertis(?:sez)?|convertir"
    r")\b"
)
"""Searched in lowercased text (:func:`edit_signals`): ``re.IGNORECASE`` made the search of a
15-KB prompt 3.0 ms on the 2-core CPU, 3.3 times the lowercased text's, in the request's
path before its upstream call."""


class RequestClass(StrEnum):
    """The static class of a request."""

    UNSAFE = "unsafe-for-spec"
    EDIT = "edit"
    GENERAL = "general"


def _text_of(content: JSON) -> str:
    """Text of a message ``content``: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str):
                parts.append(text)
        return "\n".join(parts)
    return ""


def request_text(body: JSONObject) -> str:
    """The text the client wrote: every message's content, or the prompt."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(_text_of(m.get("content")) for m in messages if isinstance(m, dict))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        texts = [p for p in prompt if isinstance(p, str)]
        if len(texts) == len(prompt):
            return "\n".join(texts)
    return ""


def edit_signals(text: str) -> tuple[int, bool]:
    """Return (largest code/JSON block in characters, whether an edit verb occurs).

    A block is a fenced ``` block, or failing any fence, the span from the first
    ``{``/``[`` to the last ``}``/``]`` (a bare JSON document).
    """
    # One pass of each pattern (a 15-KB prompt: 1.2 ms on 2 cores with three fence passes).
    spans = list(_FENCE.finditer(text))
    blocks = [m.group(1) for m in spans]
    if not spans:
        whole = _JSON_BLOCK.search(text)  # greedy: first bracket to last, so one at most
        spans = [whole] if whole else []
        blocks = [whole.group(0)] if whole else []
    largest = max((len(b) for b in blocks), default=0)
    # Look for the verb outside the blocks, in the instruction (each block a space).
    pieces: list[str] = []
    end = 0
    for m in spans:
        pieces += (text[end : m.start()], " ")
        end = m.end()
    outside = "".join(pieces) + text[end:]
    return largest, bool(_EDIT_VERBS.search(outside.lower()))


def _set(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def unsafe_fields(*, structured: bool = False, tools_ignored: bool = False) -> tuple[str, ...]:
    """The fields that make a request unsafe for speculation.

    Args:
        structured: grammars, JSON schemas and ``response_format`` may be speculated on
            (``router.speculate_structured``: the matrix cleared them).
        tools_ignored: the chat template ignores tools (``supports_tools`` false), so
            ``tools`` and ``functions`` leave the request plain chat; only with
            ``structured``.
    """
    cleared: frozenset[str] = frozenset()
    if structured:
        cleared = VERIFIED_FIELDS | TOOL_FIELDS if tools_ignored else VERIFIED_FIELDS
    return tuple(f for f in UNSAFE_FIELDS if f not in cleared)


def classify(
    body: dict[str, Any],
    *,
    edit_block_chars: int = EDIT_BLOCK_CHARS,
    unsafe: tuple[str, ...] = UNSAFE_FIELDS,
    text: str | None = None,
) -> RequestClass:
    """Return the static class of an OpenAI chat or completions request body.

    Args:
        body: the parsed JSON body.
        edit_block_chars: the EDIT block threshold, characters.
        unsafe: the fields that make it unsafe (:func:`unsafe_fields`); all of
            :data:`UNSAFE_FIELDS` by default.
        text: ``request_text(body)`` when the caller has it already.

    Returns:
        UNSAFE if any field of ``unsafe`` is set; else EDIT with ``prediction`` or a
        large block plus an edit verb; else GENERAL.
    """
    if any(_set(body.get(f)) for f in unsafe):
        return RequestClass.UNSAFE
    if _set(body.get("prediction")):
        return RequestClass.EDIT
    largest, verb = edit_signals(request_text(body) if text is None else text)
    if largest >= edit_block_chars and verb:
        return RequestClass.EDIT
    return RequestClass.GENERAL


def constrained(body: dict[str, Any]) -> bool:
    """Whether the request's output is held to a grammar.

    ``grammar``, ``json_schema``, or ``response_format`` of type ``json_schema`` or
    ``json_object``: llama-server then checks every sampled token against the grammar,
    which slows each step by the grammar's own cost, so such a generation says how fast
    its grammar runs, not how fast its mode does
    (:meth:`~fronde.router.engine.Router.record`).
    """
    if _set(body.get("grammar")) or _set(body.get("json_schema")):
        return True
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object")  # pyright: ignore[reportUnknownMemberType]
