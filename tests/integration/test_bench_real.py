"""The benchmark harness on the real model: CI's tiny version of `fronde bench verdict`."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from fronde.bench.arms import arms_named
from fronde.bench.blocks import run_plan
from fronde.bench.protocol import RESUMED, Plan
from fronde.bench.report import build_report
from fronde.bench.store import Store
from fronde.bench.workloads import Workload, load_workload
from fronde.config import load_settings

from .conftest import require_real_parts

pytestmark = pytest.mark.integration


def _plan() -> Plan:
    first = load_workload("first-encounter")
    sessions = load_workload("agent-sessions")
    steps = tuple(replace(i, max_tokens=12) for i in sessions.items[:2])
    return Plan(
        workloads=(
            Workload(first.name, first.items[:3]),
            Workload(sessions.name, steps, sessions=True),
        ),
        arms=tuple(arms_named(["base", "mod", "cascade", "router"], draft=False)),
        session_arms=tuple(arms_named(["base", "router"], draft=False)),
        reps=2,
        session_reps=1,
        form="completion",
        max_tokens=8,
        priming=Workload("none", ()),
    )


def test_every_kind_of_arm_runs_on_fresh_servers_and_the_report_reads_it(
    tmp_path: Path,
) -> None:
    require_real_parts()
    settings = load_settings()
    plan = _plan()
    store = Store(tmp_path / "records.jsonl")
    lines: list[str] = []

    def progress(line: str, n: int) -> None:
        lines.append(line)

    asyncio.run(run_plan(plan, settings, None, store, tmp_path / "logs", progress))
    samples = store.samples()
    # A: 3 prompts × 4 arms × 2 reps; B: 2 steps × 2 arms.
    assert len(samples) == 3 * 4 * 2 + 2 * 2
    assert all(s["ok"] and s["tokens"] > 0 and s["wall_s"] > 0 for s in samples), samples
    blocks = [r for r in store.records() if r["type"] == "block"]
    assert len(blocks) == 4 * 2 + 2 and all(b["ok"] for b in blocks)
    # The router's decision and its own account of the run are in the records.
    routed = [s for s in samples if s["arm"] == "router"]
    assert all(s["route"]["mode"] and s["route"]["class"] for s in routed)
    assert all("router" in b for b in blocks if b["arm"] == "router")
    # Plain decoding drafts nothing; a static server answers without Fronde's headers.
    assert all(s["alpha"] is None for s in samples if s["arm"] == "base")
    assert all(s["route"] == {} for s in samples if s["arm"] == "cascade")
    # Arm order rotates: repetition 1 starts where repetition 0's second arm stood.
    first_rep = [b["arm"] for b in blocks if b["workload"] == "first-encounter"]
    assert first_rep[:4] == ["base", "mod", "cascade", "router"]
    assert first_rep[4:] == ["mod", "cascade", "router", "base"]

    report = build_report(store)
    console = Console(record=True, width=80, file=io.StringIO())
    report.show(console)
    text = console.export_text()
    assert "VERDICT: " in text and "(c) router ÷ cross-fitted oracle" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    report.write(tmp_path)
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "first-encounter.png").is_file()

    # Resumed: every block ended ok, so nothing is sent again.
    lines.clear()
    asyncio.run(run_plan(plan, settings, None, store, tmp_path / "logs", progress))
    assert len(store.samples()) == len(samples)
    assert lines and all(x.endswith(RESUMED) for x in lines)


def test_the_command_runs_one_arm_and_says_there_is_no_verdict(tmp_path: Path) -> None:
    """With no --out it writes where reproduce.sh's runs go; piped, it prints its progress."""
    require_real_parts()
    argv = [
        sys.executable, "-m", "fronde", "bench", "verdict",
        "--per-domain", "1", "--sessions", "0", "--reps", "1", "--max-tokens", "4",
        "--arm", "default",
    ]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "no verdict: it needs a routed arm and the base arm" in lines
    [out] = (tmp_path / "runs").glob("verdict-cpu-gemma-270m-*Z")
    assert lines[-1].startswith(f"results: {out.relative_to(tmp_path)}/")
    samples = Store(out / "records.jsonl").samples()
    assert len(samples) == 10 and {s["arm"] for s in samples} == {"default"}
    # What it was doing before the first request, then how far it was.
    starting = "first-encounter, rep 1 of 1: starting arm 1 of 1, default (llama-server"
    assert any(line.startswith(starting) for line in lines)
    assert any(line.split()[:2] == ["0/10", "requests"] for line in lines)
    assert any(line.split()[:2] == ["10/10", "requests"] for line in lines)
