"""The structured-output matrix: its judge and cells, and its plan run on the harness."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fronde.bench.blocks import run_plan
from fronde.bench.store import Store
from fronde.bench.structured import (
    FEATURES,
    SCHEMA,
    Sample,
    cells,
    judge,
    matrix_items,
    matrix_markdown,
    matrix_plan,
    matrix_samples,
)
from fronde.config import Settings

BY_NAME = {f.name: f for f in FEATURES}


def answer(
    content: str | None = None,
    finish: str = "stop",
    calls: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An answer's sample record in the store (what the harness's client keeps of it)."""
    record: dict[str, Any] = {"ok": True, "text": content or "", "finish": finish, "tokens": 2}
    return record | ({"tool_calls": calls} if calls is not None else {}) | extra


def test_json_schema_and_grammar_are_judged_on_the_content() -> None:
    person = {"name": "Ada", "born": 1815, "city": "Paris"}
    assert judge(BY_NAME["json_schema"], answer(json.dumps(person))) == ("pass", "")
    verdict, why = judge(BY_NAME["json_schema"], answer(json.dumps(person | {"born": "x"})))
    assert verdict == "fail" and why.startswith("schema:")
    assert judge(BY_NAME["json_object"], answer("[1]"))[0] == "fail"
    assert judge(BY_NAME["json_object"], answer('{"a": '))[0] == "fail"
    assert judge(BY_NAME["json_object"], answer('{"a": ', finish="length"))[0] == "cut"
    assert judge(BY_NAME["grammar"], answer('{"a": 1}')) == ("pass", "")
    assert judge(BY_NAME["grammar"], answer('{"a": {}}'))[0] == "fail"
    assert SCHEMA["required"] == ["name", "born", "city"]


def test_tool_calls_need_ids_known_names_and_object_arguments() -> None:
    fn = {"name": "save_person", "arguments": "{}"}
    good: dict[str, Any] = {"id": "c1", "type": "function", "function": fn}
    assert judge(BY_NAME["tools_required"], answer(calls=[good])) == ("pass", "")
    assert judge(BY_NAME["tools_required"], answer("text"))[1] == "no tool call"
    assert judge(BY_NAME["tools_auto"], answer("text")) == ("pass", "")
    no_id = [good | {"id": ""}]
    assert judge(BY_NAME["tools_named"], answer(calls=no_id))[1] == "a call without id"
    bad = [good | {"function": fn | {"arguments": "[]"}}]
    assert judge(BY_NAME["tools_named"], answer(calls=bad))[1] == "arguments are not an object"


def test_logprobs_need_one_whole_entry_per_token() -> None:
    entry: dict[str, Any] = {"token": "a", "logprob": -0.5, "top_logprobs": [{}, {}, {}]}
    whole = answer("ab", logprobs={"content": [entry, entry]})
    assert judge(BY_NAME["logprobs"], whole) == ("pass", "")
    short = answer("ab", logprobs={"content": [entry, entry | {"top_logprobs": []}]})
    assert judge(BY_NAME["logprobs"], short) == ("fail", "not 3 alternatives")
    assert judge(BY_NAME["logprobs"], answer("ab"))[0] == "fail"
    refused = {"ok": False, "error": "FrondeError: http://x/v1/chat answered 400: b'no'"}
    assert judge(BY_NAME["logprobs"], refused) == ("error", "400: b'no'")


def sample(
    mode: str, verdict: str, accepted: int = 3, calls: int = 0, feature: str = "grammar"
) -> Sample:
    return Sample(
        mode, feature, 0.0, 0, verdict, "" if verdict == "pass" else "bad", calls, 5, accepted, "t"
    )


def test_a_cell_holds_only_when_drafts_were_accepted_and_every_answer_passed() -> None:
    table = cells(
        [
            sample("baseline", "pass", 0),
            sample("ngram-simple", "pass"),
            sample("ngram-mod", "pass", accepted=0),
            sample("cascade", "fail"),
        ]
    )
    assert [(c.mode, c.state) for c in table] == [
        ("baseline", "holds"),
        ("ngram-simple", "holds"),
        ("ngram-mod", "untested"),
        ("cascade", "fails"),
    ]
    assert table[3].why == "bad" and table[1].same == 1


def test_tools_are_not_applicable_when_baseline_makes_no_call_either() -> None:
    table = cells(
        [
            sample("baseline", "fail", 0, feature="tools_required"),
            sample("ngram-mod", "fail", feature="tools_required"),
        ]
    )
    assert {c.state for c in table} == {"n/a"}
    page = matrix_markdown(table, "t")
    assert "| tools_required | 0 | ngram-mod | **n/a** |" in page


def test_each_item_asks_its_feature_at_its_temperature_with_its_seed() -> None:
    items = matrix_items()
    assert len(items) == len(FEATURES) * 2 * 4
    [item] = [i for i in items if i.id == "json_schema-t0.8-2"]
    body = item.body("chat", 160)
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.8, 2, 160)
    plan = matrix_plan(160)
    assert [(a.name, a.kind, a.force) for a in plan.arms] == [
        (str(m), "static", m) for m in ("baseline", "ngram-simple", "ngram-mod", "cascade")
    ]
    assert [lv.stream for lv in plan.levels] == [False]


@pytest.mark.anyio
async def test_the_matrix_runs_on_the_harness_and_reads_its_cells_off_the_records(
    tmp_path: Path, fake_gemma: Callable[[int], Settings]
) -> None:
    """Each mode's own llama-server, fresh, every answer whole in the store, then judged."""
    store = Store(tmp_path / "records.jsonl")
    await run_plan(matrix_plan(16), fake_gemma(2000), None, store, tmp_path / "logs", _quiet)
    blocks = [r for r in store.records() if r["type"] == "block"]
    assert [b["arm"] for b in blocks if b["ok"]] == [
        "baseline", "ngram-simple", "ngram-mod", "cascade"
    ]  # fmt: skip
    samples = matrix_samples(store.samples())
    assert len(samples) == 4 * len(matrix_items())
    table = {(c.feature, c.temperature, c.mode): c for c in cells(samples)}
    # The fake calls the tool when told to (no timings: nothing drafted, so untested
    # where a mode speculates), and cuts every other answer at the budget.
    required = table[("tools_required", 0.0, "baseline")]
    assert (required.state, required.passed, required.calls) == ("holds", 4, 4)
    assert table[("tools_required", 0.8, "ngram-mod")].state == "untested"
    assert table[("json_object", 0.0, "baseline")].cut == 4
    assert table[("grammar", 0.8, "cascade")].drafted > 0
    assert table[("grammar", 0.8, "baseline")].drafted == 0


def _quiet(line: str, n: int) -> None:
    """A progress callback that shows nothing."""
