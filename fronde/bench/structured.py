"""Does speculation keep structured output valid? The matrix mode × feature × temperature.

Fronde sends requests with a grammar, a schema, ``response_format``, ``tools`` or
``logprobs`` to baseline unless speculation is shown to keep them whole. In b11434 the
verify step samples through the slot's sampler, grammar included
(``tools/server/server-context.cpp``); this measures it. Each feature is asked of every
mode's llama-server directly (:func:`matrix_plan`, fresh servers, whole answers) at
temperature 0 and above with a fixed seed, on prompts that make the model copy a JSON
document, so that the n-gram drafters draft. Each answer is checked (:data:`FEATURES`,
:func:`judge`): JSON parses (and validates), the grammar matches, tool calls have an id,
a known name and object arguments, logprobs have one finite entry per token with 3
alternatives. An answer the budget cut is counted apart (``cut``). A cell
**holds** when every judged answer passes and a drafted token was accepted; it is
``untested`` when none was or nothing was judged, ``n/a`` when baseline does not do the
feature either (no tool call at all), and it **fails** otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jsonschema

from fronde.bench.arms import Arm
from fronde.bench.protocol import Level, Plan
from fronde.bench.tables import Grid
from fronde.bench.workloads import Item, Workload
from fronde.modes import Mode

__all__ = [
    "FEATURES", "MODES", "PROMPTS", "SCHEMA", "TOOLS", "Cell", "Feature", "Sample", "cells",
    "content_of", "judge", "matrix_markdown", "matrix_plan", "matrix_samples", "tool_calls",
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


MODES = (Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE)
"""The modes asked, each its own llama-server (an arm named after it)."""

TEMPERATURES = (0.0, 0.8)
"""The sampling temperatures; above 0 the seed is the prompt's index."""


@dataclass(frozen=True)
class Sample:
    """One answer of the matrix: its cell, the prompt's index, and what it did.

    ``verdict``: ``pass``, ``fail``, ``cut`` (the budget ended it) or ``error`` (the
    backend refused the request), ``why`` what failed; ``drafted`` and ``accepted`` are
    llama-server's ``draft_n`` and ``draft_n_accepted``.
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


def matrix_items() -> tuple[Item, ...]:
    """Every feature × temperature × prompt as chat items (domain: the feature; seed: i)."""
    return tuple(
        Item(
            f"{feature.name}-t{t:g}-{i}",
            feature.name,
            prompt,
            ({"role": "user", "content": prompt},),
            fields={"temperature": t, "seed": i, **feature.fields},
        )
        for feature in FEATURES
        for t in TEMPERATURES
        for i, prompt in enumerate(PROMPTS)
    )


def matrix_plan(max_tokens: int = 160) -> Plan:
    """Every item to each mode's llama-server alone, one at a time, each answer whole."""
    arms = [Arm(str(m), "static", force=m, about=f"llama-server as {m}") for m in MODES]
    workload = Workload("structured", matrix_items())
    return Plan.single(workload, arms, 1, "chat", max_tokens, (Level(stream=False),))


def matrix_samples(records: Sequence[dict[str, Any]]) -> list[Sample]:
    """The matrix's answers, judged, from the store's sample records of :func:`matrix_plan`."""
    keys = {
        i.id: (i.domain, float(i.fields["temperature"]), int(i.fields["seed"]))
        for i in matrix_items()
    }
    by_name = {f.name: f for f in FEATURES}
    out: list[Sample] = []
    for rec in records:
        feature, temperature, prompt = keys[rec["item"]]
        verdict, why = judge(by_name[feature], rec)
        timings = cast("dict[str, Any]", rec.get("timings") or {})
        out.append(
            Sample(
                mode=rec["arm"],
                feature=feature,
                temperature=temperature,
                prompt=prompt,
                verdict=verdict,
                why=why,
                calls=len(tool_calls(rec)),
                drafted=int(timings.get("draft_n", 0)),
                accepted=int(timings.get("draft_n_accepted", 0)),
                text=str(rec.get("text") or ""),
            )
        )
    return out


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: a mode, a feature, a temperature, and what its answers did.

    ``state``: ``holds``, ``fails``, ``untested`` or ``n/a`` (module docstring); ``same``:
    answers identical to baseline's (near-ties flip under speculation: no fault);
    ``why``: the first failure's reason.
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
    """The matrix as a Markdown page (:class:`~fronde.bench.tables.Grid`), a cell a row."""
    columns = ("feature", "temp", "mode", "state", "pass", "fail", "cut", "error", "calls")
    columns += ("drafted", "accepted", "same as baseline", "first failure")
    grid = Grid(title, columns, notes=[LEGEND])
    for c in table:
        counts = (c.passed, c.failed, c.cut, c.errors, c.calls, c.drafted, c.accepted, c.same)
        head = (c.feature, f"{c.temperature:g}", c.mode, f"**{c.state}**")
        grid.rows.append((*head, *map(str, counts), c.why.replace("|", "/")))
    return grid.markdown()


LEGEND = (
    "holds: every judged answer passed and drafts were accepted; fails: an answer broke "
    "the feature (or the backend refused it); untested: no draft accepted or nothing "
    "judged; n/a: baseline does not do it either (no tool call at all). cut: the budget "
    "ended the answer (not judged). same as baseline: identical content at that prompt."
)
"""The page's legend, under the table."""
