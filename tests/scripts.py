"""Load a file under ``scripts/`` as a module, for the tests of those scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root."""


def load_script(relative: str) -> ModuleType:
    """The module of ``scripts/<relative>`` (``gpu/hop_probe.py``), registered by its stem.

    Raises:
        FileNotFoundError: no such script.
    """
    path = ROOT / "scripts" / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
