"""A short real atlas: verify cost by llama-bench, two prompts, one requantized variant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fronde.bench.atlas import load_atlas
from fronde.bench.breakeven import VerifyCosts

from .conftest import require_real_parts

pytestmark = pytest.mark.integration


def test_a_short_atlas_measures_derives_a_variant_and_draws_the_map(tmp_path: Path) -> None:
    require_real_parts()
    out = tmp_path / "atlas"
    argv = [
        sys.executable, "-m", "fronde", "bench", "atlas", "--out", str(out), "--tag", "cpu",
        "--domain", "code-editing", "--domain", "chat", "--per-domain", "1", "--reps", "1",
        "--max-tokens", "24", "--variants", "Q4_0", "--variant-per-domain", "1",
        "--max-k", "4", "--verify-reps", "1",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]

    costs = VerifyCosts.from_json(json.loads((out / "verify-cost.json").read_text()))
    assert costs.ks == (1, 2, 3, 4) and all(s > 0 for s in costs.seconds)
    assert costs.ratio(1) == 1.0 and "llama-bench" in costs.command

    records = load_atlas(out / "atlas.jsonl")
    assert all(r["status"] == "ok" for r in records), records
    keys = {(r["variant"], r["mode"], r["prompt"]) for r in records}
    for variant in ("Q4_K_M", "Q4_0"):
        for mode in ("baseline", "ngram-simple", "ngram-mod"):
            for prompt in ("code-editing-1", "chat-1"):
                assert (variant, mode, prompt) in keys
    q4_0 = [r for r in records if r["variant"] == "Q4_0"]
    assert {r["derived_from"] for r in q4_0} == {"Q4_K_M"}
    assert all(r["model_file"].endswith("-requant-Q4_0.gguf") for r in q4_0)
    for r in records:
        assert r["decode_tok_s"] > 0 and r["tokens"] > 0 and r["output_sha256"]
        assert r["speedup"] > 0 and isinstance(r["degenerate"], bool)
    # The edit copies a file: some mode drafted and had drafts accepted.
    edits = [r for r in records if r["prompt"] == "code-editing-1" and r["mode"] != "baseline"]
    assert any((r["alpha"] or 0) > 0 for r in edits)

    page = (out / "atlas.md").read_text()
    assert "## Quantization" in page and "requantizations of a 4-bit model" in page
    assert (out / "break-even-cpu.png").stat().st_size > 10_000
    assert (out / "commands.txt").read_text().startswith("fronde bench atlas --out")

    # --resume measures nothing again: no record, and the verify cost is kept.
    costs_before = (out / "verify-cost.json").read_text()
    done = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kept from the earlier run" in done.stdout
    assert (out / "verify-cost.json").read_text() == costs_before
    assert len((out / "atlas.jsonl").read_text().splitlines()) == len(records)
    assert len((out / "commands.txt").read_text().splitlines()) == 2
