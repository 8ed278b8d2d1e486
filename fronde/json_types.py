"""Names for free-form JSON: a request body's nested values, llama-server's answers.

pydantic's ``JsonValue``, a recursive union (object, array, string, number, boolean,
null) that a type checker narrows with ``isinstance``: ``isinstance(v, dict)`` leaves a
``dict[str, JSON]``, so code reading llama-server's JSON needs no ``cast`` and no
``Any``.
"""

from __future__ import annotations

from typing import TypeAlias

from pydantic import JsonValue

__all__ = ["JSON", "JSONObject"]

JSON: TypeAlias = JsonValue
"""Any JSON value: an object, an array, a string, a number, a boolean or null."""

JSONObject: TypeAlias = dict[str, JsonValue]
"""A JSON object (a request body, one of llama-server's events or answers)."""
