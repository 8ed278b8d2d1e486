"""Short functions and small modules on every floor of ``fronde/``.

Every package (``api/``, ``bench/``, ``request/``, ...) and the top-level modules
(``cli.py``, ``config.py``, ...): no function over 80 lines, no module over 400, the
figures ``scripts/house.py`` prints. The import rules (layers, no transport above
``backends/``, no benchmark-only dependency on the serving side, ``bench/`` only through
the serving side's face ``fronde/serving.py``, no cycle) are import-linter contracts in
``pyproject.toml``, run by ``scripts/test.sh``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "fronde"
MAX_LINES = 80
"""Longest function allowed anywhere in ``fronde/``, lines (nested functions included)."""
MAX_MODULE_LINES = 400
"""Longest module allowed anywhere in ``fronde/``, lines."""
TOP = "(top)"
"""The floor of the top-level modules (``fronde/*.py``)."""
FLOORS = [*sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()), TOP]
"""Every package of ``fronde/``, read from the folder (a new one is checked too), and the top."""


def modules(floor: str) -> list[Path]:
    """The modules of a floor: a package's, subpackages included, or the top-level ones."""
    if floor == TOP:
        return sorted(PACKAGE.glob("*.py"))
    return sorted((PACKAGE / floor).rglob("*.py"))


def functions(floor: str) -> list[tuple[str, int]]:
    """Every function of ``floor``'s modules: (``file:line name``, its length in lines)."""
    out: list[tuple[str, int]] = []
    for path in modules(floor):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                name = path.relative_to(PACKAGE).as_posix()
                out.append((f"{name}:{node.lineno} {node.name}", length))
    return out


def test_every_floor_is_checked() -> None:
    for floor in ("api", "backends", "bench", "evidence", "request", "router", "runtime", TOP):
        assert floor in FLOORS
    assert PACKAGE / "cli.py" in modules(TOP)
    assert PACKAGE / "bench" / "workloads" / "__init__.py" in modules("bench")


@pytest.mark.parametrize("floor", FLOORS)
def test_no_function_is_longer_than_80_lines(floor: str) -> None:
    found = functions(floor)
    assert found  # the floor was read
    assert [(name, n) for name, n in found if n > MAX_LINES] == []


@pytest.mark.parametrize("floor", FLOORS)
def test_no_module_is_longer_than_400_lines(floor: str) -> None:
    sizes = {
        p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in modules(floor)
    }
    assert sizes  # the floor was read
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}
