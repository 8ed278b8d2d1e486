"""Does speculation keep structured output valid? The matrix mode × feature × temperature.

Fronde sends requests with a grammar, a JSON schema, ``response_format``, ``tools`` or
``logprobs`` to baseline unless speculation is shown to keep them whole. In llama.cpp
b11434 the verify step samples through the slot's sampler, grammar included
(``tools/server/server-context.cpp``), so it should; this measures it instead of
assuming it. Each feature is asked of every mode's llama-server directly (Fronde's own
routing would send it to baseline), at temperature 0 and at a temperature above 0 with
a fixed seed, on prompts that make the model copy a JSON document from the prompt, so
that the n-gram drafters have something to draft; every answer is checked:

- ``json_object``, ``json_schema``: the content parses (and validates: ``jsonschema``);
- ``grammar`` (GBNF ``root ::= "{" [^{}]* "}"``): the content matches it;
- ``tools_auto``, ``tools_required``, ``tools_named``: every tool call has an id and a
  known name, its arguments parse as a JSON object; ``required`` and a named function
  need at least one call;
- ``logprobs`` (``top_logprobs: 3``): one entry per completion token, each with a finite
  logprob and 3 alternatives.

An answer cut by the budget (``finish_reason: "length"``) cannot be judged (truncated
JSON does not parse whatever decoded it): it is counted apart as ``cut``. A cell
**holds** when every judged answer passes and the drafters were exercised (at least one
drafted token accepted in the cell); it is ``untested`` when nothing was accepted or
nothing could be judged, ``n/a`` when baseline itself does not do the feature (a chat
template that takes no tools makes no calls), and it **fails** otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx
import jsonschema

__all__ = [
    "FEATURES",
    "PROMPTS",
    "Cell",
    "Feature",
    "Sample",
    "cells",
    "judge",
    "matrix_markdown",
    "run_matrix",
]

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
    """One structured-output feature: what it adds to a request and how an answer passes.

    Attributes:
        name: the matrix's row name.
        fields: request fields added to the chat body.
        check: ``check(choice) -> why`` on the answer's first choice; ``""`` passes.
    """

    name: str
    fields: dict[str, Any]
    check: Callable[[dict[str, Any]], str]


def _content(choice: dict[str, Any]) -> str:
    message = choice.get("message")
    text = cast("dict[str, Any]", message).get("content") if isinstance(message, dict) else None
    return text if isinstance(text, str) else ""


def _json(choice: dict[str, Any]) -> tuple[Any, str]:
    try:
        return json.loads(_content(choice)), ""
    except ValueError as exc:
        return None, f"not JSON: {exc}"


def _check_object(choice: dict[str, Any]) -> str:
    value, why = _json(choice)
    return why or ("" if isinstance(value, dict) else "JSON but not an object")


def _check_schema(choice: dict[str, Any]) -> str:
    value, why = _json(choice)
    if why:
        return why
    try:
        jsonschema.validate(value, SCHEMA)
    except jsonschema.ValidationError as exc:
        return f"schema: {exc.message}"
    return ""


def _check_grammar(choice: dict[str, Any]) -> str:
    text = _content(choice)
    inner = text[1:-1]
    ok = text.startswith("{") and text.endswith("}") and "{" not in inner and "}" not in inner
    return "" if ok else f"outside the grammar: {text[:60]!r}"


def _calls(choice: dict[str, Any]) -> list[dict[str, Any]]:
    message = choice.get("message")
    raw = cast("dict[str, Any]", message).get("tool_calls") if isinstance(message, dict) else None
    return cast("list[dict[str, Any]]", raw) if isinstance(raw, list) else []


def _check_calls(choice: dict[str, Any], at_least: int) -> str:
    calls = _calls(choice)
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


def _check_logprobs(choice: dict[str, Any], tokens: int) -> str:
    raw = choice.get("logprobs")
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


@dataclass(frozen=True)
class Sample:
    """One answer of the matrix.

    Attributes:
        mode, feature, temperature, prompt: the cell and the prompt's index.
        verdict: ``pass``, ``fail``, ``cut`` (the budget ended it) or ``error`` (an HTTP
            error: the backend refused the request).
        why: what failed, or ``""``.
        calls: tool calls in the answer.
        drafted, accepted: llama-server's ``draft_n`` and ``draft_n_accepted``.
        text: the content, to compare with baseline's.
    """

    mode: str
    feature: str
    temperature: float
    prompt: int
    verdict: str
    why: str
    calls: int
    drafted: int
    accepted: int
    text: str


def judge(feature: Feature, answer: dict[str, Any]) -> tuple[str, str]:
    """``(verdict, why)`` of one chat answer for ``feature`` (see :class:`Sample`)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        return "error", str(answer.get("error", "no choices"))[:120]
    choice = cast("dict[str, Any]", choices[0])
    if feature.name == "logprobs":
        tokens = int(cast("dict[str, Any]", answer.get("usage") or {}).get("completion_tokens", 0))
        why = _check_logprobs(choice, tokens)
    else:
        if choice.get("finish_reason") == "length":
            return "cut", "the budget ended the answer"
        why = feature.check(choice)
    return ("fail" if why else "pass"), why


