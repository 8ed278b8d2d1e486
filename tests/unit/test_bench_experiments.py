"""Experiments on the harness (load, overhead, swap) over fake llama-servers."""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from fronde.bench import arms as arms_module
from fronde.bench.arms import Arm, arms_named, started
from fronde.bench.blocks import run_plan
from fronde.bench.experiments import latency_table, overhead_plan, swap_plan
from fronde.bench.protocol import Level, Plan
from fronde.bench.serve import RunningServe
from fronde.bench.store import Store
from fronde.bench.timed_client import send
from fronde.bench.workloads import Item, Workload
from fronde.config import Settings, load_settings


@pytest.fixture
def fake_settings(fake_gemma: Callable[[int], Settings]) -> Settings:
    return fake_gemma(400)


def _quiet(line: str, n: int) -> None:
    """A progress callback that shows nothing."""


def _items(n: int) -> tuple[Item, ...]:
    return tuple(Item(f"i{k}", "d", f"Prompt {k}.", ()) for k in range(n))


@pytest.mark.anyio
async def test_each_level_is_a_block_on_fresh_servers_with_its_concurrency(
    tmp_path: Path, fake_settings: Settings
) -> None:
    plan = Plan(
        workloads=(Workload("w", _items(8)),),
        arms=(Arm("direct", "static"),),
        session_arms=(),
        reps=1,
        session_reps=0,
        form="completion",
        max_tokens=20,
        priming=Workload("none", ()),
        levels=(Level(), Level(concurrency=4, stream=False)),
    )
    store = Store(tmp_path / "records.jsonl")
    await run_plan(plan, fake_settings, None, store, tmp_path / "logs", _quiet)
    samples = store.samples()
    assert Counter(s["level"] for s in samples) == {"": 8, "c4-plain": 8}
    assert all(s["ok"] and s["tokens"] == 20 for s in samples)
    # One block per level, each on servers of its own (a level must not find the
    # prompts of another in the prompt cache or ngram-mod's pool).
    blocks = [r for r in store.records() if r["type"] == "block"]
    assert [b["block"] for b in blocks] == ["w|direct|0", "w|direct|0|c4-plain"]
    assert all(b["ok"] for b in blocks)
    started_logs = sorted(p.parent.name for p in (tmp_path / "logs").glob("*/direct.log"))
    assert started_logs == ["w-direct-0", "w-direct-0-c4-plain"]

    def overlapping(level: str) -> int:
        rows = sorted((s["t0"], s["t0"] + s["wall_s"]) for s in samples if s["level"] == level)
        return sum(b[0] < a[1] for a, b in pairwise(rows))

    # One at a time: no request starts before the previous ended; four at once overlap.
    assert overlapping("") == 0 and overlapping("c4-plain") >= 3
    # Not streamed: the first text arrives with the answer.
    plain = [s for s in samples if s["level"] == "c4-plain"]
    assert all(s["ttft_s"] == pytest.approx(s["wall_s"], abs=0.01) for s in plain)

    console = Console(record=True, width=80, file=io.StringIO())
    console.print(latency_table(samples, "t"))
    text = console.export_text()
    assert "c4-plain" in text and "c1-stream" in text
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text


