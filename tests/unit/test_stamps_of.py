"""scripts/gpu/stamps_of.py: Fronde's per-request time stamps gathered from a load run's logs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fronde.bench.arms import _keep_log  # pyright: ignore[reportPrivateUsage]
from tests.scripts import load_script


def _line(ms: dict[str, float]) -> str:
    rec = {"path": "/v1/chat/completions", "t0": 1.0, "ms": ms, "cpu_ms": {}}
    return json.dumps(rec | {"event": "request.stamps", "level": "info"})


def test_each_blocks_stamps_are_collected_and_their_spans_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block = tmp_path / "logs" / "agent-mix-fr-plain-0-c8"
    block.mkdir(parents=True)
    marks = [
        {"parsed": 0.2, "sent": 0.4, "headers": 5.0, "event": 20.4, "head": 20.6, "byte": 20.9},
        {"parsed": 0.2, "sent": 0.6, "headers": 6.0, "event": 30.6, "head": 30.8, "byte": 31.1},
    ]
    text = '{"event": "router.floor", "level": "info"}\n' + "\n".join(map(_line, marks))
    (block / "fronde-serve.log").write_text(text + "\nnot json at all\n")
    (tmp_path / "logs" / "agent-mix-pinned-0-c8").mkdir()  # a static arm: no Fronde log
    script = load_script("gpu/stamps_of.py")
    monkeypatch.setattr(sys, "argv", ["stamps_of.py", str(tmp_path)])
    assert script.main() == 0
    rows = [json.loads(x) for x in (tmp_path / "stamps.jsonl").read_text().splitlines()]
    assert [r["block"] for r in rows] == ["agent-mix-fr-plain-0-c8"] * 2
    out = capsys.readouterr().out
    # medians: arrival → sent 0.5, sent → headers 5.0, headers → event 20.0, event → byte 0.5
    assert "| agent-mix-fr-plain-0-c8 | 2 | 0.50 | 5.00 | 20.00 | 0.50 |" in out


def test_a_run_without_stamps_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script("gpu/stamps_of.py")
    monkeypatch.setattr(sys, "argv", ["stamps_of.py", str(tmp_path)])
    assert script.main() == 0
    assert "FRONDE_SERVER__STAMPS=true" in capsys.readouterr().out


def test_a_fronde_arms_log_is_kept_in_its_blocks_log_folder(tmp_path: Path) -> None:
    log = tmp_path / "fronde-bench-serve-x.log"
    log.write_text(_line({"sent": 0.4}) + "\n")
    block = tmp_path / "logs" / "agent-mix-fr-plain-0-c8"
    _keep_log(log, block)
    assert log.exists()  # copied, never moved
    assert "request.stamps" in (block / "fronde-serve.log").read_text()
    null = Path("/dev/null")
    _keep_log(null, tmp_path / "logs" / "other")  # a test harness's stand-in: left alone
    assert null.is_char_device() and not (tmp_path / "logs" / "other").exists()
    _keep_log(tmp_path / "gone.log", block)  # no such file: no error
