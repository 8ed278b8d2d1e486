"""Which mode serves a request: a forced mode, or the configured default.

This is the fixed routing that precedes the measuring router: a client forces a
mode with the header ``x-fronde-mode: MODE`` or the model name ``fronde:MODE``;
anything else goes to ``Settings.default_mode`` (the safe floor, ngram-simple, by
default). Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fronde.errors import UnknownModeError
from fronde.modes import Mode

__all__ = ["MODEL_PREFIX", "Decision", "RouteClass", "decide", "parse_mode"]

MODEL_PREFIX = "fronde:"
"""Model names ``fronde:<mode>`` force a mode."""


class RouteClass(StrEnum):
    """Why a mode was chosen; sent back in the ``x-fronde-class`` header."""

    FORCED = "forced"
    DEFAULT = "default"


@dataclass(frozen=True)
class Decision:
    """A routing decision: the mode, and the class that explains it."""

    mode: Mode
    route_class: RouteClass


def parse_mode(name: str, *, param: str) -> Mode:
    """Return the :class:`Mode` named ``name`` (case-insensitive, spaces trimmed).

    Raises:
        UnknownModeError: no mode has that name; the message lists the known ones.
    """
    try:
        return Mode(name.strip().lower())
    except ValueError as exc:
        known = ", ".join(m.value for m in Mode)
        raise UnknownModeError(f"unknown mode {name!r}; known modes: {known}", param=param) from exc


def decide(header_mode: str | None, model: str | None, default: Mode) -> Decision:
    """Choose the mode for one request.

    Args:
        header_mode: value of the ``x-fronde-mode`` header, or None.
        model: the request's ``model`` field, or None.
        default: the mode for requests that force none.

    Returns:
        The decision. The header wins over the model name.

    Raises:
        UnknownModeError: the header or a ``fronde:`` model name names no mode.
    """
    if header_mode:
        return Decision(parse_mode(header_mode, param="x-fronde-mode"), RouteClass.FORCED)
    if model and model.startswith(MODEL_PREFIX):
        return Decision(parse_mode(model[len(MODEL_PREFIX) :], param="model"), RouteClass.FORCED)
    return Decision(default, RouteClass.DEFAULT)
