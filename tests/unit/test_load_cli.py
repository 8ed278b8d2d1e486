"""`fronde bench load` end to end over fake llama-servers: its page is `bench report`'s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fronde.runtime.models import load_profile

from ..conftest import REPO_MODELS


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
    tmp_path: Path, fake_binary: Path
) -> None:
    """A new user's trial (2026-12-05) saw `bench report` change a fresh run's load.json."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(REPO_MODELS / "cpu-gemma-270m.toml", models)
    profile = load_profile(models, "cpu-gemma-270m")
    with (models / profile.target.file).open("wb") as f:  # sparse: the fake reads none of it
        f.truncate(profile.target.size or 1)
    env = os.environ | {
        "FRONDE_MODELS_DIR": str(models),
        "FRONDE_CACHE_DIR": str(tmp_path / "cache"),
        "FRONDE_LLAMA_SERVER": str(fake_binary),
        "FRONDE_PROFILE": "cpu-gemma-270m",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    run = tmp_path / "run"
    load = ["bench", "load", "--clients", "1", "--items", "2", "--max-tokens", "8"]
    fronde([*load, "--slots", "2", "--no-screen", "--out", str(run)], env, tmp_path)
    written = {f: (run / f).read_text() for f in ("load.json", "load.md")}
    meta = json.loads(written["load.json"])["run"]
    assert meta["title"].startswith("Load: cpu-gemma-270m, 2 slots per server")
    assert meta["calibration"]["baseline"] == "plain"

    fronde(["bench", "report", str(run)], env, tmp_path)

    assert {f: (run / f).read_text() for f in written} == written
