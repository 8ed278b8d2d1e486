"""The structured-output matrix's rows: each feature, the prompts, each answer's check.

The prompts make the model copy a JSON document, so that the n-gram drafters draft.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import jsonschema

__all__ = [
    "FEATURES", "PROMPTS", "SCHEMA", "TOOLS", "Feature", "content_of", "judge", "tool_calls",
]  # fmt: skip

_PEOPLE = [
    {"name": "Ada Lovelace", "born": 1815, "city": "London", "field": "mathematics"},
    {"name": "Alan Turing", "born": 1912, "city": "Manchester", "field": "computing"},
    {"name": "Grace Hopper", "born": 1906, "city": "New York", "field": "compilers"},
    {"name": "Emmy Noether", "born": 1882, "city": "Erlangen", "field": "algebra"},
]
PROMPTS = [
    "Copy this JSON object exactly, changing only the city to Paris:\n" + json.dumps(p)
    for p in _PEOPLE
]
"""Copy-heavy requests: the answer repeats most of the prompt, so n-gram modes draft."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "born": {"type": "integer"},
        "city": {"type": "string"},
        "field": {"type": "string"},
    },
    "required": ["name", "born", "city"],
}
"""The schema of ``json_schema`` and of the tool's parameters."""

TOOLS = [
    {
        "type": "function",
        "function": {"name": "save_person", "description": "Save a person", "parameters": SCHEMA},
    }
]
_GRAMMAR = 'root ::= "{" [^{}]* "}"'


@dataclass(frozen=True)
class Feature:
    """One feature: the request ``fields`` that ask for it and ``check(answer) -> why``.

    ``check`` reads the answer's sample record; ``""`` passes.
    """

    name: str
    fields: dict[str, Any]
    check: Callable[[dict[str, Any]], str]


def content_of(answer: dict[str, Any]) -> str:
    """An answer's text (its message content), ``""`` when it has none."""
    text = answer.get("text")
    return text if isinstance(text, str) else ""


def _json(answer: dict[str, Any]) -> tuple[Any, str]:
    try:
        return json.loads(content_of(answer)), ""
    except ValueError as exc:
        return None, f"not JSON: {exc}"


def _check_object(answer: dict[str, Any]) -> str:
    value, why = _json(answer)
    return why or ("" if isinstance(value, dict) else "JSON but not an object")


def _check_schema(answer: dict[str, Any]) -> str:
    value, why = _json(answer)
    if why:
        return why
    try:
        jsonschema.validate(value, SCHEMA)
    except jsonschema.ValidationError as exc:
        return f"schema: {exc.message}"
    return ""


def _check_grammar(answer: dict[str, Any]) -> str:
    text = content_of(answer)
    inner = text[1:-1]
    ok = text.startswith("{") and text.endswith("}") and "{" not in inner and "}" not in inner
    return "" if ok else f"outside the grammar: {text[:60]!r}"


def tool_calls(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """An answer's tool calls, ``[]`` when it has none."""
    raw = answer.get("tool_calls")
    return cast("list[dict[str, Any]]", raw) if isinstance(raw, list) else []


def _check_calls(answer: dict[str, Any], at_least: int) -> str:
    calls = tool_calls(answer)
    if len(calls) < at_least:
        return "no tool call"
    for call in calls:
        fn = cast("dict[str, Any]", call.get("function") or {})
        if not call.get("id"):
            return "a call without id"
        if fn.get("name") != "save_person":
            return f"unknown function {fn.get('name')!r}"
        try:
            args = json.loads(str(fn.get("arguments")))
        except ValueError:
            return "arguments are not JSON"
        if not isinstance(args, dict):
            return "arguments are not an object"
    return ""


def _check_logprobs(raw: Any, tokens: int) -> str:
    entries = cast("dict[str, Any]", raw).get("content") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or len(cast("list[Any]", entries)) != tokens:
        got = len(cast("list[Any]", entries)) if isinstance(entries, list) else 0
        return f"{got} logprob entries for {tokens} tokens"
    for entry in cast("list[dict[str, Any]]", entries):
        lp = entry.get("logprob")
        if not isinstance(lp, int | float) or not math.isfinite(lp) or lp > 0:
            return f"bad logprob {lp!r}"
        if len(entry.get("top_logprobs") or []) != 3:
            return "not 3 alternatives"
    return ""


FEATURES = [
    Feature("json_object", {"response_format": {"type": "json_object"}}, _check_object),
    Feature(
        "json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": SCHEMA},
            }
        },
        _check_schema,
    ),
    Feature("grammar", {"grammar": _GRAMMAR}, _check_grammar),
    Feature("tools_auto", {"tools": TOOLS}, lambda c: _check_calls(c, 0)),
    Feature(
        "tools_required", {"tools": TOOLS, "tool_choice": "required"}, lambda c: _check_calls(c, 1)
    ),
    Feature(
        "tools_named",
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "save_person"}}},
        lambda c: _check_calls(c, 1),
    ),
    Feature("logprobs", {"logprobs": True, "top_logprobs": 3}, lambda c: ""),  # judged with usage
]
"""The matrix's rows, in order."""


def judge(feature: Feature, answer: dict[str, Any]) -> tuple[str, str]:
    """``(verdict, why)`` of one answer's sample record for ``feature``.

    Verdicts as :class:`~fronde.bench.structured.Sample`'s: pass, fail, cut or error.
    """
    if not answer.get("ok"):
        return "error", str(answer.get("error", "")).rpartition(" answered ")[2][:120]
    if feature.name == "logprobs":
        why = _check_logprobs(answer.get("logprobs"), int(answer.get("tokens") or 0))
    elif answer.get("finish") == "length":
        return "cut", "the budget ended the answer"
    else:
        why = feature.check(answer)
    return ("fail" if why else "pass"), why
