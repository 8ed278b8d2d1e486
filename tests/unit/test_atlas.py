"""The speculation atlas: prompt set, break-even formulas, campaign over fakes, report."""

from __future__ import annotations

import json
import math
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fronde.bench.atlas import AtlasOptions, load_atlas, run_campaign
from fronde.bench.atlas_report import bootstrap_ci, domain_rows, write_atlas_report
from fronde.bench.breakeven import (
    VerifyCosts,
    acceptance_rate,
    expected_tokens,
    measure_verify_costs,
    speedup,
)
from fronde.bench.domains import DOMAIN_PROMPTS, DOMAINS, prompts_by_domain
from fronde.config import load_settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.runtime.models import load_profile

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


# --- the prompt set -----------------------------------------------------------------------


def test_ten_domains_of_five_distinct_prompts() -> None:
    assert len(DOMAINS) == 10
    for d in DOMAINS:
        mine = [p for p in DOMAIN_PROMPTS if p.domain == d]
        assert len(mine) == 5, d
        assert len({p.prompt for p in mine}) == 5, d
    assert len({p.name for p in DOMAIN_PROMPTS}) == 50


def test_subsets_and_an_unknown_domain() -> None:
    two = prompts_by_domain(("math", "chat"), per_domain=2)
    assert [p.name for p in two] == ["math-1", "math-2", "chat-1", "chat-2"]
    with pytest.raises(ValueError, match="unknown domain 'poetry'"):
        prompts_by_domain(("poetry",))


def test_edit_prompts_end_inside_a_fence_and_stop_at_its_close() -> None:
    for p in prompts_by_domain(("code-editing",)):
        assert p.prompt.rstrip().endswith(("```python", "```javascript"))
        assert p.stop == "\n```\n"


# --- Leviathan et al. 2023 with measured verify costs --------------------------------------


def flat_costs(max_k: int = 64) -> VerifyCosts:
    """A verify that costs one decode step at any k (the paper's assumption)."""
    ks = tuple(range(1, max_k + 1))
    return VerifyCosts(ks, tuple(0.02 for _ in ks), tuple(0.0 for _ in ks), 256, "test", "")


def test_expected_tokens_limits() -> None:
    assert float(expected_tokens(0.0, 4)) == pytest.approx(1.0)
    assert float(expected_tokens(0.999999, 4)) == pytest.approx(5.0, rel=1e-4)
    # Eq. 1 at β = 0.8, γ = 5: (1 − 0.8^6) / 0.2
    assert float(expected_tokens(0.8, 5)) == pytest.approx((1 - 0.8**6) / 0.2)


def test_acceptance_rate_is_accepted_over_drafted() -> None:
    # β = 0.5, γ = 2: accepted is 0 w.p. 0.5, 1 w.p. 0.25, 2 w.p. 0.25 → mean 0.75 of 2.
    assert float(acceptance_rate(0.5, 2)) == pytest.approx(0.375)
    betas = np.linspace(0, 0.99, 50)
    a = acceptance_rate(betas, 8)
    assert np.all(np.diff(a) > 0) and a[0] == 0 and a[-1] < 1


def test_speedup_matches_the_paper_when_verify_costs_one_step() -> None:
    costs = flat_costs()
    # Theorem 3.8 with c = 0: improvement = E.
    assert float(speedup(0.7, 4, costs)) == pytest.approx(float(expected_tokens(0.7, 4)))
    # With a draft costing c per token: E / (γc + 1).
    assert float(speedup(0.7, 4, costs, draft_cost=0.1)) == pytest.approx(
        float(expected_tokens(0.7, 4)) / 1.4
    )


def test_a_costly_verify_moves_break_even() -> None:
    ks = tuple(range(1, 17))
    costly = VerifyCosts(ks, tuple(0.01 * k for k in ks), tuple(0.0 for _ in ks), 0, "cpu", "")
    assert costly.ratio(9) == pytest.approx(9.0)
    # A verify that scales linearly with k never pays, whatever β.
    assert float(speedup(0.95, 8, costly)) < 1.0
    assert float(speedup(0.95, 8, flat_costs())) > 1.0


