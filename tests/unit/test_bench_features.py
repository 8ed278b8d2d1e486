"""`bench prediction` and `bench tools` run on the harness: plans, records, then their pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fronde.bench import arms as arms_module
from fronde.bench.arms import Arm, started
from fronde.bench.blocks import run_plan
from fronde.bench.prediction import EDITS, prediction_grid, prediction_plans, prediction_samples
from fronde.bench.serve import RunningServe
from fronde.bench.store import Store
from fronde.bench.tooluse import AGENT_TOOLS, tool_grid, tool_steps, tools_plan
from fronde.config import Settings

Seen = list[dict[str, str] | None]


def _quiet(line: str, n: int) -> None:
    """A progress callback that shows nothing."""


def _serve_at(url: str, seen: Seen) -> Callable[..., Any]:
    """A stand-in for `fronde serve`: every Fronde arm is the server at ``url``."""

    @contextmanager
    def serve(
        config_file: Path | None,
        timeout_s: float = 0,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> Generator[RunningServe]:
        seen.append(env)
        yield RunningServe(url, {}, Path("/dev/null"))

    return serve


def _bodies(path: Path) -> list[dict[str, Any]]:
    """The chat bodies the fake received, warm-ups left out."""
    posts = [json.loads(line) for line in path.read_text().splitlines()]
    chats = [p["body"] for p in posts if p["path"] == "/v1/chat/completions"]
    return [b for b in chats if b["max_tokens"] != 4]


@pytest.fixture
def recording(fake_gemma: Callable[[int], Settings], tmp_path: Path) -> tuple[Settings, Path]:
    """Settings whose fake llama-server answers at 1,000 tok/s and records every body."""
    settings = fake_gemma(1000)
    record = tmp_path / "bodies.jsonl"
    extra = [*settings.backend.extra_args, "--fake-record", str(record)]
    backend = settings.backend.model_copy(update={"extra_args": extra})
    return settings.model_copy(update={"backend": backend}), record


@pytest.mark.anyio
async def test_prediction_runs_each_scenario_without_then_with_on_the_harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recording: tuple[Settings, Path]
) -> None:
    settings, record = recording
    plans = prediction_plans(16)
    assert [(p.workloads[0].name, p.arms[0].name) for p in plans] == [
        ("file-in-prompt", "without"),
        ("file-in-prompt", "with"),
        ("diff-only", "without"),
        ("diff-only", "with"),
    ]
    assert {(str(p.arms[0].force), p.levels[0].stream) for p in plans} == {("ngram-mod", False)}
    seen: Seen = []
    store = Store(tmp_path / "records.jsonl")
    async with started(Arm("fake", "static"), settings, None, tmp_path / "fake") as fake:
        monkeypatch.setattr(arms_module, "running_serve", _serve_at(fake.base_url, seen))
        for plan in plans:
            await run_plan(plan, settings, None, store, tmp_path / "logs", _quiet)
    bodies = _bodies(record)
    assert len(bodies) == 4 * len(EDITS) and len(seen) == 4
    assert all(b["model"] == "fronde:ngram-mod" and b["temperature"] == 0.0 for b in bodies)
    fed = [b["prediction"]["content"] for b in bodies if "prediction" in b]
    assert fed == [e.old for e in EDITS] * 2  # the `with` arms only, the old file each
    samples = prediction_samples(store.samples())
    assert len(samples) == 4 * len(EDITS)
    # A whole answer carries llama-server's timings: decode tok/s is the server's.
    assert {s.decode_tok_s for s in samples} == {1000.0}
    page = prediction_grid(samples, "t").markdown()
    assert "| diff-only | with ÷ without | 1.00 |" in page


@pytest.mark.anyio
async def test_tools_sends_every_agent_step_with_the_tool_list_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recording: tuple[Settings, Path]
) -> None:
    settings, record = recording
    plan = tools_plan(16)
    [workload] = plan.workloads
    seen: Seen = []
    store = Store(tmp_path / "records.jsonl")
    async with started(Arm("fake", "static"), settings, None, tmp_path / "fake") as fake:
        monkeypatch.setattr(arms_module, "running_serve", _serve_at(fake.base_url, seen))
        await run_plan(plan, settings, None, store, tmp_path / "logs", _quiet)
    assert seen == [{"FRONDE_ROUTER__SPECULATE_STRUCTURED": "false"}, {}]
    bodies = _bodies(record)
    assert len(bodies) == 2 * len(workload.items)
    assert all(b["tools"] == AGENT_TOOLS and b["stream"] is False for b in bodies)
    steps = tool_steps(store.samples())
    assert [s.arm for s in steps] == ["before"] * len(bodies[::2]) + ["after"] * len(bodies[::2])
    assert [s.step for s in steps[: len(workload.items)]] == [i.id for i in workload.items]
    assert {s.decode_tok_s for s in steps} == {1000.0}
    text = tool_grid(steps, "t").markdown()
    assert "| after ÷ before | | 1.000 |" in text
