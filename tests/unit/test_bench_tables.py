"""Benchmark tables fit the terminal: no cell cut to an ellipsis, no line past its width."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from fronde.bench.prediction import PredictionSample, prediction_grid
from fronde.bench.tables import Grid
from fronde.bench.tooluse import ToolStep, tool_grid


def shown(renderable: RenderableType, width: int = 80) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def steps() -> list[ToolStep]:
    """Two arms of an agent session; the routed one spread over the longest mode names."""
    routes = [
        ("predicted", "ngram-simple"),
        ("predicted", "ngram-mod"),
        ("fallback", "baseline"),
        ("edit", "ngram-mod"),
        ("predicted", "cascade"),
    ]
    out = [
        ToolStep("before", f"s{k}", "unsafe-for-spec", "baseline", 50.0, 100, 2.0, f"a{k}")
        for k in range(5)
    ]
    out += [
        ToolStep("after", f"s{k}", cls, mode, 55.0, 100, 1.9, f"b{k}")
        for k, (cls, mode) in enumerate(routes)
    ]
    return out


def test_the_agent_steps_table_fits_80_columns_with_every_route_whole() -> None:
    """`fronde bench tools` printed its Markdown page; now a table of whole words."""
    text = shown(tool_grid(steps(), "Tool-bearing agent steps: cpu-smollm2-135m, 2 CPUs"))
    assert "…" not in text and "|---" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for route in ("predicted→ngram-simple: 1", "unsafe-for-spec→baseline:", "fallback→baseline: 1"):
        assert route in text
    assert "1.100" in text  # after ÷ before, decode tok/s


def test_the_prediction_table_fits_80_columns_with_every_header_whole() -> None:
    samples = [
        PredictionSample("file-in-prompt", arm, 0, tok_s, 0.7, 50, wall, feed, acc, "same text")
        for arm, tok_s, wall, feed, acc in (
            ("without", 80.0, 2.0, None, None),
            ("with", 84.0, 2.2, 330.0, 41),
        )
    ]
    text = shown(prediction_grid(samples, "Predicted Outputs: cpu-smollm2-135m, 2 CPUs"))
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for word in ("file-in-prompt", "accepted", "decode", "330.00", "1.05", "1/1"):
        assert word in text


def test_a_grid_too_wide_for_one_line_keeps_its_words_whole_where_they_fit() -> None:
    wide = Grid(
        "t",
        ("name", "a long header of several words", "figure"),
        [("an-identifier-of-28-letters", "word " * 12, "1.00")],
    )
    text = shown(wide, 60)
    assert max(len(line) for line in text.splitlines()) <= 60
    assert "an-identifier-of-28-letters" in text and "several" in text
    # Narrower than its longest word: the word folds onto the next line, never "…".
    text = shown(wide, 30)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 30
    assert "an-iden" in text and "tifier-" in text


def test_a_grid_in_markdown_pads_short_rows_and_lists_a_cells_lines() -> None:
    grid = Grid("t", ("a", "b", "c"), [("x", "one\ntwo"), ("y", "", "3")], ["a note"])
    assert grid.markdown() == (
        "# t\n\n| a | b | c |\n|---|---|---|\n| x | one, two | |\n| y | | 3 |\n\na note\n"
    )
