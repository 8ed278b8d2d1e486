"""The CLI's failures are one line that says what to fix, and exit status 1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


def fronde(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fronde", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_bad_setting_is_one_line(tmp_path: Path) -> None:
    r = fronde("serve", env={"FRONDE_BACKEND__THREADS": "0", "FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fronde: error: invalid setting in the FRONDE_* environment or the defaults: "
        "backend.threads: Input should be greater than or equal to 1 (got '0')"
    ]


def test_serve_without_install_says_run_install(tmp_path: Path) -> None:
    r = fronde("serve", env={"FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert "run `fronde install`" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_with_unknown_profile_lists_the_known(tmp_path: Path, fake_binary: Path) -> None:
    env = {"FRONDE_CACHE_DIR": str(tmp_path), "FRONDE_LLAMA_SERVER": str(fake_binary)}
    r = fronde("serve", "--profile", "nope", env=env)
    assert r.returncode == 1
    assert "no profile 'nope'" in r.stderr and "cpu-gemma-270m" in r.stderr


def test_serve_with_missing_model_says_fetch(tmp_path: Path, fake_binary: Path) -> None:
    shutil.copy(REPO_MODELS / "cpu-smollm2-135m.toml", tmp_path)
    env = {
        "FRONDE_CACHE_DIR": str(tmp_path),
        "FRONDE_LLAMA_SERVER": str(fake_binary),
        "FRONDE_MODELS_DIR": str(tmp_path),
    }
    r = fronde("serve", env=env)
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("fronde: error: smollm2-135m-instruct-q4_1 is missing")
    assert line.endswith("run `fronde models fetch`")


def test_models_fetch_unknown_profile(tmp_path: Path) -> None:
    r = fronde("models", "fetch", "nope")
    assert r.returncode == 1
    assert r.stderr.startswith("fronde: error: no profile 'nope'")


def test_a_port_in_use_is_one_line_before_any_backend_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = fronde("serve", "--port", str(port), env={"FRONDE_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"fronde: error: 127.0.0.1:{port} is in use: pass --port N, or stop what listens there"
    ]


def test_bench_verdict_reads_its_settings_file_from_config(tmp_path: Path) -> None:
    """--config is the settings file, as on every command (the old battery made it a filter)."""
    missing = tmp_path / "nope.toml"
    r = fronde("bench", "verdict", "--config", str(missing), "--out", str(tmp_path / "out"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"fronde: error: config file not found: {missing}"]


def test_version_names_fronde_and_the_pinned_llama_cpp_build() -> None:
    from fronde import __version__

    r = fronde("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"fronde {__version__} (llama.cpp b11434)"


def test_bench_help_maps_each_question_to_its_command_and_time() -> None:
    """`fronde bench --help` says which question each benchmark answers and how long it takes."""
    from fronde.cli import BENCH_MAP, bench_app

    names = [c.name or "" for c in bench_app.registered_commands]
    assert names == list(BENCH_MAP)  # every command in the map, in its order
    assert names[0] == "verdict"
    for name, line in BENCH_MAP.items():
        assert "?" in line or name == "report", name
        assert "2 cores: " in line or name == "report", name
    r = fronde("bench", "--help", env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    first = {line.strip("│ ").split(" ")[0]: line for line in r.stdout.splitlines()}
    rows = [line for word, line in first.items() if word in names]
    assert [line.strip("│ ").split(" ")[0] for line in rows] == names
    for name, row in zip(names, rows, strict=True):
        assert BENCH_MAP[name] in row, row
    assert "Measure decode speed" not in r.stdout
    assert "./reproduce.sh runs it" in r.stdout


def test_bench_verdict_help_names_the_folder_it_writes_by_default() -> None:
    r = fronde("bench", "verdict", "--help", env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    assert "(default: runs/verdict-<profile>-<UTC time>, new each run)" in r.stdout
