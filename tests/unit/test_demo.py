"""demo.py: its preflight, and a ``--plain`` run against Fronde over fake backends.

The same run against the real gemma backends is tests/integration/test_demo_real.py.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import demo
from fronde.config import load_settings

from .test_contract import ORIGINAL_ROUTER, real_serve

ROOT = Path(__file__).resolve().parents[2]


def parse_plain(out: str) -> dict[str, dict[str, str]]:
    """``scene=... key=value ...`` lines of ``demo.py --plain`` (shell-quoted), by scene."""
    rows: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        if line.startswith("scene="):
            fields = dict(f.split("=", 1) for f in shlex.split(line))
            rows[fields["scene"]] = fields
    return rows


def test_preflight_names_the_missing_backend_and_model(tmp_path: Path) -> None:
    settings = load_settings(
        cache_dir=tmp_path / "cache", models_dir=ROOT / "models", profile="cpu-gemma-270m"
    )
    empty = load_settings(cache_dir=tmp_path / "cache", models_dir=tmp_path)
    assert any(
        p.startswith("no backend: llama-server is not installed") for p in demo.preflight(settings)
    )
    problems = demo.preflight(empty)
    assert problems[0].startswith("no backend")
    assert problems[1].startswith("no model profile")


def test_preflight_refuses_a_gpu_with_too_little_free_vram(
    tmp_path: Path, fake_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "cpu-gemma-270m.toml").write_text(
        (ROOT / "models" / "cpu-gemma-270m.toml").read_text()
    )
    with (models / "gemma-3-270m-q4_k_m.gguf").open("wb") as f:
        f.truncate(253_113_024)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 500\n")  # 500 MiB free
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings = load_settings(
        cache_dir=tmp_path / "cache",
        models_dir=models,
        profile="cpu-gemma-270m",
        llama_server=fake_binary,
        backend={"n_gpu_layers": 99},
    )
    [problem] = demo.preflight(settings)
    # 4 modes (every mode but draft, which has no model) × 253 MB × 1.3 ≈ 1255 MiB > 500 MiB
    assert problem.startswith("too little free VRAM: 500 MiB, 4 modes need about 1255 MiB")
    smi.write_text("#!/bin/sh\necho 4000\n")
    assert demo.preflight(settings) == []


def run_demo(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """demo.py with ``args``, its output captured as text; the exit status is not checked."""
    return subprocess.run(
        [sys.executable, str(ROOT / "demo.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_no_server_at_url_is_one_line_that_says_what_to_do() -> None:
    out = run_demo("--url", "http://127.0.0.1:9", "--plain", timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "demo: no Fronde answers at http://127.0.0.1:9: start it with `fronde serve`"
    )


def test_plain_run_names_class_and_mode_for_every_scene(tmp_path: Path, fake_binary: Path) -> None:
    modes = ["baseline", "ngram-simple", "ngram-mod"]
    with real_serve(tmp_path, fake_binary, modes=modes, router=ORIGINAL_ROUTER) as s:
        out = run_demo("--url", s.base, "--plain", "--with-repeat", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = parse_plain(out.stdout)
    assert list(rows) == ["prose", "code", "JSON", "edit", "edit again (primed)"]
    for row in rows.values():
        assert row["mode"] in {"baseline", "ngram-simple", "ngram-mod"}
        assert float(row["decode_tok_s"]) > 0
        assert float(row["baseline_tok_s"]) > 0
    # The first novel request probes the aggressive mode. The fakes decode every mode
    # at the same speed, so ngram-mod misses the 1.10 margin and baseline continues.
    # A floor needs three fresh samples of each mode, so the next scenes probe again.
    assert rows["prose"]["class"] == "probe"
    # The probe's result reads as words: "ngram-mod 500.0 vs baseline 500.0 tok/s".
    assert re.fullmatch(r"ngram-mod \d+\.\d vs baseline \d+\.\d tok/s", rows["prose"]["probe"])
    assert "probe='ngram-mod " in out.stdout
    for scene in ("code", "JSON"):
        assert (rows[scene]["class"], rows[scene]["mode"]) in {
            ("probe", "baseline"),
            ("fallback", "ngram-mod"),
        }
    assert (rows["edit"]["class"], rows["edit"]["mode"]) == ("edit", "ngram-mod")
    assert (
        "warm-up: 8 tokens of a neutral prompt on baseline, ngram-simple, ngram-mod" in out.stdout
    )
    assert "Fronde demo: one row per scene" in out.stdout


SHORT = ("--no-compare", "--max-tokens", "12")


def test_max_tokens_shortens_every_scene(tmp_path: Path, fake_binary: Path) -> None:
    with real_serve(tmp_path, fake_binary, modes=["baseline", "ngram-mod"]) as s:
        out = run_demo("--url", s.base, "--plain", *SHORT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = parse_plain(out.stdout)
    # The fakes generate the prompt's words: the edit's first "```" may end it sooner.
    assert [rows[s]["tokens"] for s in ("prose", "code", "JSON")] == ["12", "12", "12"]
    assert 0 < int(rows["edit"]["tokens"]) <= 12
    assert [scene.max_tokens for scene in demo.scenes()] == [128, 128, 128, 320]


@pytest.mark.parametrize("value", ["0", "-3", "many", "1.5"])
def test_a_bad_max_tokens_is_one_line_that_says_what_to_give(value: str) -> None:
    out = run_demo("--url", "http://127.0.0.1:9", "--max-tokens", value, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"demo: --max-tokens {value}: give a whole number of tokens ≥ 1, e.g. 48"
    )
