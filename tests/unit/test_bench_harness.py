"""The verdict harness on data: workloads, the streaming client, the store, the schedule,
the verdict's arithmetic and the report, with no llama-server involved."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from rich.console import Console

from fronde.bench.arms import Arm
from fronde.bench.protocol import Plan, planned_requests, schedule
from fronde.bench.report import Report
from fronde.bench.store import SCHEMA, Store, machine_class, sessions
from fronde.bench.timed_client import repetition_score, send
from fronde.bench.verdict import Check, bootstrap, checks, geomean, table
from fronde.bench.workloads import Item, Workload, load_workload
from fronde.config import load_settings
from fronde.errors import FrondeError

# --- workloads -------------------------------------------------------------------------


def test_shipped_first_encounter_has_40_items_in_8_domains_after_first_4() -> None:
    w = load_workload("first-encounter").first(4)
    domains = {i.domain for i in w.items}
    assert len(w.items) >= 40 and len(domains) >= 8
    assert not w.sessions
    # first(4) keeps at most 4 per domain, and the first ones in file order.
    full = load_workload("first-encounter")
    for d in domains:
        kept = [i.id for i in w.items if i.domain == d]
        assert kept == [i.id for i in full.items if i.domain == d][:4]


def test_shipped_agent_sessions_are_3_sessions_of_8_steps() -> None:
    w = load_workload("agent-sessions")
    assert w.sessions
    steps: dict[str, int] = {}
    for i in w.items:
        steps[i.domain] = steps.get(i.domain, 0) + 1
    assert len(steps) >= 3 and all(n >= 8 for n in steps.values())
    # The file's system prompt leads every step's messages.
    assert all(i.messages[0]["role"] == "system" for i in w.items)
    # groups(1) keeps exactly the first session.
    first = w.groups(1)
    assert {i.domain for i in first.items} == {w.items[0].domain} and first.sessions


def test_priming_shares_no_prompt_with_the_workloads() -> None:
    priming = load_workload("priming")
    measured = [*load_workload("first-encounter").items, *load_workload("agent-sessions").items]
    assert priming.items
    prompts = {i.prompt for i in measured}
    contents = {m["content"] for i in measured for m in i.messages if m["role"] != "system"}
    for p in priming.items:
        assert p.prompt not in prompts, p.id
        assert not {m["content"] for m in p.messages} & contents, p.id


ITEM = Item(
    id="x",
    domain="d",
    prompt="def f():",
    messages=({"role": "user", "content": "Write f."},),
    stop=("\n```",),
    chat_stop=("END",),
)


def test_completion_body_sends_the_prompt_and_completion_stops() -> None:
    body = ITEM.body("completion", 64)
    assert body["prompt"] == "def f():" and "messages" not in body
    assert body["stop"] == ["\n```"]
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_chat_body_sends_messages_and_chat_stops() -> None:
    body = ITEM.body("chat", 64)
    assert body["messages"] == [{"role": "user", "content": "Write f."}]
    assert "prompt" not in body and body["stop"] == ["END"]
    assert body["temperature"] == 0.0 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_an_items_own_budget_wins_and_empty_stops_are_left_out() -> None:
    own = Item("y", "d", "p", ({"role": "user", "content": "c"},), max_tokens=700)
    assert own.body("completion", 64)["max_tokens"] == 700
    assert own.body("chat", 64)["max_tokens"] == 700
    assert "stop" not in own.body("completion", 64) and "stop" not in own.body("chat", 64)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"items": [{"id": "a", "domain": "d", "prompt": "p"}]}',  # no messages
        '{"sessions": [{"id": "s", "steps": [{"id": "a"}]}]}',  # a step without prompt
        "[1, 2]",
    ],
)
def test_a_bad_workload_file_is_an_error_naming_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(FrondeError, match=re.escape(str(path))):
        load_workload(str(path))


def test_a_missing_workload_and_repeated_ids_are_errors(tmp_path: Path) -> None:
    with pytest.raises(FrondeError, match=re.escape(str(tmp_path / "none.json"))):
        load_workload(str(tmp_path / "none.json"))
    item: dict[str, Any] = {"id": "a", "domain": "d", "prompt": "p", "messages": []}
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"items": [item, item]}))
    with pytest.raises(FrondeError, match="ids repeat"):
        load_workload(str(path))


# --- client ----------------------------------------------------------------------------


def sse(*events: object) -> bytes:
    out = b""
    for e in events:
        out += b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
    return out


def mock_http(
    body: bytes, status: int = 200, headers: dict[str, str] | None = None
) -> tuple[httpx.AsyncClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body, headers=headers or {})

    return httpx.AsyncClient(transport=httpx.MockTransport(handler)), seen


TIMINGS = {"predicted_n": 4, "predicted_per_second": 50.0, "draft_n": 8, "draft_n_accepted": 6}


@pytest.mark.anyio
async def test_send_completion_reads_text_tokens_alpha_and_route() -> None:
    body = sse(
        {"choices": [{"text": "Hello"}]},
        {"choices": [{"text": ", wor"}]},
        {"choices": [{"text": "ld", "finish_reason": "length"}]},
        {"choices": [], "timings": TIMINGS, "usage": {"completion_tokens": 5}},
        b"[DONE]",
    )
    route = {"x-fronde-mode": "ngram-mod", "x-fronde-class": "code", "server": "x"}
    http, seen = mock_http(body, headers=route)
    request = {"prompt": "p", "stream": True}
    async with http:
        s = await send(http, "http://arm", "completion", request, {"x-fronde-mode": "ngram-mod"})
    [req] = seen
    assert req.url.path == "/v1/completions"
    assert req.headers["x-fronde-mode"] == "ngram-mod"
    assert json.loads(req.content) == request
    rec = s.record()
    assert rec["text"] == "Hello, world"
    assert rec["sha256"] == hashlib.sha256(b"Hello, world").hexdigest()
    assert rec["tokens"] == 5  # usage wins over predicted_n
    assert rec["alpha"] == 6 / 8
    assert rec["finish"] == "length"
    assert rec["route"] == {"mode": "ngram-mod", "class": "code"}
    assert rec["repetition"] == 0.0
    assert rec["wall_s"] >= 0.0 and rec["ttft_s"] is not None


@pytest.mark.anyio
async def test_send_chat_reads_delta_content_and_falls_back_to_predicted_n() -> None:
    body = sse(
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "one "}}]},
        {"choices": [{"delta": {"content": "two"}, "finish_reason": "stop"}]},
        {"choices": [], "timings": TIMINGS},
        b"[DONE]",
    )
    http, seen = mock_http(body)
    async with http:
        s = await send(http, "http://arm", "chat", {"messages": [], "stream": True}, {})
    assert seen[0].url.path == "/v1/chat/completions"
    rec = s.record()
    assert rec["text"] == "one two"
    assert rec["tokens"] == TIMINGS["predicted_n"]
    assert rec["alpha"] == 0.75 and rec["finish"] == "stop"
    assert rec["route"] == {}


@pytest.mark.anyio
async def test_without_usage_or_timings_tokens_are_the_text_pieces() -> None:
    body = sse(*({"choices": [{"text": w}]} for w in ("a", " b", " c")), b"[DONE]")
    http, _ = mock_http(body)
    async with http:
        s = await send(http, "http://arm", "completion", {"stream": True}, {})
    rec = s.record()
    assert (rec["text"], rec["tokens"], rec["alpha"]) == ("a b c", 3, None)


@pytest.mark.anyio
async def test_a_stream_without_done_is_an_error() -> None:
    body = sse({"choices": [{"text": "cut"}]}, {"choices": [], "timings": TIMINGS})
    http, _ = mock_http(body)
    async with http:
        with pytest.raises(FrondeError, match=r"without \[DONE\]"):
            await send(http, "http://arm", "completion", {"stream": True}, {})


@pytest.mark.anyio
async def test_a_non_200_answer_is_an_error_with_its_status() -> None:
    http, _ = mock_http(b'{"error": {"message": "bad"}}', status=400)
    async with http:
        with pytest.raises(FrondeError, match="answered 400"):
            await send(http, "http://arm", "chat", {"stream": True}, {})


@pytest.mark.anyio
async def test_an_in_band_error_event_is_an_error() -> None:
    body = sse({"choices": [{"text": "a"}]}, {"error": {"message": "backend died"}}, b"[DONE]")
    http, _ = mock_http(body)
    async with http:
        with pytest.raises(FrondeError, match="backend died"):
            await send(http, "http://arm", "completion", {"stream": True}, {})


def test_repetition_score_flags_a_loop_and_not_distinct_words() -> None:
    assert repetition_score("the cat sat down " * 10) > 0.5
    assert repetition_score(" ".join(f"w{i}" for i in range(40))) == 0.0
    assert repetition_score("too short") == 0.0


# --- store -----------------------------------------------------------------------------


def test_store_round_trips_and_skips_a_torn_last_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "sub" / "records.jsonl")
    assert store.records() == []
    store.append({"type": "sample", "text": "ü→"})
    store.append({"type": "block", "block": "k", "block_id": "1", "ok": True})
    with store.path.open("a") as fh:
        fh.write(json.dumps({"schema": SCHEMA - 1, "type": "sample"}) + "\n")
        fh.write('{"schema": 2, "type": "sam')  # a run stopped mid-write
    recs = store.records()
    assert recs == [
        {"schema": SCHEMA, "type": "sample", "text": "ü→"},
        {"schema": SCHEMA, "type": "block", "block": "k", "block_id": "1", "ok": True},
    ]
    assert store.done_blocks() == {"k"}


def test_samples_come_only_from_the_last_ok_block_of_a_key(tmp_path: Path) -> None:
    store = Store(tmp_path / "records.jsonl")

    def block(key: str, block_id: str, ok: bool, *items: str) -> None:
        for i in items:
            store.append({"type": "sample", "block": key, "block_id": block_id, "item": i})
        store.append({"type": "block", "block": key, "block_id": block_id, "ok": ok})

    block("A|base|0", "failed", False, "f1", "f2")
    block("A|base|0", "first", True, "s1")
    block("A|base|0", "rerun", True, "r1", "r2")
    block("A|mod|0", "only", True, "m1")
    # A block cut short: samples with no block record.
    store.append({"type": "sample", "block": "A|mod|1", "block_id": "cut", "item": "c1"})
    assert [s["item"] for s in store.samples()] == ["r1", "r2", "m1"]
    assert store.done_blocks() == {"A|base|0", "A|mod|0"}


def test_begin_refuses_another_identity_and_accepts_the_same(tmp_path: Path) -> None:
    store = Store(tmp_path / "records.jsonl")
    identity = {"machine": "m1", "build": "b1", "profile": "p"}
    store.begin({"commit": "c1"}, identity)
    store.begin({"commit": "c2"}, dict(identity))
    with pytest.raises(FrondeError, match="another build"):
        store.begin({"commit": "c3"}, {**identity, "build": "b2"})
    runs = [r for r in store.records() if r["type"] == "run"]
    assert [r["commit"] for r in runs] == ["c1", "c2"]  # the refused run left no record
    assert runs[0]["identity"] == identity


def test_a_machine_is_its_class_not_its_kernels_build(tmp_path: Path) -> None:
    # Two leases of the H200 machine: the same hardware, another kernel build string.
    h200 = {
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpus": 16,
        "gpus": ["NVIDIA H200"],
        "system": "Linux-6.18.44-fc-v973-gpu-x86_64-with-glibc2.39",
        "python": "3.12.3",
    }
    later = {**h200, "system": "Linux-6.18.44-fc-v1147-gpu-x86_64-with-glibc2.39"}
    assert machine_class(h200) == machine_class(later)
    assert machine_class(h200) == {
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpus": 16,
        "gpus": ["NVIDIA H200"],
        "python": "3.12.3",
        "os": "Linux",
        "arch": "x86_64",
    }
    store = Store(tmp_path / "records.jsonl")
    store.begin({"commit": "c1"}, {"machine": h200, "slots": 32})
    store.begin({"commit": "c2"}, {"machine": later, "slots": 32})  # a second session
    for other in (
        {**h200, "gpus": ["NVIDIA A100"]},
        {**h200, "cpus": 8},
        {**h200, "system": "Darwin-24.1.0-arm64-arm-64bit"},
    ):
        with pytest.raises(FrondeError, match="another machine"):
            store.begin({"commit": "c3"}, {"machine": other, "slots": 32})
    with pytest.raises(FrondeError, match="another slots"):
        store.begin({"commit": "c3"}, {"machine": later, "slots": 16})


def test_blocks_fall_in_the_session_of_the_run_that_measured_them() -> None:
    def run(at: str, system: str = "fc-v1147", boot: str | None = None) -> dict[str, object]:
        rec: dict[str, object] = {"type": "run", "started_at": at, "machine": {"system": system}}
        return rec | ({"boot_id": boot} if boot else {})

    def block(b: str) -> dict[str, object]:
        return {"type": "block", "block_id": b, "ok": True}

    old = [
        run("2026-12-03T07:27:10Z"),
        block("a"),
        run("2026-12-03T07:50:00Z"),  # resumed 23 min later: the same lease
        block("b"),
        run("2026-12-03T13:02:20Z"),  # hours later: another lease, same kernel build
        block("c"),
        {"type": "sample", "block_id": "c"},
        run("2026-12-03T13:10:00Z", system="fc-v973"),  # another machine at once
        block("d"),
    ]
    assert sessions(old) == {
        "a": "2026-12-03 07:27",
        "b": "2026-12-03 07:27",
        "c": "2026-12-03 13:02",
        "d": "2026-12-03 13:10",
    }
    # With boot ids the boot decides, whatever the hours between.
    booted = [
        run("2026-12-03T07:27:10Z", boot="x"),
        block("a"),
        run("2026-12-03T19:00:00Z", boot="x"),
        block("b"),
        run("2026-12-03T19:05:00Z", boot="y"),
        block("c"),
    ]
    assert sessions(booted) == {
        "a": "2026-12-03 07:27",
        "b": "2026-12-03 07:27",
        "c": "2026-12-03 19:05",
    }


# --- protocol --------------------------------------------------------------------------


def _workload(name: str, n: int, sessions: bool = False) -> Workload:
    items = tuple(Item(f"{name}{k}", "d", "p", ()) for k in range(n))
    return Workload(name, items, sessions)


def _plan(reps: int, session_reps: int, session_arms: tuple[Arm, ...]) -> Plan:
    return Plan(
        workloads=(_workload("A", 3), _workload("B", 2, sessions=True)),
        arms=(Arm("a1", "static"), Arm("a2", "static"), Arm("a3", "static")),
        session_arms=session_arms,
        reps=reps,
        session_reps=session_reps,
        form="completion",
        max_tokens=16,
        priming=_workload("P", 1),
    )


def _blocks(plan: Plan) -> list[tuple[int, str, str]]:
    return [(rep, w.name, arm.name) for rep, w, arm in schedule(plan)]


SESSION_ARMS = (Arm("s1", "static"), Arm("s2", "static"))


def test_schedule_rotates_arms_and_runs_sessions_with_their_own_arms_and_reps() -> None:
    plan = _plan(3, 1, SESSION_ARMS)
    assert _blocks(plan) == [
        (0, "A", "a1"), (0, "A", "a2"), (0, "A", "a3"), (0, "B", "s1"), (0, "B", "s2"),
        (1, "A", "a2"), (1, "A", "a3"), (1, "A", "a1"),
        (2, "A", "a3"), (2, "A", "a1"), (2, "A", "a2"),
    ]  # fmt: skip
    assert planned_requests(plan) == 3 * 3 * 3 + 2 * 1 * 2


def test_schedule_with_more_session_reps_and_with_no_session_arms() -> None:
    plan = _plan(1, 2, SESSION_ARMS)
    assert _blocks(plan) == [
        (0, "A", "a1"), (0, "A", "a2"), (0, "A", "a3"), (0, "B", "s1"), (0, "B", "s2"),
        (1, "B", "s2"), (1, "B", "s1"),
    ]  # fmt: skip
    assert planned_requests(plan) == 3 * 3 + 2 * 2 * 2
    none = _plan(2, 2, ())
    assert {w for _, w, _ in _blocks(none)} == {"A"}
    assert planned_requests(none) == 2 * 3 * 3


# --- verdict ---------------------------------------------------------------------------

Rate = Callable[[str, str, int], float]


def sample(
    arm: str,
    item: str,
    rep: int,
    *,
    tokens: int = 60,
    wall_s: float = 1.0,
    domain: str = "d",
    workload: str = "first-encounter",
    repetition: float = 0.0,
    route: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "workload": workload,
        "arm": arm,
        "rep": rep,
        "item": item,
        "domain": domain,
        "ok": True,
        "tokens": tokens,
        "wall_s": wall_s,
        "repetition": repetition,
        "alpha": 0.5 if arm != "base" else None,
        "text": f"{item} text",
        "route": route or {},
    }


def failed(arm: str, item: str, rep: int, domain: str = "d") -> dict[str, Any]:
    """A failure as the protocol records it: no tokens, no text."""
    head = {"workload": "first-encounter", "arm": arm, "rep": rep}
    return {**head, "item": item, "domain": domain, "ok": False, "error": "FrondeError: x"}


def grid(
    arms: list[str],
    items: dict[str, str],
    reps: int,
    rate: Rate,
    workload: str = "first-encounter",
) -> list[dict[str, Any]]:
    """Every arm × item × rep, 60 tokens at ``rate(arm, item, rep)`` tok/s."""
    return [
        sample(
            a,
            i,
            r,
            wall_s=60 / rate(a, i, r),
            domain=d,
            workload=workload,
            route={"class": "code", "mode": "ngram-mod"} if a.startswith("router") else None,
        )
        for r in range(reps)
        for a in arms
        for i, d in items.items()
    ]


ARMS4 = ["base", "mod", "default", "router"]


def test_table_leaves_out_failed_missing_short_and_looping_items() -> None:
    items = {f"i{k}": "d" for k in range(1, 7)}
    samples = [
        s
        for s in grid(ARMS4, items, 2, lambda a, i, r: 10.0)
        if not (s["item"] == "i3" and s["arm"] == "router" and s["rep"] == 1)  # missing
    ]
    for s in samples:
        if (s["item"], s["arm"], s["rep"]) == ("i4", "mod", 0):
            s["tokens"] = 1
        if (s["item"], s["arm"], s["rep"]) == ("i5", "default", 1):
            s["repetition"] = 0.6
        if s["item"] == "i6":
            s["repetition"] = 0.5  # at the bound: not a loop
    samples = [s for s in samples if (s["item"], s["arm"], s["rep"]) != ("i2", "mod", 1)]
    samples.append(failed("mod", "i2", 1))
    # Another workload's samples of the same item ids do not mix in.
    samples += grid(["base"], {"i1": "d"}, 3, lambda a, i, r: 1.0, workload="other")
    t = table(samples, "first-encounter")
    assert sorted(t.invalid) == ["i2", "i3", "i4"]
    assert t.looping == {"i5": ["default"]}
    assert t.items == {"i1": "d", "i6": "d"}
    assert t.arms == ARMS4 and t.reps == [0, 1]


def test_speed_is_the_median_and_total_is_sum_tokens_over_sum_wall() -> None:
    samples = [
        sample("base", "a", 0, tokens=10, wall_s=1.0),
        sample("base", "a", 1, tokens=11, wall_s=1.0),
        sample("base", "a", 2, tokens=60, wall_s=2.0),
        sample("base", "b", 0, tokens=20, wall_s=4.0),
        sample("base", "b", 1, tokens=20, wall_s=4.0),
        sample("base", "b", 2, tokens=20, wall_s=4.0),
        # An invalid item counts in no total, whatever its speed.
        sample("base", "c", 0, tokens=1, wall_s=0.001),
        sample("base", "c", 1, tokens=900, wall_s=1.0),
        sample("base", "c", 2, tokens=900, wall_s=1.0),
    ]
    t = table(samples, "first-encounter")
    assert t.speed("base", "a") == 11.0  # median of 10, 11, 30 (mean would be 17)
    assert t.speed("base", "a", [0, 2]) == 20.0
    assert t.total("base") == pytest.approx((10 + 11 + 60 + 60) / (4.0 + 12.0))


def _named(cs: list[Check], prefix: str) -> Check:
    [c] = [c for c in cs if c.name.startswith(prefix)]
    return c


def test_checks_compare_the_router_with_the_best_static_arm_by_total_rate() -> None:
    # default is fastest in total (one long fast answer); mod is faster on 3 items of 4.
    items = {"i1": "d1", "i2": "d1", "i3": "d2", "i4": "d2"}
    samples: list[dict[str, Any]] = []
    for i in items:
        samples.append(sample("base", i, 0, tokens=10, wall_s=1.0, domain=items[i]))
        samples.append(sample("router", i, 0, tokens=10, wall_s=0.4, domain=items[i]))
        big = i == "i1"
        samples.append(
            sample("default", i, 0, tokens=100 if big else 10, wall_s=1.0, domain=items[i])
        )
        samples.append(sample("mod", i, 0, tokens=10, wall_s=0.2 if big else 0.5, domain=items[i]))
    t = table(samples, "first-encounter")
    assert t.total("default") > t.total("mod") and geomean(t.ratios("mod", "default")) > 1
    cs = checks(t, "router", "base", ["base", "mod"])
    total = _named(cs, "(a) router ÷ default, total")
    assert total.value == pytest.approx(25 / ((100 + 30) / 4.0))
    assert not total.passed
    mean = _named(cs, "(a) router ÷ default, geomean")
    assert mean.value == pytest.approx((0.25 * 2.5**3) ** 0.25)
    assert mean.low <= mean.value <= mean.high and mean.passed
    for d in ("d1", "d2"):
        b = _named(cs, f"(b) router ÷ base, {d}")
        assert (b.value, b.low, b.high) == pytest.approx((2.5, 2.5, 2.5)) and b.passed


def test_per_domain_check_passes_on_the_lower_end_not_the_point_estimate() -> None:
    # Domain "spread": router ÷ base = 2.0, 0.5, 1.2, geomean 1.2^(1/3) ≈ 1.06 ≥ 0.97;
    # 10 of 27 resamples have a geomean below 0.97, so the 2.5 % end is below the bound.
    ratios = {"s1": 2.0, "s2": 0.5, "s3": 1.2, "e1": 1.2, "e2": 1.2}
    items = {i: "spread" if i.startswith("s") else "even" for i in ratios}

    def rate(a: str, i: str, r: int) -> float:
        return {"router": 10.0 * ratios[i], "base": 10.0}.get(a, 9.0)

    t = table(grid(["base", "default", "router"], items, 1, rate), "first-encounter")
    cs = checks(t, "router", "base", ["base"])
    spread = _named(cs, "(b) router ÷ base, spread")
    assert spread.value == pytest.approx(1.2 ** (1 / 3))
    assert spread.value >= 0.97 > spread.low
    assert not spread.passed
    even = _named(cs, "(b) router ÷ base, even")
    assert even.low == pytest.approx(1.2) and even.passed
    # (a)'s geomean passes on its value even when its interval reaches below 1.
    a = _named(cs, "(a) router ÷ base, geomean")
    assert a.low < 1.0 <= a.value and a.passed


def test_oracle_check_needs_two_repetitions() -> None:
    t = table(grid(ARMS4, {"i1": "d", "i2": "d"}, 1, lambda a, i, r: 10.0), "first-encounter")
    c = _named(checks(t, "router", "base", ["base", "mod"]), "(c)")
    assert math.isnan(c.value) and not c.passed


def test_oracle_is_cross_fitted_on_the_other_repetition() -> None:
    # i1: base 10 then 20, mod 20 then 10, router 15 both times. Held out rep 0, the
    # pick on rep 1 is base (20 > 10): 15/10 = 1.5; held out rep 1, the pick on rep 0
    # is mod: 15/10 = 1.5. An in-sample oracle would score 15/20 = 0.75 twice.
    # i2: mod 30 always, router 24: 0.8 either way.
    rates = {
        ("base", "i1"): (10.0, 20.0),
        ("mod", "i1"): (20.0, 10.0),
        ("router", "i1"): (15.0, 15.0),
        ("base", "i2"): (10.0, 10.0),
        ("mod", "i2"): (30.0, 30.0),
        ("router", "i2"): (24.0, 24.0),
        ("default", "i1"): (12.0, 12.0),
        ("default", "i2"): (12.0, 12.0),
    }
    samples = grid(ARMS4, {"i1": "d", "i2": "d"}, 2, lambda a, i, r: rates[a, i][r])
    c = _named(checks(table(samples, "first-encounter"), "router", "base", ["base", "mod"]), "(c)")
    assert c.value == pytest.approx(math.sqrt(1.5 * 0.8))  # in-sample: sqrt(0.75 * 0.8)
    assert c.low <= c.value <= c.high and c.passed


def test_bootstrap_is_deterministic_and_brackets_the_geomean() -> None:
    groups = [[v] for v in (0.6, 0.9, 1.0, 1.1, 1.3, 1.7, 2.2)]
    low, high = bootstrap(groups)
    assert (low, high) == bootstrap(groups)
    assert low < geomean([g[0] for g in groups]) < high
    assert bootstrap([[1.5], [1.5], [1.5]]) == (1.5, 1.5)
    assert all(math.isnan(x) for x in bootstrap([[2.0]]))


# --- report ----------------------------------------------------------------------------

DOMAINS = list(dict.fromkeys(i.domain for i in load_workload("first-encounter").items))
REPORT_ARMS = ["base", "simple", "mod", "default", "cascade", "mod12", "router", "router-w"]


def report_samples(router_speedup: float) -> list[dict[str, Any]]:
    items = {f"{d}-{k}": d for d in DOMAINS for k in (1, 2, 3)}

    def rate(a: str, i: str, r: int) -> float:
        return (20.0 * router_speedup if a.startswith("router") else 20.0) + r

    samples = grid(REPORT_ARMS, items, 2, rate)
    for s in samples:
        if s["item"] == f"{DOMAINS[0]}-1" and s["arm"] == "cascade":
            s["repetition"] = 0.9
        if s["item"] == f"{DOMAINS[1]}-2" and s["arm"] == "mod12" and s["rep"] == 1:
            s["tokens"] = 1
    steps = {f"inventory-py-{k}": "inventory-py" for k in range(1, 9)}
    samples += grid(["default", "router"], steps, 1, rate, workload="agent-sessions")
    return samples


def rendered(report: Report) -> str:
    console = Console(record=True, width=80, file=io.StringIO())
    report.show(console)
    return console.export_text()


def test_report_says_fail_and_fits_80_columns() -> None:
    report = Report(report_samples(0.8), "first-encounter", "agent-sessions")
    text = rendered(report)
    assert report.verdict == "FAIL"
    assert "VERDICT: FAIL" in text and "VERDICT: PASS" not in text
    assert report.a.invalid == [f"{DOMAINS[1]}-2"]
    assert report.a.looping == {f"{DOMAINS[0]}-1": ["cascade"]}
    assert f"{DOMAINS[1]}-2" in text and f"{DOMAINS[0]}-1" in text
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert not too_wide


def test_report_says_pass_when_the_router_is_faster_everywhere() -> None:
    report = Report(report_samples(2.0), "first-encounter", "agent-sessions")
    assert report.verdict == "PASS"
    assert "VERDICT: PASS" in rendered(report)


def test_report_writes_the_summary_and_the_charts(tmp_path: Path) -> None:
    Report(report_samples(0.8), "first-encounter", "agent-sessions").write(tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "VERDICT: FAIL" in summary
    assert "- `router`: Fronde routing, cold" in summary
    for png in ("first-encounter.png", "agent-sessions.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_a_routed_arm_gives_no_verdict() -> None:
    samples = grid(["base", "default"], {"i1": "d", "i2": "d"}, 2, lambda a, i, r: 10.0)
    report = Report(samples, "first-encounter", "agent-sessions")
    text = rendered(report)
    assert report.verdict is None
    assert "no verdict" in text and "VERDICT" not in text


def test_report_without_a_base_arm_still_shows() -> None:
    items = {"i1": "d", "i2": "d"}
    samples = grid(["default", "router"], items, 2, lambda a, i, r: 10.0)
    report = Report(samples, "first-encounter", "agent-sessions")
    text = rendered(report)
    assert report.verdict is None  # no check can be made without base
    assert "no verdict: it needs a routed arm and the base arm" in text


# --- cli -------------------------------------------------------------------------------


def fronde(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fronde", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def test_bench_report_without_records_is_one_line(tmp_path: Path) -> None:
    r = fronde("bench", "report", str(tmp_path))
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"fronde: error: {tmp_path} holds no records.jsonl(.gz)")
    assert not (tmp_path / "summary.md").exists()
    r = fronde("bench", "report", str(tmp_path / "missing"))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"fronde: error: {tmp_path / 'missing'}: no such folder: name one "
        "`fronde bench verdict` or `bench load` wrote"
    )


def _finished_run(folder: Path) -> None:
    store = Store(folder / "records.jsonl")
    for s in report_samples(0.8):
        key = f"{s['workload']}|{s['arm']}|{s['rep']}"
        store.append({"type": "sample", "block": key, "block_id": key, **s})
    for key in {r["block"] for r in store.records()}:
        store.append({"type": "block", "block": key, "block_id": key, "ok": True})


def test_bench_report_of_a_failing_run_exits_2_and_writes_the_summary(tmp_path: Path) -> None:
    _finished_run(tmp_path)
    r = fronde("bench", "report", str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert "VERDICT: FAIL" in r.stdout
    assert (tmp_path / "summary.md").exists()


def test_a_domain_with_one_valid_item_is_shown_but_not_judged() -> None:
    items = {"i1": "d1", "i2": "d1", "i3": "d2"}
    samples = grid(
        ["base", "mod", "router"], items, 2, lambda a, i, r: 12.0 if a == "router" else 10.0
    )
    report = Report(samples, "first-encounter", "agent-sessions")
    text = rendered(report)
    d2 = next(c for c in report.checks if c.name.endswith("d2"))
    assert not d2.measured and not d2.passed
    # The router is 1.2× every arm everywhere: every measured check passes, d2 is n/a.
    assert report.verdict == "PASS"
    assert "n/a: 1 domain check(s) with fewer than 2 valid items" in text


def test_routing_decisions_name_the_mode_that_finished_a_probe() -> None:
    """The header names the probed mode (sent before the probe ends); the report, the winner."""
    samples = report_samples(0.8)
    routed = [s for s in samples if s["arm"] == "router" and s["workload"] == "first-encounter"]
    lost, won = routed[0], routed[1]
    for s in (lost, won):
        s["route"] = {"class": "probe", "mode": "ngram-mod"}
    lost["fronde"] = {"class": "probe", "probed": "ngram-mod", "mode": "baseline"}
    won["fronde"] = {"class": "probe", "probed": "ngram-mod", "mode": "ngram-mod"}
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(Report(samples, "first-encounter", "agent-sessions").routes_table())
    text = console.export_text()
    assert "probe→baseline (ngram-mod lost): 1" in text
    assert "probe→ngram-mod: 1" in text


def test_bench_report_reads_the_newest_run_that_reproduce_wrote(tmp_path: Path) -> None:
    """reproduce.sh writes runs/verdict-<profile>-<time>/: with no folder, report the newest."""
    old, new = tmp_path / "runs" / "verdict-a-1", tmp_path / "runs" / "verdict-a-2"
    _finished_run(old)
    _finished_run(new)
    os.utime(old / "records.jsonl", (1, 1))
    r = fronde("bench", "report", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "VERDICT: FAIL" in r.stdout
    assert (new / "summary.md").exists() and not (old / "summary.md").exists()
    # Nothing to report: one line that says what to run.
    r = fronde("bench", "report", cwd=tmp_path / "runs")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fronde: error: no runs/verdict*/ folder here: run ./reproduce.sh, or name a folder"
    ]


def test_drift_between_repetitions_is_measured_and_marked() -> None:
    """An A/A check: the same arm twice on the same prompts; one slow block shows."""
    items = {"a": "d", "b": "d", "c": "d"}

    def rate(a: str, i: str, r: int) -> float:
        return 10.0 if (a == "base" and r == 0) else 20.0

    samples = grid(ARMS4, items, 2, rate)
    t = table(samples, "first-encounter")
    assert t.drift("base") == pytest.approx(2.0)
    assert t.drift("mod") == pytest.approx(1.0)
    assert table(grid(ARMS4, items, 1, rate), "first-encounter").drift("base") == 1.0
    text = rendered(Report(samples, "first-encounter", "agent-sessions"))
    assert "base 2.00!" in text and "mod 1.00," in text and "suspect" in text


def test_best_static_is_also_cross_fitted_on_the_other_repetition() -> None:
    # default is fast in rep 0 and slow in rep 1, mod the other way round; the router
    # runs at 20 both times. In-sample, the best static arm totals 25 (either): 0.8.
    # Cross-fitted, each held-out repetition is scored against the arm that won the
    # other one, which there runs at 10: 2.0 both times.
    rates = {"base": (10.0, 10.0), "mod": (10.0, 40.0), "default": (40.0, 10.0)}

    def rate(a: str, i: str, r: int) -> float:
        return 20.0 if a == "router" else rates[a][r]

    t = table(grid(ARMS4, {"i1": "d", "i2": "d"}, 2, rate), "first-encounter")
    cs = checks(t, "router", "base", ["base", "mod"])
    c = _named(cs, "(a) router ÷ best static, cross-fitted")
    assert c.value == pytest.approx(2.0) and c.passed
    assert c.name.endswith("(mod/default)")  # held out rep 0: mod won rep 1, and so on
    one = table(grid(ARMS4, {"i1": "d"}, 1, rate), "first-encounter")
    assert not [x for x in checks(one, "router", "base", ["base"]) if "cross-fitted" in x.name]


def test_every_report_table_fits_the_width_with_no_cell_cut_to_an_ellipsis() -> None:
    """rich cut what did not fit to "…" (domains read ``code-gener…`` at 60 columns,
    mode names ``ngra…``); every cell now folds onto the next line instead."""
    samples = report_samples(0.8)
    for s in samples:  # the longest words a report holds
        if s["arm"] == "router":
            s["route"] = {"class": "predicted", "mode": "ngram-simple"}
    report = Report(samples, "first-encounter", "agent-sessions")
    for width in (80, 60):
        console = Console(record=True, width=width, file=io.StringIO())
        report.show(console)
        text = console.export_text()
        assert "…" not in text, width
        assert max(len(line) for line in text.splitlines()) <= width
        assert "multilingual" in text and "predicted→ngram-simple" in text.replace("\n", "")


def _answer(samples: list[dict[str, Any]]) -> list[str]:
    from fronde.bench.answer import answer_lines
    from fronde.bench.arms import ARMS

    report = Report(samples, "first-encounter", "agent-sessions")
    return answer_lines(report.a, report.b, report.checks, {a.name: a.about for a in ARMS})


def test_the_answer_in_words_comes_last_and_names_the_best_fixed_arm() -> None:
    items = {"i1": "code", "i2": "code", "i3": "math", "i4": "math"}
    speed = {"base": 10.0, "cascade": 12.0, "router": 11.0}
    samples = grid(list(speed), items, 2, lambda a, i, r: speed[a])
    steps = {f"s{k}": "session" for k in range(4)}
    samples += grid(["cascade", "router"], steps, 1, lambda a, i, r: speed[a], "agent-sessions")
    lines = _answer(samples)
    assert lines == [
        "Is Fronde faster than one llama-server? (A: 4 prompts × 2 reps; B: 4 steps)",
        "  the best fixed arm: cascade = llama-server --spec-type ngram-simple,ngram-mod",
        "  routing, cold: 0.92× cascade in total, 0.92× per prompt [0.92–0.92]",
        "  per domain ≥ 0.97× plain decoding: cold 2 of 2",
        "  per prompt ÷ the best of Fronde's own modes: cold 1.10×",
        "  agent sessions: routing 90.9 ms/token, 1.09× cascade's time a token (fastest "
        "other arm; below 1 is faster)",
        "VERDICT: FAIL: not faster than cascade (cold)",
    ]
    # Printed after every table, the agent sessions' table included.
    text = rendered(Report(samples, "first-encounter", "agent-sessions"))
    assert text.index("B, agent sessions") < text.index("Is Fronde faster") < text.index("VERDICT")
    assert text.rstrip().endswith("VERDICT: FAIL: not faster than cascade (cold)")


def test_the_answer_names_what_failed_per_routed_arm_and_what_passed() -> None:
    items = {"i1": "code", "i2": "code", "i3": "math", "i4": "math"}

    def rate(a: str, i: str, r: int) -> float:
        slow_math = a == "router-w" and i in ("i3", "i4")
        return 6.0 if slow_math else 12.0 if a.startswith("router") else 10.0

    lines = _answer(grid(["base", "mod", "router", "router-w"], items, 2, rate))
    assert lines[-1] == (
        "VERDICT: FAIL: not faster than base (warm); below 0.97× plain decoding in 1 domain"
        " (warm); below 0.95× the best of its own modes (warm)"
    )
    assert "  per domain ≥ 0.97× plain decoding: cold 2 of 2, warm 1 of 2" in lines
    # One repetition: no oracle, which the verdict cannot pass.
    lines = _answer(grid(["base", "router"], items, 1, lambda a, i, r: 12.0))
    assert lines[-1] == "VERDICT: FAIL: no oracle figure (it needs 2 repetitions) (cold)"
    lines = _answer(grid(["base", "router"], items, 2, lambda a, i, r: 12.0))
    assert lines[-1].startswith("VERDICT: PASS: routing is at least as fast as base")
    assert _answer(grid(["base", "default"], items, 2, lambda a, i, r: 12.0)) == [
        "no verdict: it needs a routed arm and the base arm"
    ]


def test_verdict_writes_where_reproduce_sh_did_and_bench_report_looks() -> None:
    from fronde.bench.commands_verdict import verdict_folder

    folder = verdict_folder("cpu-gemma-270m", now=0.0)
    assert folder == Path("runs/verdict-cpu-gemma-270m-19700101T000000Z")
    assert folder.match("runs/verdict*")  # what `fronde bench report` reads by default
    local = verdict_folder("local:my model", now=0.0)
    assert local.name == "verdict-local-my-model-19700101T000000Z"
    reproduce = (Path(__file__).resolve().parents[2] / "reproduce.sh").read_text()
    assert "--out" not in reproduce.split("set -euo pipefail")[1]  # one default, the verdict's


def test_a_verdict_saves_a_floor_only_from_two_fronde_modes_or_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from fronde import serving
    from fronde.bench.commands_verdict import save_verdict_floor
    from fronde.serving import FLOORS_FILE

    def key(_settings: object) -> str:
        return "build|model|2cpu"

    monkeypatch.setattr(serving, "calibration_key", key)
    settings = load_settings().model_copy(update={"cache_dir": tmp_path})
    items = {f"i{k}": "d" for k in range(1, 5)}
    rates = {"base": 50.0, "mod": 60.0, "default": 70.0}

    def saved(arms: list[str]) -> str:
        samples = grid(arms, items, 2, lambda a, i, r: rates[a])
        store = cast(Store, SimpleNamespace(samples=lambda: samples))
        console = Console(record=True, width=100)
        save_verdict_floor(settings, store, tmp_path, console)
        return console.export_text()

    # base is the only Fronde mode: nothing compared, nothing saved (default is static)
    assert "one Fronde mode measured" in saved(["base", "default"])
    assert not (tmp_path / FLOORS_FILE).exists()
    assert "ngram-mod is the fastest" in saved(["base", "mod", "default"])
    assert (tmp_path / FLOORS_FILE).exists()
    assert "none measured" in saved(["base", "mod"])  # the grid's samples carry no timings
