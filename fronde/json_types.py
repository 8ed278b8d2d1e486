"""Names for free-form JSON: a request body's nested values, llama-server's answers.

pydantic's ``JsonValue``, a recursive union (object, array, string, number, boolean,
null) that a type checker narrows with ``isinstance``: ``isinstance(v, dict)`` leaves a
``dict[str, JSON]``, so code reading llama-server's JSON needs no ``cast`` and no
``Any``.
"""

from __future__ import annotations

from typing import TypeAlias, cast

from pydantic import JsonValue

__all__ = ["JSON", "JSONObject", "json_float", "json_int", "json_object"]

JSON: TypeAlias = JsonValue
"""Any JSON value: an object, an array, a string, a number, a boolean or null."""

JSONObject: TypeAlias = dict[str, JsonValue]
"""A JSON object (a request body, one of llama-server's events or answers)."""


def json_object(value: object) -> JSONObject | None:
    """``value`` as a JSON object when it is a ``dict``, else None.

    For a value decoded from JSON (``json.loads``, a test's literal), whose dicts hold
    JSON values only: the one place that claim is made rather than checked (a recursive
    check would cost a walk of the value on every streamed event).
    """
    return cast("JSONObject", value) if isinstance(value, dict) else None


def json_int(value: JSON) -> int:
    """``int(value)`` for a JSON number or string, as Python's ``int`` reads it.

    Raises:
        TypeError: an array, an object or null (as ``int`` raises for them).
        ValueError: a string that is not an integer.
    """
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"a JSON {type(value).__name__} is not a number")


def json_float(value: JSON) -> float:
    """``float(value)`` for a JSON number or string, as Python's ``float`` reads it.

    Raises:
        TypeError: an array, an object or null (as ``float`` raises for them).
        ValueError: a string that is not a number.
    """
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"a JSON {type(value).__name__} is not a number")
