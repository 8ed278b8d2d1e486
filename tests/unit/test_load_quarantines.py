"""A load page names the router blocks whose modes the collapse rule quarantined."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from fronde.bench.load_page import load_markdown
from fronde.bench.load_report import quarantine_lines, report_load

ROOT = Path(__file__).resolve().parents[2]
NIGHT = ROOT / "results" / "load-gpu-h200-cpu-gemma-270m-20261203-c32b"


def _block(key: str, collapses: dict[str, int], ok: bool = True) -> dict[str, Any]:
    """A block record as ``fronde bench load`` writes one (blocks.run_plan)."""
    modes = {m: {"collapses": n, "step_rate_ema": 50.0} for m, n in collapses.items()}
    _, arm, rep, *_ = key.split("|")
    head: dict[str, Any] = {"type": "block", "block": key, "arm": arm, "rep": int(rep), "ok": ok}
    return head | {"router": {"modes": modes}}


def test_only_blocks_with_collapses_are_named_and_a_block_run_again_counts_once() -> None:
    records = [
        _block("agent-mix|router-b|0|c32", {"baseline": 0}),
        _block("agent-mix|router-b|1|c32", {"baseline": 16, "ngram-simple": 1, "cascade": 0}),
        _block("agent-mix|router-b|0", {"ngram-mod": 2}),  # c = 1 has no level tag
        _block("agent-mix|router-b|0|c8", {"cascade": 3}),
        _block("agent-mix|router-b|0|c8", {"cascade": 0}),  # run again: its last record
        _block("agent-mix|router-b|0|c4", {"cascade": 5}, ok=False),  # a failed block
        {"type": "block", "block": "agent-mix|plain|0|c32", "ok": True},  # a static arm
        _block("agent-mix|router-t|2|c24-gap0.25-plain", {"baseline": 1}),  # another level tag
    ]
    assert quarantine_lines(records) == [
        "router-b, c=32, rep 2: baseline 16, ngram-simple 1",
        "router-b, c=1, rep 1: ngram-mod 2",
        "router-t, c=24, rep 3: baseline 1",
    ]
    page = load_markdown([], [], "t", {}, None, [], {}, None, quarantine_lines(records))
    assert "## Collapses" in page
    assert "- router-b, c=32, rep 2: baseline 16, ngram-simple 1" in page
    assert "## Collapses" not in load_markdown([], [], "t", {}, None, [], {})


def test_the_nights_gemma_run_shows_baseline_quarantined_in_two_repetitions(
    tmp_path: Path,
) -> None:
    # The committed H200 run (router state as each block ended), reported again.
    folder = tmp_path / NIGHT.name
    folder.mkdir()
    for name in ("records.jsonl.gz", "load.json"):
        shutil.copy(NIGHT / name, folder / name)
    report_load(folder)
    body = json.loads((folder / "load.json").read_text())
    assert body["quarantines"] == [
        "router-b, c=32, rep 2: baseline 16, ngram-simple 1",
        "router-b, c=32, rep 3: baseline 15, ngram-simple 2",
    ]
    assert (
        "- router-b, c=32, rep 3: baseline 15, ngram-simple 2" in (folder / "load.md").read_text()
    )
