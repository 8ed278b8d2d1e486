"""The measured floor: the fastest Fronde mode on this machine, build and model.

``fronde bench verdict`` measures every Fronde mode forced on fresh servers
(workload A, first encounter) and saves the fastest, by total rate (Σ tokens ÷
Σ wall), in ``<cache_dir>/floors.json`` under a key naming the llama.cpp build, the
target GGUF and the CPU count. ``fronde serve`` reads it at start when
``router.floor = "auto"``: that mode is every class's starting floor
(:mod:`fronde.router.policy`). With no record for the key, the floor is ngram-mod
(Fronde's short-draft configuration), which was the fastest or within 0.06× of the
fastest single server in the four verdicts of 2026-12-01.

The file holds one JSON object, key → ``{"mode", "rates", "source", "at"}``, where
``rates`` are the measured total rates in tok/s per mode.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode
from fronde.router.policy import FALLBACK_FLOOR
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of

__all__ = [
    "FALLBACK_FLOOR",
    "FLOORS_FILE",
    "Floor",
    "calibration_key",
    "load_floor",
    "resolve_floor",
    "save_floor",
]

FLOORS_FILE = "floors.json"
"""The file under the cache folder that keeps measured floors."""


@dataclass(frozen=True)
class Floor:
    """A class's starting floor and where it came from.

    Attributes:
        mode: the floor.
        why: one line for the log, ``/fronde/v1/router`` and the live page.
    """

    mode: Mode
    why: str


def calibration_key(settings: Settings) -> str:
    """``<build folder>|<target GGUF>|<CPUs>cpu``: what a measured floor is valid for.

    The build folder (``b11434-cpu-…``, ``b11434-cuda-…``) tells a CPU build from a
    GPU one; a user's own ``llama_server`` binary stands by its path.

    Raises:
        FrondeError: llama-server is not installed, or the profile cannot be read.
    """
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    build = str(binary) if settings.llama_server is not None else binary.parent.parent.name
    model = settings.model.name if settings.model is not None else profile_of(settings).target.file
    return f"{build}|{model}|{os.cpu_count()}cpu"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cast("dict[str, Any]", data) if isinstance(data, dict) else {}


def load_floor(cache_dir: Path, key: str) -> Mode | None:
    """The floor measured for ``key``, or None (no file, no entry, an unknown mode)."""
    entry = _read(cache_dir / FLOORS_FILE).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        return Mode(cast("dict[str, Any]", entry).get("mode"))
    except ValueError:
        return None


def save_floor(cache_dir: Path, key: str, rates: dict[Mode, float], source: str) -> Mode:
    """Record the fastest of ``rates`` (tok/s per mode) as ``key``'s floor.

    Args:
        cache_dir: Fronde's cache folder.
        key: :func:`calibration_key` of the measured settings.
        rates: total rate per mode, tok/s; at least one.
        source: where they were measured (a run folder).

    Returns:
        The mode saved.

    Raises:
        ValueError: ``rates`` is empty.
    """
    if not rates:
        raise ValueError("no rate measured")
    best = max(rates, key=lambda m: rates[m])
    path = cache_dir / FLOORS_FILE
    data = _read(path)
    data[key] = {
        "mode": str(best),
        "rates": {str(m): round(r, 2) for m, r in rates.items()},
        "source": source,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return best


def resolve_floor(settings: Settings) -> Floor:
    """The starting floor ``settings.router.floor`` names (see the module docstring)."""
    setting = settings.router.floor
    if setting != "auto":
        return Floor(setting, f"{setting}: set by router.floor")
    try:
        key = calibration_key(settings)
    except FrondeError:
        return Floor(FALLBACK_FLOOR, f"{FALLBACK_FLOOR}: default (llama-server not found)")
    measured = load_floor(settings.cache_dir, key)
    if measured is None:
        return Floor(
            FALLBACK_FLOOR,
            f"{FALLBACK_FLOOR}: default, nothing measured for {key} "
            "(`fronde bench verdict` measures it)",
        )
    return Floor(measured, f"{measured}: fastest mode `fronde bench verdict` measured for {key}")
