"""A load page gives Fronde's own time per arm and c, and the part held for a burst."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fronde.bench.load_report import own_time_lines, report_load

ROOT = Path(__file__).resolve().parents[2]
PIN32 = ROOT / "results" / "load-gpu-h200-cpu-gemma-270m-20261204-pin32"


def _sample(arm: str, level: str, route: dict[str, str] | None, ok: bool = True) -> dict[str, Any]:
    """A sample as ``fronde bench load`` records one (only what the lines read)."""
    return {"arm": arm, "level": level, "ok": ok, "route": route}


def test_each_fronde_arm_and_c_gets_a_line_and_the_burst_wait_where_there_was_one() -> None:
    samples = [
        _sample("router-b", "c32", {"overhead-ms": "10.0", "gather-ms": "9.5"}),
        _sample("router-b", "c32", {"overhead-ms": "30.0", "gather-ms": "20.0"}),
        _sample("router-b", "c32", {"overhead-ms": "148.1", "gather-ms": "52.3"}),
        _sample("router-b", "c32", {"overhead-ms": "999"}, ok=False),  # failed: left out
        _sample("fr-plain", "c32", {"overhead-ms": "0.2"}),  # forced: no burst wait
        _sample("fr-plain", "", {"overhead-ms": "0.4"}),  # c = 1 has no level tag
        _sample("plain", "c32", None),  # a static arm: no route
        _sample("router-b", "c2", {"mode": "baseline"}),  # no overhead header: none
        _sample("router-b", "c4", {"overhead-ms": "0.5", "gather-ms": "0.0"}),
        _sample("router-b", "c4", {"overhead-ms": "0.6", "gather-ms": "0.0", "settle-ms": "3.5"}),
    ]
    assert own_time_lines(samples) == [
        "fr-plain, c=1: 0.4 ms median, 0.4 most (1 requests)",
        "router-b, c=4: 0.6 ms median, 0.6 most (2 requests); in the burst wait 0.0 median, "
        "0.0 most; and after it, 1 waited to learn a server's slot: 3.5 ms median, 3.5 most",
        "fr-plain, c=32: 0.2 ms median, 0.2 most (1 requests)",
        "router-b, c=32: 30.0 ms median, 148.1 most (3 requests); in the burst wait "
        "20.0 median, 52.3 most",
    ]


def test_the_h200_page_names_the_first_bursts_overhead(tmp_path: Path) -> None:
    # The run of 2026-12-04 predates x-fronde-gather-ms: overhead only.
    run = tmp_path / PIN32.name
    shutil.copytree(PIN32, run)
    report_load(run)
    page = (run / "load.md").read_text()
    section = page.split("## Fronde's own time (`x-fronde-overhead-ms`)")[1].split("\n## ")[0]
    lines = [x for x in section.splitlines() if x.startswith("- ")]
    line = next(x for x in lines if x.startswith("- router-b, c=32: "))
    assert line.endswith("148.1 most (96 requests)")
    assert any(x.startswith("- fr-plain, c=32: ") for x in lines)
