"""The speculation atlas on the harness: break-even formulas, a campaign over fakes, the page."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fronde.bench.atlas import run_atlas, write_atlas_page
from fronde.bench.breakeven import (
    VerifyCosts,
    acceptance_rate,
    expected_tokens,
    measure_verify_costs,
    speedup,
)
from fronde.bench.protocol import RESUMED
from fronde.bench.store import Store
from fronde.config import Settings
from fronde.errors import FrondeError

# --- break-even formulas and verify costs --------------------------------------------------


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


# --- a campaign over fake llama-servers, then the page ----------------------------------


@pytest.fixture
def fake_settings(fake_gemma: Callable[[int], Settings]) -> Settings:
    return fake_gemma(3000)


@pytest.mark.anyio
async def test_campaign_measures_every_mode_on_every_prompt_and_resumes(
    tmp_path: Path, fake_settings: Any
) -> None:
    out = tmp_path / "atlas"
    lines: list[tuple[str, int]] = []

    async def campaign() -> None:
        await run_atlas(
            fake_settings,
            None,
            out,
            [("Q4_K_M", None)],
            reps=2,
            max_tokens=12,
            per_domain=1,
            progress=lambda line, n: lines.append((line, n)),
        )

    await campaign()
    samples = Store(out / "Q4_K_M" / "records.jsonl").samples()
    # Ten domains, one prompt each, three arms, two repetitions, on fresh servers per block.
    assert len(samples) == 10 * 3 * 2
    assert {s["arm"] for s in samples} == {"base", "simple", "mod"}
    for s in samples:
        assert s["ok"] and s["tokens"] == 12 and s["wall_s"] > 0
        # The fake accepts half of what is drafted; baseline drafts nothing.
        assert s["alpha"] == (None if s["arm"] == "base" else pytest.approx(0.5))
    assert sum(n for _, n in lines) == 60

    lines.clear()
    await campaign()
    assert len(Store(out / "Q4_K_M" / "records.jsonl").samples()) == 60  # nothing twice
    assert sum(n for _, n in lines) == 60  # all counted, none sent again:
    assert len(lines) == 3 * 2 and all(x.endswith(RESUMED) for x, _ in lines)

    ks = tuple(range(1, 65))
    costs = VerifyCosts(
        ks, tuple(0.02 + 0.001 * k for k in ks), tuple(0.0 for _ in ks), 256, "t", "x"
    )
    page = write_atlas_page(out, ["Q4_K_M"], costs)
    text = page.read_text()
    assert "[Q4_K_M](Q4_K_M/summary.md)" in text and "break-even α" in text
    assert (out / "break-even.png").stat().st_size > 10_000
    summary = (out / "Q4_K_M" / "summary.md").read_text()
    assert "simple" in summary and "mod" in summary


def test_cli_refuses_an_unknown_quantization_before_measuring(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "fronde", "bench", "atlas", "--out", str(tmp_path)]
    done = subprocess.run([*argv, "--quant", "Q9_X"], capture_output=True, text=True)
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("fronde: error: --quant Q9_X is not a llama-quantize type")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_requantization_names_the_type(tmp_path: Path) -> None:
    from fronde.bench.atlas import requantize

    tool = tmp_path / "llama-quantize"
    tool.write_text("#!/bin/sh\necho 'invalid model file' >&2\nexit 3\n")
    tool.chmod(0o755)
    with pytest.raises(FrondeError, match=r"llama-quantize Q4_0 failed \(3\): invalid model"):
        requantize(tool, tmp_path / "m.gguf", "Q4_0", tmp_path / "out")
