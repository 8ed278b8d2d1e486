"""A model and its own requantization: a target/draft pair made offline, to test the draft path.

The draft mode needs two models that share a vocabulary. Offline, with only the
shipped GGUFs, no two different models do; but a model and a requantization of it
do. :func:`self_draft_pair` writes the shipped 4-bit file out again as F16 with
llama.cpp's own ``llama-quantize --allow-requantize`` (built by ``fronde install``)
and pairs them: the F16 file is the target, the 4-bit file its draft.

**A test of the path, not a speed claim.** The F16 target holds exactly the 4-bit
weights, dequantized, so the draft agrees with the target almost everywhere (α near
1): such a pair proves that drafting, verification and the per-request fields work on
real parts, and its speed says nothing about a real draft model (a smaller model of
the same family, which agrees far less). docs/configuration.md, "The draft mode".

The output lives in the cache (``<cache>/requant/``), named by the source's stem, the
first 12 hex digits of its sha256 and the type, so it is made once per source
content: a changed source (a new sha256) gets a new file, the same source is never
requantized twice. The sha256 itself is cached by path, size and modification time
(:func:`fronde.runtime.local.cached_sha256`), so a second call reads nothing large.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from fronde.errors import FrondeError, InstallError, ToolMissingError
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import cached_sha256, check_gguf

__all__ = [
    "QUANTIZE_TIMEOUT_S",
    "REQUANT_DIR",
    "SELF_DRAFT_TARGET_TYPE",
    "SelfDraftPair",
    "requantize_once",
    "run_llama_quantize",
    "self_draft_pair",
]

REQUANT_DIR = "requant"
"""The folder under the cache that holds requantized GGUFs."""

SELF_DRAFT_TARGET_TYPE = "F16"
"""The type the target of a self-draft pair is written in: no precision is lost on top of
the source, so the target computes with the draft's own weights, at 16 bits."""

QUANTIZE_TIMEOUT_S = 600.0
"""Longest one llama-quantize run may take, s (SmolLM2-135M to F16: about 1 s on 2 cores;
an 8B model: about a minute)."""


@dataclass(frozen=True)
class SelfDraftPair:
    """A target and the draft it was made from (same vocabulary by construction).

    Attributes:
        target: the requantized GGUF (:data:`SELF_DRAFT_TARGET_TYPE`), in the cache.
        draft: the source GGUF, as given.
        made: True when this call ran llama-quantize, False when the target was there.
    """

    target: Path
    draft: Path
    made: bool

    @property
    def serve_args(self) -> list[str]:
        """``fronde serve`` arguments that serve the pair (``--model T --draft D``)."""
        return ["--model", str(self.target), "--draft", str(self.draft)]


def run_llama_quantize(llama_quantize: Path, source: Path, out: Path, qtype: str) -> None:
    """Write ``source`` as ``qtype`` to ``out`` with ``llama-quantize --allow-requantize``.

    The bytes go to ``out`` only once llama-quantize succeeded (through a ``.partial``
    file beside it), so a failed or interrupted run leaves nothing under ``out``.

    Args:
        llama_quantize: the llama-quantize executable.
        source: the GGUF to read (already quantized: hence ``--allow-requantize``).
        out: the GGUF to write.
        qtype: a llama-quantize type name (``F16``, ``Q4_0``, ...).

    Raises:
        FrondeError: llama-quantize failed or timed out (its last two lines).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    argv = [str(llama_quantize), "--allow-requantize", str(source), str(partial), qtype]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=QUANTIZE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        partial.unlink(missing_ok=True)
        raise FrondeError(f"llama-quantize {qtype} of {source} ran over {exc.timeout} s") from exc
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        raise FrondeError(f"llama-quantize {qtype} failed ({done.returncode}): {' | '.join(tail)}")
    partial.replace(out)


def requantize_once(
    source: Path,
    qtype: str,
    cache_dir: Path,
    llama_quantize: Path | None = None,
    what: str = "the source",
) -> tuple[Path, bool]:
    """``source`` requantized to ``qtype`` in ``<cache>/requant/``, made only if not there yet.

    Args:
        source: a GGUF file.
        qtype: a llama-quantize type name.
        cache_dir: Fronde's cache folder.
        llama_quantize: the tool; default the one ``fronde install`` built.
        what: how an error names ``source``.

    Returns:
        (path, made): ``<cache>/requant/<stem>.<sha12>.<qtype>.gguf``, and whether this
        call wrote it.

    Raises:
        NotGgufError: ``source`` is missing or not a GGUF.
        ToolMissingError: llama-quantize is not installed (one line: what to run).
        FrondeError: llama-quantize failed.
    """
    source = check_gguf(source, what)
    digest = cached_sha256(source, cache_dir)
    out = cache_dir / REQUANT_DIR / f"{source.stem}.{digest[:12]}.{qtype}.gguf"
    if out.is_file():
        return out, False
    if llama_quantize is None:
        try:
            llama_quantize = find_llama_binary(cache_dir, name="llama-quantize")
        except InstallError as exc:
            # find_llama_binary's own hint names FRONDE_LLAMA_SERVER, which is llama-server's
            raise ToolMissingError(
                f"making the {qtype} copy of {source.name} needs llama-quantize, which "
                "`fronde install` builds beside llama-server: run `fronde install`"
            ) from exc
    run_llama_quantize(llama_quantize, source, out, qtype)
    return out, True


def self_draft_pair(
    draft: Path, cache_dir: Path, llama_quantize: Path | None = None
) -> SelfDraftPair:
    """The F16 requantization of ``draft`` as the target, ``draft`` as its draft.

    A test of the draft path, not a speed claim (see the module's docstring).

    Args:
        draft: a quantized GGUF (e.g. the shipped SmolLM2-135M Q4_1).
        cache_dir: Fronde's cache folder; the target is written under it once.
        llama_quantize: the tool; default the one ``fronde install`` built.

    Raises:
        NotGgufError, ToolMissingError, FrondeError: as :func:`requantize_once`.
    """
    draft = check_gguf(draft, "the draft")
    target, made = requantize_once(draft, SELF_DRAFT_TARGET_TYPE, cache_dir, llama_quantize)
    return SelfDraftPair(target=target, draft=draft, made=made)