def fake_bench(tmp_path: Path, payload: str, code: int = 0) -> Path:
    exe = tmp_path / "llama-bench"
    out = tmp_path / "payload.json"
    out.write_text(payload)
    exe.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/argv"\ncat "{out}"\nexit {code}\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_verify_costs_from_llama_bench_json(tmp_path: Path) -> None:
    rows = [
        {"n_prompt": k, "n_gen": 0, "n_depth": 256, "avg_ns": 1e6 * (10 + k), "stddev_ns": 1e4}
        for k in (1, 2, 4)
    ]
    exe = fake_bench(tmp_path, json.dumps(rows))
    costs = measure_verify_costs(exe, Path("m.gguf"), ks=(1, 2, 4), depth=256, threads=2)
    assert costs.ks == (1, 2, 4)
    assert costs.seconds[0] == pytest.approx(0.011)
    assert costs.ratio(4) == pytest.approx(14 / 11)
    argv = (tmp_path / "argv").read_text().split()
    assert argv[argv.index("-p") + 1] == "1,2,4" and argv[argv.index("-n") + 1] == "0"
    assert argv[argv.index("-d") + 1] == "256" and argv[argv.index("-t") + 1] == "2"
    assert VerifyCosts.from_json(costs.to_json()) == costs


def test_verify_costs_failures_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FrondeError, match="exited with 1"):
        measure_verify_costs(fake_bench(tmp_path, "boom", 1), Path("m"), ks=(1, 2))
    with pytest.raises(FrondeError, match="no usable JSON"):
        measure_verify_costs(fake_bench(tmp_path, "not json"), Path("m"), ks=(1, 2))
    with pytest.raises(ValueError, match="must contain 1"):
        measure_verify_costs(fake_bench(tmp_path, "[]"), Path("m"), ks=(2, 4))


# --- aggregation --------------------------------------------------------------------------


def rec(
    domain: str, prompt: str, mode: str, speed: float, acc: int, drafted: int
) -> dict[str, Any]:
    return {
        "status": "ok",
        "variant": "Q4_K_M",
        "domain": domain,
        "prompt": prompt,
        "mode": mode,
        "speedup": speed,
        "accepted": acc,
        "draft_n": drafted,
        "tau": 64 / (64 - acc) if drafted else None,
        "same_as_baseline": speed == 1.0,
        "degenerate": False,
        "decode_tok_s": 40.0 * speed,
    }


def test_domain_rows_pool_alpha_and_take_the_geomean() -> None:
    records = [
        rec("math", "math-1", "baseline", 1.0, 0, 0),
        rec("math", "math-2", "baseline", 1.0, 0, 0),
        rec("math", "math-1", "ngram-mod", 2.0, 30, 40),
        rec("math", "math-2", "ngram-mod", 0.5, 1, 10),
    ]
    rows = {r.mode: r for r in domain_rows(records) if r.domain == "math"}
    assert rows["baseline"].alpha is None and rows["baseline"].speedup == pytest.approx(1.0)
    mod = rows["ngram-mod"]
    assert mod.alpha == pytest.approx(31 / 50)  # pooled, not the mean of 0.75 and 0.1
    assert mod.speedup == pytest.approx(1.0)  # geomean of 2 and 0.5
    assert mod.speedup_ci[0] <= mod.speedup <= mod.speedup_ci[1]
    assert mod.identical == 0.0 and mod.prompts == 2


def test_bootstrap_ci_brackets_the_estimate_and_needs_two_values() -> None:
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0], lambda a: float(np.mean(a)))
    assert lo <= 3.0 <= hi and lo < hi
    assert all(math.isnan(v) for v in bootstrap_ci([1.0], lambda a: float(np.mean(a))))


# --- a campaign over fake llama-servers, then the report ----------------------------------


