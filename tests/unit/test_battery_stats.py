"""The battery's statistics and report on synthetic records: no backend involved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fronde.bench.report import Summary, load_records, write_charts, write_markdown
from fronde.bench.runner import battery_configs, done_keys
from fronde.bench.stats import bracket, first_difference, geomean, repetition_score, verdict
from fronde.errors import FrondeError


def test_bracket_takes_medians_and_measures_drift() -> None:
    b = bracket([40.0, 44.0, 42.0], [84.0, 80.0, 90.0], [42.0, 43.0, 41.0])
    assert (b.before, b.value, b.after) == (42.0, 84.0, 42.0)
    assert b.drift == 0.0 and b.ratio == pytest.approx(2.0) and b.valid


def test_bracket_drift_above_five_percent_is_invalid() -> None:
    b = bracket([40.0], [60.0], [43.0])
    assert b.drift == pytest.approx(0.075)
    assert not b.valid
    assert b.ratio == pytest.approx(60.0 / 41.5)
    assert bracket([40.0], [60.0], [41.9]).valid  # 4.75 %


def test_bracket_rejects_empty_or_zero_references() -> None:
    with pytest.raises(ValueError, match="at least one"):
        bracket([], [1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        bracket([0.0], [1.0], [1.0])


def test_repetition_score_sees_loops() -> None:
    assert repetition_score("the quick brown fox jumps over the lazy dog") == 0.0
    loop = "I am here. " * 20
    assert repetition_score(loop) > 0.9
    assert repetition_score("too short") == 0.0


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference("abc", "abd") == 2


def test_geomean() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geomean([])


def test_verdict_checks_baseline_best_static_and_oracle() -> None:
    static = {
        "code": {"baseline": 1.0, "ngram-mod-12": 2.0},
        "prose": {"baseline": 1.0, "ngram-mod-12": 1.2},
    }
    content = {"code": "code", "prose": "prose"}
    checks = verdict({"code": 1.9, "prose": 1.2}, static, content)
    names = [c.name for c in checks]
    # prose gets no best-static check: the seed's invariant covers code, math and JSON.
    assert names == [
        "code: router ÷ baseline",
        "code: router ÷ best static (ngram-mod-12)",
        "prose: router ÷ baseline",
        "geomean router ÷ oracle",
    ]
    assert all(c.passed for c in checks)
    assert checks[-1].value == pytest.approx(((1.9 / 2.0) * 1.0) ** 0.5)
    failing = verdict({"code": 1.7, "prose": 0.97}, static, content)
    assert [c.passed for c in failing] == [True, False, False, False]


def _rec(config: str, prompt: str, ratio: float, **extra: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "key": f"{config}|{prompt}",
        "config": config,
        "prompt": prompt,
        "content": {"code": "code", "math": "math"}[prompt],
        "ratio": ratio,
        "decode_tok_s": 40.0 * ratio,
        "alpha": 0.8 if config != "baseline" else None,
        "valid": True,
        "degenerate": False,
        "machine": {"cpu": "x"},
        "llama_build": "b11434",
        **extra,
    }


def _write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_summary_verdict_charts_and_markdown(tmp_path: Path) -> None:
    recs = [
        _rec("baseline", "code", 1.0),
        _rec("ngram-mod-12", "code", 2.0),
        _rec("router", "code", 1.95),
        _rec("baseline", "math", 1.0),
        _rec("ngram-mod-12", "math", 0.9, valid=False),
        _rec("router", "math", 0.99),
        {"status": "failed", "key": "ngram-mod-12|math", "error": "boom"},  # ignored
    ]
    path = _write(tmp_path / "battery.jsonl", recs)
    s = Summary(load_records(path))
    assert s.configs == ["baseline", "ngram-mod-12", "router"]
    assert s.invalid == ["ngram-mod-12|math"]
    assert s.passed
    pngs = write_charts(s, tmp_path)
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    md = write_markdown(s, tmp_path / "summary.md", path).read_text()
    assert "**VERDICT: PASS**" in md and "| code (code) | 1.00 | **2.00** | 1.95 |" in md
    assert "0.90*" in md  # the invalid cell is marked
    assert "1 invalid and 0 looping cells are left out of the checks" in md


def test_invalid_and_looping_cells_count_in_no_check(tmp_path: Path) -> None:
    recs = [
        _rec("baseline", "code", 1.0),
        _rec("ngram-mod-12", "code", 5.0, valid=False),  # drifted: not the best static
        _rec("router", "code", 1.9),
        _rec("baseline", "math", 1.0),
        _rec("ngram-mod-12", "math", 1.2),
        _rec("router", "math", 0.5, degenerate=True),  # a looping router cell: left out
    ]
    s = Summary(load_records(_write(tmp_path / "battery.jsonl", recs)))
    names = [c.name for c in s.checks]
    assert not any(n.startswith("math:") for n in names)  # the looping router cell left out
    best = next(c for c in s.checks if c.name.startswith("code: router ÷ best static"))
    assert best.name.endswith("(baseline)") and best.value == pytest.approx(1.9)  # not 5.0
    assert s.passed


def test_records_from_two_machines_are_refused(tmp_path: Path) -> None:
    recs = [_rec("baseline", "code", 1.0), _rec("router", "code", 1.0, machine={"cpu": "y"})]
    with pytest.raises(FrondeError, match="mixes machines"):
        load_records(_write(tmp_path / "b.jsonl", recs))


def test_resume_skips_only_successful_cells(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "b.jsonl",
        [_rec("baseline", "code", 1.0), {"status": "failed", "key": "router|code", "error": "x"}],
    )
    with path.open("a") as fh:
        fh.write("not json\n")
    assert done_keys(path) == {"baseline|code"}
    assert done_keys(tmp_path / "missing.jsonl") == set()


def test_battery_configs_add_the_draft_grid_only_with_a_draft(tmp_path: Path) -> None:
    names = [c.name for c in battery_configs(None)]
    assert names == [
        "baseline",
        "ngram-simple",
        "ngram-mod-6",
        "ngram-mod-12",
        "ngram-mod-24",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-cache",
        "router",
    ]
    with_draft = battery_configs(tmp_path / "draft.gguf")
    assert len(with_draft) == len(names) + 7
    hybrid = next(c for c in with_draft if c.name == "ngram-mod+draft")
    assert "ngram-mod,draft-simple" in hybrid.args and str(tmp_path / "draft.gguf") in hybrid.args
