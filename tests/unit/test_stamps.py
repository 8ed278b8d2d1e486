"""``server.stamps``: one ``request.stamps`` line a request, its marks in the order they happen.

Over the fake backends. ``scripts/ttft_split.py`` reads these lines to take a request's time to
its first byte apart; off by default, nothing is logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from .test_contract import chat

WAY = ["parsed", "planned", "slot", "sent", "headers", "head", "event", "byte"]
"""A forced stream's marks, in the order they come (:mod:`fronde.stamps`)."""


def streamed(c: TestClient) -> list[dict[str, Any]]:
    """The ``request.stamps`` lines of one streamed chat request forced to baseline."""
    body = chat("alpha beta", stream=True)
    with (
        capture_logs() as logs,
        c.stream(
            "POST", "/v1/chat/completions", json=body, headers={"x-fronde-mode": "baseline"}
        ) as r,
    ):
        assert r.status_code == 200, r.read()
        r.read()
    return [dict(e) for e in logs if e["event"] == "request.stamps"]


def test_a_stream_logs_its_marks_once_in_order(serve: Any, tmp_path: Path) -> None:
    c: TestClient = serve(server={"stamps": True})
    (line,) = streamed(c)
    assert line["path"] == "/v1/chat/completions" and line["t0"] > 0
    marks: dict[str, float] = line["ms"]
    assert list(marks) == WAY  # no upstream call of Fronde's own among them
    times = [marks[k] for k in WAY]
    assert times == sorted(times) and times[0] >= 0
    cpu: dict[str, float] = line["cpu_ms"]  # the proxy's CPU since arrival, at each mark
    assert list(cpu) == WAY and [cpu[k] for k in WAY] == sorted(cpu.values())


def test_without_the_setting_nothing_is_stamped(serve: Any, tmp_path: Path) -> None:
    c: TestClient = serve()
    assert streamed(c) == []