@pytest.fixture
def fake_settings(tmp_path: Path, fake_binary: Path) -> Any:
    shutil.copy(REPO_MODELS / "cpu-gemma-270m.toml", tmp_path)
    profile = load_profile(tmp_path, "cpu-gemma-270m")
    with (tmp_path / profile.target.file).open("wb") as f:
        f.truncate(profile.target.size or 1)
    return load_settings(
        models_dir=tmp_path,
        cache_dir=tmp_path,
        profile="cpu-gemma-270m",
        llama_server=fake_binary,
        backend={"extra_args": ["--fake-tps", "3000"]},
    )


@pytest.mark.anyio
async def test_campaign_writes_a_record_per_mode_and_prompt_and_resumes(
    tmp_path: Path, fake_settings: Any
) -> None:
    out = tmp_path / "atlas" / "atlas.jsonl"
    options = AtlasOptions(reps=2, max_tokens=12, domains=("math", "chat"), per_domain=2)
    lines: list[str] = []
    await run_campaign(fake_settings, out, options, progress=lines.append)
    records = load_atlas(out)
    assert len(records) == 4 * 3 and len(lines) == 4
    assert {r["mode"] for r in records} == {
        str(m) for m in (Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD)
    }
    for r in records:
        assert r["status"] == "ok" and r["variant"] == "Q4_K_M" and r["tokens"] == 12
        assert len(r["runs_tok_s"]) == 2 and r["decode_tok_s"] > 0
        if r["mode"] == "baseline":
            assert r["alpha"] is None and r["speedup"] == pytest.approx(1.0)
        else:
            assert r["alpha"] == pytest.approx(0.5)  # the fake's --fake-accept-rate
        # The fake continues the same deterministic chain in every mode.
        assert r["same_as_baseline"] is True

    await run_campaign(fake_settings, out, options, resume=True)
    assert len(load_atlas(out)) == 12  # nothing measured twice

    ks = tuple(range(1, 65))
    costs = VerifyCosts(
        ks, tuple(0.02 + 0.001 * k for k in ks), tuple(0.0 for _ in ks), 256, "t", "x"
    )
    (out.parent / "verify-cost.json").write_text(json.dumps(costs.to_json()))
    written = write_atlas_report(out.parent, "test", commands=["fronde bench atlas"])
    names = {p.name for p in written}
    assert names == {"atlas-domains-test.png", "break-even-test.png", "atlas.md"}
    page = (out.parent / "atlas.md").read_text()
    assert "| math | ngram-mod | 2 |" in page and "Leviathan" in page
    assert (out.parent / "break-even-test.png").stat().st_size > 10_000


def test_report_without_records_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(FrondeError, match="run the campaign"):
        write_atlas_report(tmp_path, "cpu")


def test_cli_unknown_domain_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "fronde", "bench", "atlas", "--out", str(tmp_path), "--domain", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("fronde: error: --domain: unknown domain 'x'; known: code-generation")


def test_cli_refuses_before_measuring(tmp_path: Path) -> None:
    import subprocess
    import sys

    def atlas(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fronde", "bench", "atlas", "--out", str(tmp_path), *args]
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    bad = atlas("--variants", "Q4_0,Q9_X")
    assert bad.returncode == 1
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith("fronde: error: --variants: Q9_X is not a llama-quantize type")
    (tmp_path / "atlas.jsonl").write_text('{"key": "Q4_K_M|baseline|chat-1"}\n')
    again = atlas("--domain", "chat")
    assert again.returncode == 1
    assert "exists: pass --resume" in again.stderr
    # Nothing was written by the refused commands.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atlas.jsonl"]


def test_load_atlas_keeps_the_last_record_per_key(tmp_path: Path) -> None:
    path = tmp_path / "atlas.jsonl"
    lines = [
        {"key": "Q4_K_M|baseline|chat-1", "status": "failed"},
        {"key": "Q4_K_M|baseline|chat-2", "status": "ok"},
        {"key": "Q4_K_M|baseline|chat-1", "status": "ok"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')
    got = load_atlas(path)
    assert [(r["key"], r["status"]) for r in got] == [
        ("Q4_K_M|baseline|chat-2", "ok"),
        ("Q4_K_M|baseline|chat-1", "ok"),
    ]
