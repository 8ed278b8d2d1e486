"""The agent-tool recipes the README shows are the files the recipe tests run."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "docs" / "recipes").iterdir())


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_the_readme_shows_each_recipe_verbatim(recipe: Path) -> None:
    assert recipe.read_text().strip() in (ROOT / "README.md").read_text()


def test_every_recipe_is_run_by_a_test() -> None:
    tests = (ROOT / "tests" / "integration" / "test_agent_tools.py").read_text()
    for recipe in RECIPES:
        assert f'"{recipe.name}"' in tests, recipe.name
