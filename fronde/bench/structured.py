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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx

from fronde.bench.structured_features import (
    FEATURES,
    PROMPTS,
    Feature,
    content_of,
    judge,
    tool_calls,
)

__all__ = ["Cell", "Sample", "cells", "matrix_markdown", "run_matrix"]


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
        calls=len(tool_calls(choices[0])),
        drafted=int(timings.get("draft_n", 0)),
        accepted=int(timings.get("draft_n_accepted", 0)),
        text=content_of(choices[0]),
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
