"""The structured-output matrix's judge and cells, on answers written by hand."""

from __future__ import annotations

import json
from typing import Any

from fronde.bench.structured import Sample, cells, matrix_markdown
from fronde.bench.structured_features import FEATURES, SCHEMA, judge

BY_NAME = {f.name: f for f in FEATURES}


def answer(
    content: str | None = None,
    finish: str = "stop",
    calls: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    choice: dict[str, Any] = {"message": message, "finish_reason": finish, **extra}
    return {"choices": [choice], "usage": {"completion_tokens": 2}}


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
    assert judge(BY_NAME["logprobs"], {"error": {"message": "no"}})[0] == "error"


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
