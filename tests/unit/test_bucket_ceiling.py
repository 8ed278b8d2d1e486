"""scripts/bucket_ceiling.py on a synthetic load folder: bucket choice, held out, oracle."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from fronde.bench.store import Store
from tests.scripts import load_script

EDITS = ("inventory-py-1", "inventory-py-2")
"""Agent-mix items in the ``edit|low`` bucket (chat form, as served)."""

GENERAL = ("math-2", "chat-4")
"""Agent-mix items in the ``general|low`` bucket."""


CALIBRATION = {
    "baseline": "plain",
    "ngram-simple": "s-simple",
    "ngram-mod": "default",
    "cascade": "cascade",
}
"""Fronde mode → the static arm that runs it, as a load run records it."""


def _script() -> ModuleType:
    return load_script("bucket_ceiling.py")


def _folder(tmp: Path, wall: dict[tuple[str, str], float]) -> Path:
    """A load folder with one run, c = 1, two repetitions of every static arm.

    ``wall``: (item, arm) → seconds, the same in both repetitions.
    """
    store = Store(tmp / "records.jsonl")
    store.append(
        {
            "type": "run",
            "identity": {"slots": 1},
            "started_at": "2026-12-04T13:00:00Z",
            "boot_id": "b",
            "title": "Load: cpu-smollm2-135m, 1 slots per server, test",
            "calibration": CALIBRATION,
        }
    )
    arms = sorted({a for _, a in wall})
    for rep in (0, 1):
        for arm in arms:
            block, block_id = f"agent-mix|{arm}|{rep}", f"{arm}{rep}"
            for item in sorted({i for i, _ in wall}):
                store.append(
                    {
                        "type": "sample",
                        "block": block,
                        "block_id": block_id,
                        "arm": arm,
                        "rep": rep,
                        "item": item,
                        "level": "c1",
                        "ok": True,
                        "wall_s": wall[(item, arm)],
                        "tokens": 64,
                        "repetition": 0.0,
                    }
                )
            store.append({"type": "block", "block": block, "block_id": block_id, "ok": True})
    return tmp


def test_each_bucket_gets_the_mode_that_served_it_fastest_and_routing_beats_every_arm(
    tmp_path: Path,
) -> None:
    # Cascade halves the edits' time and is 20 % slower on the rest; the other modes are
    # baseline's equal. No single server serves both buckets at their best.
    wall: dict[tuple[str, str], float] = {}
    for item in EDITS + GENERAL:
        for arm in ("plain", "s-simple", "default", "cascade"):
            wall[(item, arm)] = 1.0
        wall[(item, "cascade")] = 0.5 if item in EDITS else 1.2
    lines = _script().report(_folder(tmp_path, wall))
    served = next(line for line in lines if line.startswith("  as served:"))
    # Routed: 2 × 0.5 + 2 × 1.0 = 3.0 s; the best arm alone (cascade) 3.4 s, plain 4.0 s.
    assert served.count("1.133×") == 2, served
    assert "baseline, cascade" in served
    assert "  per item: held out 1.133×; 1.133×" in lines
    assert "  oracle, repetition 0: 1.133× the best static arm" in lines


def test_a_mode_within_the_band_of_baseline_leaves_the_bucket_on_baseline(
    tmp_path: Path,
) -> None:
    # ngram-simple 2 % faster than baseline everywhere: inside predict_band (3 %).
    wall: dict[tuple[str, str], float] = {}
    for item in EDITS + GENERAL:
        for arm in ("plain", "default", "cascade"):
            wall[(item, arm)] = 1.0
        wall[(item, "s-simple")] = 0.98
    lines = _script().report(_folder(tmp_path, wall))
    served = next(line for line in lines if line.startswith("  as served:"))
    assert "buckets: baseline)" in served
    assert served.count("0.980×") == 2, served  # the best arm alone keeps its 2 %


def test_one_repetition_is_refused_with_what_is_missing(tmp_path: Path) -> None:
    store = Store(tmp_path / "records.jsonl")
    run = {
        "identity": {"slots": 1},
        "title": "Load: cpu-smollm2-135m, x",
        "calibration": CALIBRATION,
    }
    store.append({"type": "run", **run})
    lines = _script().report(tmp_path)
    assert lines == [f"{tmp_path}: needs two repetitions of every single-server arm at c = 1"]
