"""Racing two servers at c = 1, read off the static arms (fronde.bench.load_race)."""

from __future__ import annotations

from typing import Any

import pytest

from fronde.bench.load_race import race_lines


def _s(arm: str, item: str, tokens: int, wall: float, **kw: Any) -> dict[str, Any]:
    """One c = 1 sample."""
    return {
        "arm": arm,
        "level": "",
        "rep": 0,
        "item": item,
        "ok": True,
        "tokens": tokens,
        "wall_s": wall,
    } | kw


def _samples() -> list[dict[str, Any]]:
    # plain is faster on x, cascade on y: alone each reads 200 ÷ 2.0 = 100 tok/s; a race
    # keeps plain's x (0.5 s) and cascade's y (0.5 s): 200 ÷ 1.0 = 200 tok/s.
    return [
        _s("plain", "x", 100, 0.5),
        _s("plain", "y", 100, 1.5),
        _s("cascade", "x", 100, 1.5),
        _s("cascade", "y", 100, 0.5),
        _s("router-b", "x", 100, 0.5),
        _s("router-b", "y", 100, 1.0),
    ]


def test_a_race_keeps_each_items_first_answer() -> None:
    [line] = race_lines(_samples(), [])
    assert "2 items: best single cascade 100 tok/s" in line  # a tie: the first in order
    assert "cascade+plain 200 (2.00×)" in line
    assert "every server 200 (2.00×)" in line
    assert "router-b 1.33×" in line  # 200 tokens in 1.5 s, on the same items


def test_loops_other_levels_failures_and_fronde_arms_are_left_out() -> None:
    noise = [
        _s("plain", "z", 100, 0.1),  # a looping item: left out everywhere
        _s("cascade", "z", 100, 9.0),
        _s("plain", "x", 999, 0.01, level="c2"),  # another concurrency
        _s("cascade", "y", 999, 0.01, ok=False),  # a failed request
        _s("plain2", "x", 100, 0.01),  # two servers, not one
        _s("plain2", "y", 100, 0.01),
        _s("fr-plain", "x", 100, 0.01),  # Fronde's hop, not a server alone
        _s("fr-plain", "y", 100, 0.01),
    ]
    [line] = race_lines([*_samples(), *noise], ["z"])
    assert "2 items: best single cascade 100 tok/s" in line
    assert "plain2" not in line and "fr-plain" not in line
    assert "cascade+plain 200 (2.00×)" in line


def test_repetitions_and_sessions_are_read_apart() -> None:
    second = [s | {"rep": 1, "wall_s": 2 * s["wall_s"]} for s in _samples()]
    other = [s | {"session": "B"} for s in _samples()]
    lines = race_lines([*_samples(), *second, *other], [])
    assert len(lines) == 3
    assert lines[1].startswith("- rep 1, 2 items: best single cascade 50 tok/s")
    assert lines[2].startswith("- session B, rep 0")


@pytest.mark.parametrize(
    "samples",
    [
        [_s("plain", "x", 100, 0.5)],  # one server: nothing to race
        [_s("plain", "x", 100, 0.5, level="c4"), _s("cascade", "x", 100, 0.5, level="c4")],
        [_s("plain", "x", 100, 0.5), _s("cascade", "y", 100, 0.5)],  # no item in common
    ],
)
def test_no_line_without_two_servers_on_common_items_at_c1(samples: list[dict[str, Any]]) -> None:
    assert race_lines(samples, []) == []
