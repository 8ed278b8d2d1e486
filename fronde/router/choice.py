"""A mode the client forces: the header ``x-fronde-mode: MODE`` or the model ``fronde:MODE``.

Pure functions, no I/O. Any other model name (``gpt-4o``, ``fronde``) is routed.
"""

from __future__ import annotations

from fronde.errors import UnknownModeError
from fronde.modes import Mode

__all__ = ["MODEL_PREFIX", "forced_mode", "parse_mode"]

MODEL_PREFIX = "fronde:"
"""Model names ``fronde:<mode>`` force a mode."""


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


def forced_mode(header_mode: str | None, model: str | None) -> Mode | None:
    """Return the mode a request forces, or None.

    Args:
        header_mode: value of the ``x-fronde-mode`` header, or None.
        model: the request's ``model`` field, or None.

    Returns:
        The forced mode (the header wins over the model name), or None.

    Raises:
        UnknownModeError: the header or a ``fronde:`` model name names no mode.
    """
    if header_mode:
        return parse_mode(header_mode, param="x-fronde-mode")
    if model and model.startswith(MODEL_PREFIX):
        return parse_mode(model[len(MODEL_PREFIX) :], param="model")
    return None
