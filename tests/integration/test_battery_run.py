"""A short real battery run: 2 prompts × (baseline, ngram-simple, router), tiny lengths."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fronde.bench.report import summarize
from fronde.bench.runner import BatteryOptions, run_battery
from fronde.config import load_settings

from .conftest import require_real_parts

pytestmark = pytest.mark.integration


def test_a_short_battery_writes_records_and_resumes(tmp_path: Path) -> None:
    require_real_parts()
    settings = load_settings()
    out = tmp_path / "battery.jsonl"
    options = BatteryOptions(
        reps=1,
        gen_tokens=16,
        edit_tokens=24,
        prompts=("code", "edit-bugfix"),
        configs=("ngram-simple", "router"),
    )
    asyncio.run(run_battery(settings, None, out, options))
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["key"] for r in recs] == [
        "baseline|code",
        "ngram-simple|code",
        "router|code",
        "baseline|edit-bugfix",
        "ngram-simple|edit-bugfix",
        "router|edit-bugfix",
    ]
    assert all(r["status"] == "ok" for r in recs), recs
    for r in recs:
        assert r["decode_tok_s"] > 0 and r["baseline_before"] > 0 and r["tokens"] > 0
        assert r["output_sha256"] and "llama_build" in r and "commit" in r
        assert isinstance(r["repetition"], float)
    assert recs[0]["same_as_baseline"] is True  # baseline against its own reference
    assert recs[2]["routes"] and recs[5]["routes"] == ["edit→ngram-mod"]
    assert recs[4]["alpha"] is not None  # ngram-simple drafts while copying the file
    # The verdict can be computed from what was written.
    assert len(summarize(out).checks) == 5  # 2 × baseline, 2 × best static (code), geomean
    # Resume: nothing left to do, nothing appended.
    asyncio.run(run_battery(settings, None, out, options, resume=True))
    assert len(out.read_text().splitlines()) == 6
