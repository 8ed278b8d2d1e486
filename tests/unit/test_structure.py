"""Short functions on every floor a request passes through.

The import rules (layers, no transport above ``backends/``, no cycle) are
import-linter contracts in ``pyproject.toml``, run by ``scripts/test.sh``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fronde"
MAX_LINES = 80
"""Longest function allowed on the serving floors (``api/``, ``request/``, ``router/``,
``evidence/``, ``backends/``), lines."""


def functions(folder: Path) -> list[tuple[str, int]]:
    """Every function of ``folder``'s modules: (``file:line name``, its length in lines)."""
    out: list[tuple[str, int]] = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                out.append((f"{path.name}:{node.lineno} {node.name}", length))
    return out


@pytest.mark.parametrize("layer", ["api", "request", "router", "evidence", "backends"])
def test_no_function_is_longer_than_80_lines(layer: str) -> None:
    found = functions(PACKAGE / layer)
    assert found  # the folder was read
    assert [(name, n) for name, n in found if n > MAX_LINES] == []
