"""The speculative-decoding modes Fronde runs, one llama-server process each.

Mode names are llama.cpp's own spec-type names (``common/speculative.cpp``,
``common_speculative_type_to_str``) except ``baseline`` (plain decoding, spec-type
``none``) and ``draft`` (spec-type ``draft-simple`` with a separate draft model).
llama-server b11434 fixes the spec type per process, so each mode is a process.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Mode", "SpeculationSettings", "mode_args"]


class Mode(StrEnum):
    """A decoding mode; the value is the public name (``fronde:<value>``)."""

    BASELINE = "baseline"
    NGRAM_SIMPLE = "ngram-simple"
    NGRAM_MOD = "ngram-mod"
    DRAFT = "draft"


class SpeculationSettings(BaseModel):
    """Speculation parameters passed to llama-server, one set per mode.

    Defaults are the original FRONDE router's tuned values (see shared/BACKGROUND.md):
    ngram-mod n_match 12 beat 6 and 24 on a JSON edit (409 vs 291 and 276 tok/s);
    the draft mode used n_max 12 and p_min 0.45.
    """

    model_config = ConfigDict(extra="forbid")  # a typo in [speculation] is an error

    ngram_mod_n_match: int = Field(
        default=12, ge=1, le=1024, description="--spec-ngram-mod-n-match: lookup length in tokens"
    )
    draft_n_max: int = Field(
        default=12, ge=1, le=64, description="--spec-draft-n-max: most tokens drafted per step"
    )
    draft_p_min: float = Field(
        default=0.45,
        ge=0.0,
        le=1.0,
        description="--spec-draft-p-min: stop drafting below this prob",
    )


def mode_args(mode: Mode, spec: SpeculationSettings, draft_model: Path | None = None) -> list[str]:
    """Return the llama-server arguments that select ``mode``.

    Args:
        mode: the decoding mode.
        spec: speculation parameters.
        draft_model: GGUF of the draft model; required for :attr:`Mode.DRAFT`.

    Returns:
        Extra argv for llama-server (empty for baseline, whose default spec type is none).

    Raises:
        ValueError: ``mode`` is DRAFT and ``draft_model`` is None.
    """
    match mode:
        case Mode.BASELINE:
            return []
        case Mode.NGRAM_SIMPLE:
            return ["--spec-type", "ngram-simple"]
        case Mode.NGRAM_MOD:
            return [
                "--spec-type",
                "ngram-mod",
                "--spec-ngram-mod-n-match",
                str(spec.ngram_mod_n_match),
            ]
        case Mode.DRAFT:
            if draft_model is None:
                raise ValueError("the draft mode needs a draft model")
            return [
                "--spec-draft-model",
                str(draft_model),
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                str(spec.draft_n_max),
                "--spec-draft-p-min",
                str(spec.draft_p_min),
            ]
