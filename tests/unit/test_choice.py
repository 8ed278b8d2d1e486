"""Forced modes by header or model name; mode flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from fronde.errors import UnknownModeError
from fronde.modes import Mode, SpeculationSettings, mode_args
from fronde.router.choice import forced_mode


def test_header_wins_over_model_name() -> None:
    assert forced_mode("ngram-mod", "fronde:baseline") is Mode.NGRAM_MOD


def test_model_name_forces_a_mode_case_insensitively() -> None:
    assert forced_mode(None, "fronde:Baseline") is Mode.BASELINE


@pytest.mark.parametrize("model", [None, "gpt-4o", "fronde", "gemma-3-270m"])
def test_anything_else_is_routed(model: str | None) -> None:
    assert forced_mode(None, model) is None


@pytest.mark.parametrize(
    ("header", "model", "param"), [("fast", None, "x-fronde-mode"), (None, "fronde:", "model")]
)
def test_unknown_names_are_rejected(header: str | None, model: str | None, param: str) -> None:
    with pytest.raises(UnknownModeError) as info:
        forced_mode(header, model)
    assert info.value.param == param and info.value.status_code == 400


def test_mode_args_use_llama_cpp_names() -> None:
    spec = SpeculationSettings()
    assert mode_args(Mode.BASELINE, spec) == []
    assert mode_args(Mode.NGRAM_SIMPLE, spec) == ["--spec-type", "ngram-simple"]
    assert mode_args(Mode.NGRAM_MOD, spec) == [
        *("--spec-type", "ngram-mod"),
        *("--spec-ngram-mod-n-match", "24"),
        *("--spec-ngram-mod-n-min", "16"),
        *("--spec-ngram-mod-n-max", "32"),
    ]
    draft = mode_args(Mode.DRAFT, spec, Path("d.gguf"))
    assert draft[:4] == ["--spec-draft-model", "d.gguf", "--spec-type", "draft-simple"]
    assert "0.45" in draft
    with pytest.raises(ValueError, match="draft model"):
        mode_args(Mode.DRAFT, spec)