@pytest.mark.anyio
async def test_a_fronde_arm_gets_its_env_and_the_bench_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[tuple[str, ...], dict[str, str] | None]] = []

    @contextmanager
    def fake_serve(
        config_file: Path | None,
        timeout_s: float = 0,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> Generator[RunningServe]:
        seen.append((extra_args, env))
        yield RunningServe("http://fake", {}, Path("/dev/null"))

    monkeypatch.setattr(arms_module, "running_serve", fake_serve)
    before = dict(os.environ)
    settings = load_settings()
    arm = Arm("spread", "fronde", env=(("FRONDE_ROUTER__LOAD_RULE", "spread"),))
    async with started(arm, settings, None, tmp_path) as target:
        assert target.base_url == "http://fake" and target.headers == {}
    profile = ("--profile", settings.profile)
    assert seen == [(profile, {"FRONDE_ROUTER__LOAD_RULE": "spread"})]
    assert dict(os.environ) == before


def test_the_verdicts_router_nh_arm_is_routing_with_hindsight_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [arm] = arms_named(["router-nh"], draft=False)
    assert arm.routed and arm.name not in [a.name for a in arms_named([], draft=False)]
    for name, value in arm.env:
        monkeypatch.setenv(name, value)
    assert load_settings().router.hindsight is False


def test_the_swap_workload_names_each_mode_equally_in_a_seeded_order() -> None:
    plan = swap_plan(requests=24, max_tokens=8, gap_s=0.25, reps=2, max_epoch_s=30)
    [w] = plan.workloads
    models = [str(i.model) for i in w.items]
    assert Counter(models) == {
        "fronde:baseline": 8,
        "fronde:ngram-simple": 8,
        "fronde:ngram-mod": 8,
    }
    assert models == [str(i.model) for i in swap_plan(24, 8, 0.25, 2, 30).workloads[0].items]
    assert models != sorted(models)  # interleaved, as from several agents
    body = w.items[0].body("completion", 8)
    assert body["model"] == models[0]
    # Open loop: every request may be in flight, one arriving every gap_s.
    assert plan.levels == (Level(concurrency=24, gap_s=0.25, stream=False),)
    assert [dict(a.env)["FRONDE_SWAP__POLICY"] for a in plan.arms] == ["fifo", "epoch"]


def test_the_overhead_plan_points_fronde_at_the_fake_and_opens_the_gate() -> None:
    plan = overhead_plan("/x/fake", requests=10, max_tokens=4, reps=1, litellm=False)
    names = [a.name for a in plan.arms]
    assert names == ["direct", "fronde"]
    env = dict(plan.arms[1].env)
    assert env["FRONDE_LLAMA_SERVER"] == "/x/fake"
    assert env["FRONDE_ROUTER__MAX_PARALLEL_DECODES"] == "1024"
    assert {(lv.concurrency, lv.stream) for lv in plan.levels} == {
        (c, s) for c in (1, 8, 32, 128) for s in (False, True)
    }
    real = overhead_plan(None, requests=10, max_tokens=64, reps=1, litellm=True)
    assert [a.name for a in real.arms] == ["direct", "fronde", "litellm"]
    assert {lv.concurrency for lv in real.levels} == {1}


@pytest.mark.anyio
async def test_a_non_streamed_answer_is_read_whole() -> None:
    answer = {
        "choices": [{"index": 0, "message": {"content": "Hello\nthere"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 3},
        "timings": {"predicted_n": 3, "predicted_per_second": 50.0, "draft_n": 4},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer, headers={"x-fronde-mode": "baseline"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        body: dict[str, Any] = {"messages": [], "stream": False}
        s = await send(http, "http://x", "chat", body, {})
    assert s.text == "Hello\nthere" and s.tokens == 3 and s.finish == "stop"
    assert s.alpha == 0.0 and s.mode == "baseline"
    assert s.first == s.last == s.end


@pytest.mark.anyio
async def test_llama_servers_own_stream_gives_token_ids_and_ends_without_done() -> None:
    events: list[dict[str, Any]] = [
        {"content": "Hel", "tokens": [9, 10], "stop": False},
        {"content": "lo", "tokens": [11], "stop": False},
        {"content": "", "tokens": [], "stop": True, "timings": {
            "predicted_n": 3, "predicted_per_second": 30.0, "draft_n": 2, "draft_n_accepted": 1,
        }},
    ]  # fmt: skip
    payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/completion"
        assert json.loads(request.content)["return_tokens"] is True
        return httpx.Response(200, content=payload, headers={"content-type": "text/event-stream"})

    body = Item("i", "d", "Say hello.", ()).body("native", 3)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        s = await send(http, "http://x", "native", body, {})
    assert (s.text, s.ids, s.tokens, s.alpha) == ("Hello", [9, 10, 11], 3, 0.5)
    assert s.record()["ids"] == [9, 10, 11]


@pytest.mark.anyio
async def test_a_run_says_what_it_starts_before_its_first_request(
    tmp_path: Path, fake_settings: Settings
) -> None:
    """The minutes spent starting every arm of an interleaved repetition show as such."""
    plan = Plan(
        workloads=(Workload("w", _items(3)),),
        arms=(Arm("a", "static", about="plain"), Arm("b", "static")),
        session_arms=(),
        reps=1,
        session_reps=0,
        form="completion",
        max_tokens=8,
        priming=Workload("none", ()),
        interleave=True,
    )
    events: list[str] = []

    def progress(line: str, n: int) -> None:
        events.append(f"{n} {line}".strip())

    store = Store(tmp_path / "records.jsonl")
    await run_plan(plan, fake_settings, None, store, tmp_path / "logs", progress, events.append)
    assert events[:3] == [
        "w, rep 1 of 1: starting arm 1 of 2, a (plain)",
        "w, rep 1 of 1: starting arm 2 of 2, b",
        "w, rep 1 of 1: 3 prompts, each sent to the 2 arms in turn",
    ]
    assert events[3:9] == ["1"] * 6
    # Block by block: each arm's start, then its requests.
    events.clear()
    store = Store(tmp_path / "blocks.jsonl")
    await run_plan(
        replace(plan, interleave=False), fake_settings, None, store, tmp_path / "l2", progress,
        events.append,
    )  # fmt: skip
    assert events[:2] == ["w, rep 1 of 1: starting a (plain)", "w, rep 1 of 1: a, 3 requests"]
    assert events[2:5] == ["1"] * 3


@pytest.mark.anyio
async def test_a_plan_runs_one_repetition_when_asked_and_the_rest_later(
    tmp_path: Path, fake_settings: Settings
) -> None:
    plan = Plan.single(
        Workload("w", _items(2)),
        (Arm("a", "static"), Arm("b", "static")),
        2,
        "completion",
        8,
    )
    store = Store(tmp_path / "records.jsonl")
    await run_plan(plan, fake_settings, None, store, tmp_path / "logs", _quiet, rep=1)
    await run_plan(plan, fake_settings, None, store, tmp_path / "logs", _quiet, rep=0)
    # All of it again: every block is done, none runs twice.
    await run_plan(plan, fake_settings, None, store, tmp_path / "logs", _quiet)
    blocks = [r["block"] for r in store.records() if r["type"] == "block"]
    assert blocks == ["w|b|1", "w|a|1", "w|a|0", "w|b|0"]
