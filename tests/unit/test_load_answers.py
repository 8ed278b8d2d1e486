"""A load page says whether Fronde in front of the plain server gave its answers at c = 1."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fronde.bench.load_report import answer_lines, report_load

ROOT = Path(__file__).resolve().parents[2]
PIN32B = ROOT / "results" / "load-gpu-h200-cpu-smollm2-135m-20261204-pin32b"


def _sample(
    arm: str, level: str, rep: int, item: str, text: str, ok: bool = True
) -> dict[str, Any]:
    """A sample as ``fronde bench load`` records one (only what the lines read)."""
    return {"arm": arm, "level": level, "rep": rep, "item": item, "text": text, "ok": ok}


def test_each_repetition_counts_the_items_fronde_answered_as_the_plain_server() -> None:
    samples = [
        _sample("plain", "", 0, "a", "x"),
        _sample("plain", "", 0, "b", "y"),
        _sample("fr-plain", "", 0, "a", "x"),
        _sample("fr-plain", "", 0, "b", "y, flipped"),
        _sample("plain", "", 1, "a", "x"),
        _sample("fr-plain", "", 1, "a", "x"),
        _sample("fr-plain", "", 1, "b", "lost", ok=False),  # failed: not compared
        _sample("plain", "c2", 0, "a", "x"),
        _sample("fr-plain", "c2", 0, "a", "under load"),  # c ≥ 2: not compared
        _sample("router-b", "", 0, "a", "another mode"),  # routed: not compared
    ]
    assert answer_lines(samples) == [
        "rep 0: 1 of 2 the same; differ: b",
        "rep 1: 1 of 1 the same",
    ]
    assert answer_lines([s for s in samples if s["arm"] != "fr-plain"]) == []


def test_the_h200_run_with_every_request_pinned_to_slot_0_shows_its_flipped_answers(
    tmp_path: Path,
) -> None:
    run = tmp_path / PIN32B.name
    shutil.copytree(PIN32B, run)
    report_load(run)
    page = (run / "load.md").read_text()
    section = page.split("## Answers at c = 1 (`fr-plain` against `plain`)")[1]
    lines = [x for x in section.split("\n## ")[0].splitlines() if x.startswith("- ")]
    assert len(lines) == 2  # one session, two repetitions
    assert all("48 of 66 the same; differ: " in x for x in lines)
