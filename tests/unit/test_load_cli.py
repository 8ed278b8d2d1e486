"""`fronde bench load` end to end over fake llama-servers: its page is `bench report`'s."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fronde.config import Settings

from ..conftest import cli_env


def fronde(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """``python -m fronde ARGS`` in ``cwd``; its output, after checking it exited 0."""
    return python(["-m", "fronde", *args], env, cwd)


def python(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """``python ARGS`` in ``cwd``; its output, after checking it exited 0."""
    r = subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_a_load_run_writes_the_page_that_bench_report_writes_again(
    tmp_path: Path, fake_gemma: Callable[[int], Settings]
) -> None:
    """A new user's trial (2026-12-05) saw `bench report` change a fresh run's load.json."""
    settings = fake_gemma(500)  # the profile and a sparse GGUF in tmp_path
    env = cli_env(settings, tmp_path / "cache")
    run = tmp_path / "run"
    load = ["bench", "load", "--clients", "1", "--items", "2", "--max-tokens", "8"]
    load += ["--window-s", "0.5", "--warmup-s", "0.1"]
    fronde([*load, "--slots", "2", "--no-screen", "--out", str(run)], env, tmp_path)
    written = {f: (run / f).read_text() for f in ("load.json", "load.md")}
    meta = json.loads(written["load.json"])["run"]
    assert meta["title"].startswith("Load: cpu-gemma-270m, 2 slots per server")
    assert meta["calibration"]["baseline"] == "pinned"  # timed: Fronde's placement

    fronde(["bench", "report", str(run)], env, tmp_path)

    assert {f: (run / f).read_text() for f in written} == written
    # The requests as sent, for the outside client; and the device's check reads them.
    sent = json.loads((run / "workload.json").read_text())
    assert sent["path"] == "/v1/completions" and len(sent["items"]) == 2
    check = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "outside_check.py"
    args = [str(check), str(run), "--arm", "plain", "--clients", "1", "--reps", "2"]
    out = python([*args, "--out", str(tmp_path / "check.jsonl")], env, tmp_path).splitlines()
    assert [x.split(":")[0] for x in out[:2]] == ["plain c=1 round 0", "plain c=1 round 1"]
    assert out[-1].startswith("plain c=1: outside [") and "bench load " in out[-1]
    got = [json.loads(x) for x in (tmp_path / "check.jsonl").read_text().splitlines()]
    assert [(g["arm"], g["round"]) for g in got] == [("plain", 0), ("plain", 1)]
    assert all(g["tok_s"] > 0 and g["window_s"] == 0.5 for g in got)
