"""The speculative-decoding modes Fronde runs, one llama-server process each.

Mode names are llama.cpp's own spec-type names (``common/speculative.cpp``,
``common_speculative_type_to_str``) except ``baseline`` (plain decoding, spec-type
``none``), ``cascade`` (``--spec-type ngram-simple,ngram-mod``: llama.cpp tries
ngram-simple first and ngram-mod when it drafts nothing) and ``draft`` (spec-type
``draft-simple`` with a separate draft model). llama-server b11434 fixes the spec type
per process, so each mode is a process.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BACKEND_SAMPLING_FLAGS",
    "FALLBACK_FLOOR",
    "NGRAM_SIMPLE_SIZE_M",
    "Mode",
    "SpeculationSettings",
    "draft_max",
    "mode_args",
]


class Mode(StrEnum):
    """A decoding mode; the value is the public name (``fronde:<value>``)."""

    BASELINE = "baseline"
    NGRAM_SIMPLE = "ngram-simple"
    NGRAM_MOD = "ngram-mod"
    CASCADE = "cascade"
    DRAFT = "draft"


BACKEND_SAMPLING_FLAGS = frozenset({"-bs", "--backend-sampling"})
"""llama-server's flags for backend sampling (``common/arg.cpp``); b11434 also takes it per
request (``backend_sampling``, ``tools/server/server-schema.cpp``)."""

FALLBACK_FLOOR = Mode.NGRAM_MOD
"""The starting floor when none was measured (:mod:`fronde.evidence.calibration`): static
ngram-mod was the best single mode in the verdict of 2026-12-01 (``results/verdict-*-20261201``)."""


class SpeculationSettings(BaseModel):
    """Speculation parameters passed to llama-server, one set per mode.

    ngram-mod's defaults are the static configuration that won the verdict of
    2026-12-01 (``results/verdict-*-20261201``): short drafts, n_min 16 and n_max 32,
    with llama.cpp's n_match 24, were the fastest single server in three of four runs
    (CPU SmolLM2 1.12× baseline, H200 gemma 1.11×, H200 SmolLM2 1.01×) and 0.95 of the
    cascade on CPU gemma; ngram-mod's own defaults (n_min 48, n_max 64) draft nothing
    in an answer shorter than 48 tokens. n_match 12 and 24 tied there (1.14/1.14,
    1.09/1.08, 1.07/1.05, 0.96/0.98 × baseline). The draft mode's n_max 12 and p_min
    0.45 are the original FRONDE router's (see shared/BACKGROUND.md).
    """

    model_config = ConfigDict(extra="forbid")  # a typo in [speculation] is an error

    ngram_mod_n_match: int = Field(
        default=24, ge=1, le=1024, description="--spec-ngram-mod-n-match: lookup length in tokens"
    )
    ngram_mod_n_min: int = Field(
        default=16, ge=1, le=1024, description="--spec-ngram-mod-n-min: shortest draft kept"
    )
    ngram_mod_n_max: int = Field(
        default=32, ge=1, le=1024, description="--spec-ngram-mod-n-max: longest draft"
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

    @model_validator(mode="after")
    def _chain_bounds(self) -> SpeculationSettings:
        if self.ngram_mod_n_min > self.ngram_mod_n_max:
            raise ValueError(
                f"ngram_mod_n_min ({self.ngram_mod_n_min}) must not exceed "
                f"ngram_mod_n_max ({self.ngram_mod_n_max})"
            )
        return self


NGRAM_SIMPLE_SIZE_M = 48
"""ngram-simple's draft length, tokens: llama.cpp's ``size_m`` (``common/common.h``), which
Fronde does not set (``--spec-ngram-simple-size-m``); ``common_speculative_n_max`` counts
it in a server's maximum (``common/speculative.cpp``)."""


def draft_max(mode: Mode, spec: SpeculationSettings) -> int:
    """The longest draft ``mode``'s backend makes under ``spec``, tokens (0 for baseline).

    The largest configured length of its speculators: ngram-simple's ``size_m``,
    ngram-mod's ``n_max``, both for the cascade, the draft model's ``n_max``. A request's
    ``speculative.n_max`` at or above it caps nothing.
    """
    match mode:
        case Mode.BASELINE:
            return 0
        case Mode.NGRAM_SIMPLE:
            return NGRAM_SIMPLE_SIZE_M
        case Mode.NGRAM_MOD:
            return spec.ngram_mod_n_max
        case Mode.CASCADE:
            return max(NGRAM_SIMPLE_SIZE_M, spec.ngram_mod_n_max)
        case Mode.DRAFT:
            return spec.draft_n_max


def _ngram_mod_args(spec: SpeculationSettings) -> list[str]:
    return [
        *("--spec-ngram-mod-n-match", str(spec.ngram_mod_n_match)),
        *("--spec-ngram-mod-n-min", str(spec.ngram_mod_n_min)),
        *("--spec-ngram-mod-n-max", str(spec.ngram_mod_n_max)),
    ]


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
            return ["--spec-type", "ngram-mod", *_ngram_mod_args(spec)]
        case Mode.CASCADE:
            return ["--spec-type", "ngram-simple,ngram-mod", *_ngram_mod_args(spec)]
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
