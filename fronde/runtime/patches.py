"""Fronde's patch set on llama.cpp: found, hashed and applied to an unpacked tree.

The patches live beside this module, one folder per pinned build
(``fronde/runtime/patches/b11434/NNNN-short-name.patch``), as Ollama keeps its
changes to llama.cpp in ``llama/patches/``: one change per file, a header of ``# ``
lines (what, why, which upstream lines) before a ``git diff``, applied in name order.
``git apply`` skips the header as it skips any text before the first ``diff --git``.
They ship as package data (the wheel holds all of ``fronde/``), so an installed
``fronde`` finds them; ``docs/llama-patches.md`` says what each one does.

A tree the set was applied to holds :data:`MARKER` with the set's digest, so a
rebuild in the same cache folder never applies a patch twice, and a tree left
half-patched (a patch that failed) is unpacked afresh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fronde.errors import PatchFailedError, ToolMissingError

__all__ = ["MARKER", "PatchSet", "apply_patch_set", "load_patch_set", "patch_dir", "patched_with"]

MARKER = ".fronde-patches"
"""File in a patched llama.cpp tree: the digest of the set applied to it."""

_APPLY_TIMEOUT_S = 60.0
"""Longest one ``git apply`` may take, seconds (it takes milliseconds)."""


@dataclass(frozen=True)
class PatchSet:
    """The patch files of one build, in the order they apply.

    Attributes:
        files: the ``.patch`` files, sorted by name (``0001-…`` first); empty for a
            stock build.
    """

    files: tuple[Path, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The files' names, e.g. ``("0001-server-per-request-spec-n-max.patch", …)``."""
        return tuple(p.name for p in self.files)

    @property
    def digest(self) -> str:
        """sha256 (first 12 hex digits) of every name and content, in order; ``""`` if empty.

        Part of the build's cache key, so a changed patch builds afresh beside the old.
        """
        if not self.files:
            return ""
        h = hashlib.sha256()
        for p in self.files:
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
        return h.hexdigest()[:12]


def patch_dir(build: int) -> Path:
    """The folder holding the patches for llama.cpp build ``build`` (``patches/b<build>``)."""
    return Path(__file__).with_name("patches") / f"b{build}"


def load_patch_set(folder: Path) -> PatchSet:
    """The ``*.patch`` files of ``folder`` in name order; an empty set if there is none."""
    if not folder.is_dir():
        return PatchSet()
    return PatchSet(tuple(sorted(folder.glob("*.patch"))))


def patched_with(tree: Path) -> str | None:
    """The digest of the patch set applied to ``tree`` (its :data:`MARKER`), or None."""
    try:
        return (tree / MARKER).read_text().strip()
    except OSError:
        return None


def _require_git() -> str:
    """The path of ``git``.

    Raises:
        ToolMissingError: no git on PATH; the message says what to install.
    """
    git = shutil.which("git")
    if git is None:
        raise ToolMissingError(
            "git not found on PATH: install git (e.g. apt-get install git) to apply "
            "Fronde's llama.cpp patches, or build stock llama.cpp with "
            "`fronde install --no-patches`"
        )
    return git


def apply_patch_set(patches: PatchSet, tree: Path, log: Path) -> None:
    """Apply each patch of ``patches`` to ``tree`` with ``git apply``; mark the tree.

    ``git apply`` works outside a repository. ``GIT_CEILING_DIRECTORIES`` keeps it from
    finding one above ``tree`` (a cache folder inside a checkout), where it would take
    the patch's paths as relative to that repository's root. Each command and its
    output go to ``log``.

    Args:
        patches: the set to apply, in order.
        tree: an unpacked, unpatched llama.cpp tree (holds ``CMakeLists.txt``).
        log: the build log, appended to.

    Raises:
        ToolMissingError: no git on PATH.
        PatchFailedError: a patch does not apply; the message names it and the log.
    """
    if not patches.files:
        return
    git = _require_git()
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent.resolve())}
    for patch in patches.files:
        argv = [git, "apply", "--whitespace=nowarn", str(patch)]
        try:
            proc = subprocess.run(
                argv,
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=_APPLY_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PatchFailedError(f"patch {patch.name}: git apply failed: {exc}") from exc
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if ln.strip()), "")
            raise PatchFailedError(
                f"patch {patch.name} does not apply to {tree}: {first}; see the log: {log}"
            )
    (tree / MARKER).write_text(patches.digest + "\n")
