"""`fronde bench load` end to end over fake llama-servers: its page is `bench report`'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fronde.config import Settings


def fronde(args: list[str], env: dict[str, str], cwd: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "fronde", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_load_run_writes_the_page_that_bench_report_writes_again(
    tmp_path: Path, fake_gemma: Callable[[int], Settings]
) -> None:
    """A new user's trial (2026-12-05) saw `bench report` change a fresh run's load.json."""
    settings = fake_gemma(500)  # the profile and a sparse GGUF in tmp_path
    env = os.environ | {
        "FRONDE_MODELS_DIR": str(settings.models_dir),
        "FRONDE_CACHE_DIR": str(tmp_path / "cache"),
        "FRONDE_LLAMA_SERVER": str(settings.llama_server),
        "FRONDE_PROFILE": "cpu-gemma-270m",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    run = tmp_path / "run"
    load = ["bench", "load", "--clients", "1", "--items", "2", "--max-tokens", "8"]
    load += ["--window-s", "0.5", "--warmup-s", "0.1"]
    fronde([*load, "--slots", "2", "--no-screen", "--out", str(run)], env, tmp_path)
    written = {f: (run / f).read_text() for f in ("load.json", "load.md")}
    meta = json.loads(written["load.json"])["run"]
    assert meta["title"].startswith("Load: cpu-gemma-270m, 2 slots per server")
    assert meta["calibration"]["baseline"] == "plain"

    fronde(["bench", "report", str(run)], env, tmp_path)

    assert {f: (run / f).read_text() for f in written} == written
