"""What every ``fronde`` command shares: ``--config``, the settings it reads, the consoles.

:mod:`fronde.cli` and the commands kept beside it (``fronde batch``, the benchmark
commands in :mod:`fronde.bench.commands`) take ``--config`` the same way and read the
settings the same way, so a bad value is blamed on the flag that gave it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fronde.config import Settings, load_settings

__all__ = ["ConfigOpt", "console", "err", "settings_from"]

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML settings file (see config.example.toml)"),
]
"""The ``--config``/``-c`` option: a TOML settings file, or None for the defaults."""


def console(stderr: bool = False) -> Console:
    """A console; when writing to a file or pipe, wide enough not to break log lines."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)


err = console(stderr=True)
"""The console for progress, notes and the one-line errors, on stderr."""


def settings_from(
    config: Path | None, flags: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """The settings of ``config`` (file, env), with the overrides a command's flags gave.

    Args:
        config: the ``--config`` file, or None.
        flags: the flag of each override, by dotted field path, to blame a bad value on.
        overrides: field values; a None is a flag not given and overrides nothing.

    Raises:
        FrondeError: the file is missing or a value is out of bounds (see
            :func:`fronde.config.load_settings`).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    return load_settings(config, flags=flags, **given)
