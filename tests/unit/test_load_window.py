"""The load page's window column: how long the span is that a cell's tok/s rests on."""

from __future__ import annotations

from typing import Any

import pytest

from fronde.bench.load_page import load_markdown
from fronde.bench.load_rows import load_rows


def _block(rep: int, starts: list[float], c: int = 2) -> list[dict[str, Any]]:
    """One block of 1-s requests of 10 tokens sent at ``starts`` (s)."""
    return [
        {
            "arm": "plain",
            "level": f"c{c}",
            "rep": rep,
            "item": f"i{k}",
            "t0": t0,
            "wall_s": 1.0,
            "ttft_s": 0.0,
            "tokens": 10,
            "ok": True,
            "repetition": 0.0,
            "route": {},
        }
        for k, t0 in enumerate(starts)
    ]


def test_window_is_the_median_span_from_first_to_last_request_sent() -> None:
    # Three repetitions whose last request went out at 1, 2 and 4 s: the median is 2 s.
    samples = [
        *_block(0, [0.0, 0.0, 1.0]),
        *_block(1, [0.0, 0.0, 1.0, 2.0]),
        *_block(2, [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]),
    ]
    [row] = load_rows(samples, [])
    assert row.window_s == pytest.approx(2.0)
    # tok/s is read inside that window: two 10-token requests over [0, 1] s in rep 0.
    assert row.tok_s_reps[0] == pytest.approx(20.0)


def test_a_block_of_one_request_has_no_window() -> None:
    [row] = load_rows(_block(0, [0.0], c=1), [])
    assert row.window_s is None
    assert row.tok_s == pytest.approx(10.0)  # its own span instead


def test_page_shows_the_window_beside_load() -> None:
    rows = load_rows([*_block(0, [0.0, 0.0, 1.0]), *_block(0, [0.0], c=1)], [])
    page = load_markdown(rows, [], "t", {}, None)
    assert "| load | window s | n |" in page
    # c = 2: load 2.0, window 1.0 s (read as records without arrival times are), 3 requests
    assert "| 2.0 | 1.0 † | 3 |" in page
    assert "| 1.0 | - | 1 |" in page  # c = 1: one request, no window