def _sample(
    mode: str, feature: Feature, temperature: float, i: int, answer: dict[str, Any]
) -> Sample:
    verdict, why = judge(feature, answer)
    timings = cast("dict[str, Any]", answer.get("timings") or {})
    choices = cast("list[dict[str, Any]]", answer.get("choices") or [{}])
    return Sample(
        mode=mode,
        feature=feature.name,
        temperature=temperature,
        prompt=i,
        verdict=verdict,
        why=why,
        calls=len(_calls(choices[0])),
        drafted=int(timings.get("draft_n", 0)),
        accepted=int(timings.get("draft_n_accepted", 0)),
        text=_content(choices[0]),
    )


def run_matrix(
    urls: dict[str, str],
    temperatures: tuple[float, ...] = (0.0, 0.8),
    max_tokens: int = 160,
    progress: Callable[[str, int], None] | None = None,
) -> list[Sample]:
    """Ask every feature of every mode's llama-server, each prompt once per temperature.

    Args:
        urls: mode name → that mode's llama-server base URL (baseline among them).
        temperatures: the sampling temperatures; above 0 the seed is the prompt's index.
        max_tokens: the budget of each answer (the documents take about 40 tokens).
        progress: called with a line and 1 after each answer.

    Returns:
        One :class:`Sample` per mode, feature, temperature and prompt.
    """
    out: list[Sample] = []
    with httpx.Client(timeout=600) as http:
        for feature in FEATURES:
            for temperature in temperatures:
                for i, prompt in enumerate(PROMPTS):
                    for mode, url in urls.items():
                        body: dict[str, Any] = {
                            "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens,
                            "temperature": temperature,
                            "seed": i,
                            **feature.fields,
                        }
                        answer = http.post(f"{url}/v1/chat/completions", json=body).json()
                        sample = _sample(mode, feature, temperature, i, answer)
                        out.append(sample)
                        if progress is not None:
                            progress(f"{feature.name} t={temperature} {mode}: {sample.verdict}", 1)
    return out


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: a mode, a feature, a temperature, and what its answers did.

    Attributes:
        state: ``holds``, ``fails``, ``untested`` or ``n/a`` (module docstring).
        passed, failed, cut, errors: answers by verdict.
        calls: tool calls made.
        drafted, accepted: draft tokens over the cell.
        same: answers identical to baseline's at the same prompt (informative: near-ties
            flip under speculation, a different answer is no fault).
        why: the first failure's reason.
    """

    mode: str
    feature: str
    temperature: float
    state: str
    passed: int
    failed: int
    cut: int
    errors: int
    calls: int
    drafted: int
    accepted: int
    same: int
    why: str


def cells(samples: list[Sample]) -> list[Cell]:
    """Fold samples into cells, with their state (module docstring)."""
    keys = sorted({(s.feature, s.temperature, s.mode) for s in samples}, key=_order)
    base = {(s.feature, s.temperature, s.prompt): s for s in samples if s.mode == "baseline"}
    out: list[Cell] = []
    for feature, temperature, mode in keys:
        group = [
            s for s in samples if (s.feature, s.temperature, s.mode) == (feature, temperature, mode)
        ]
        count = {v: sum(s.verdict == v for s in group) for v in ("pass", "fail", "cut", "error")}
        base_group = [b for (f, t, _), b in base.items() if (f, t) == (feature, temperature)]
        tools = feature.startswith("tools")
        baseline_calls = sum(b.calls for b in base_group)
        accepted = sum(s.accepted for s in group)
        if tools and baseline_calls == 0 and sum(s.calls for s in group) == 0:
            state = "n/a"
        elif count["fail"] or count["error"]:
            state = "fails"
        elif mode == "baseline":
            state = "holds" if count["pass"] else "untested"
        elif accepted == 0 or count["pass"] == 0:
            state = "untested"
        else:
            state = "holds"
        same = sum(
            1
            for s in group
            if (b := base.get((feature, temperature, s.prompt))) and b.text == s.text
        )
        why = next((s.why for s in group if s.verdict in ("fail", "error")), "")
        out.append(
            Cell(
                mode=mode,
                feature=feature,
                temperature=temperature,
                state=state,
                passed=count["pass"],
                failed=count["fail"],
                cut=count["cut"],
                errors=count["error"],
                calls=sum(s.calls for s in group),
                drafted=sum(s.drafted for s in group),
                accepted=accepted,
                same=same,
                why=why,
            )
        )
    return out


def _order(key: tuple[str, float, str]) -> tuple[int, float, int]:
    feature, temperature, mode = key
    names = [f.name for f in FEATURES]
    modes = ["baseline", "ngram-simple", "ngram-mod", "cascade", "draft"]
    return (
        names.index(feature) if feature in names else len(names),
        temperature,
        modes.index(mode) if mode in modes else len(modes),
    )


def matrix_markdown(table: list[Cell], title: str) -> str:
    """The matrix as a Markdown table, one row per cell, with a legend."""
    lines = [
        f"# {title}",
        "",
        "| feature | temp | mode | state | pass | fail | cut | error | calls | drafted | accepted "
        "| same as baseline | first failure |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in table:
        lines.append(
            f"| {c.feature} | {c.temperature:g} | {c.mode} | **{c.state}** | {c.passed} "
            f"| {c.failed} | {c.cut} | {c.errors} | {c.calls} | {c.drafted} | {c.accepted} "
            f"| {c.same} | {c.why.replace('|', '/')} |"
        )
    lines += [
        "",
        "holds: every judged answer passed and drafts were accepted; fails: an answer broke "
        "the feature (or the backend refused it); untested: no draft accepted or nothing "
        "judged; n/a: baseline does not do it either (no tool call at all). cut: the budget "
        "ended the answer (not judged). same as baseline: identical content at that prompt.",
    ]
    return "\n".join(lines) + "\n"
