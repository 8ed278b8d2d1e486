"""``fronde install``: build llama.cpp b11434 (Fronde's patch set applied) into the cache.

The work is :func:`fronde.runtime.install.install`; this module is the command line
around it: the options, a progress bar (or a line per 10 % off a TTY), and what was
built, from which patches, where.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fronde.cli_options import ConfigOpt, err, settings_from

__all__ = ["install_cmd"]


@contextmanager
def _progress_reporter() -> Generator[Callable[[int, int, str], None]]:
    """Yield a (done, total, message) callback: a live bar on a TTY, else a line per 10 %."""
    if err.is_terminal:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=err,
        ) as progress:
            task = progress.add_task("preparing", total=None, count="")

            def live(done: int, total: int, message: str) -> None:
                if total:
                    progress.update(
                        task,
                        completed=done,
                        total=total,
                        description="compiling",
                        count=f"{done}/{total}",
                    )
                else:
                    progress.update(task, description=message)

            yield live
        return
    last_decile = -1

    def plain(done: int, total: int, message: str) -> None:
        nonlocal last_decile
        if not total:
            err.print(message, markup=False, highlight=False, soft_wrap=True)
            return
        decile = done * 10 // total
        if decile != last_decile:
            last_decile = decile
            err.print(f"compiling: {done}/{total} ({decile * 10} %)", highlight=False)

    yield plain


def install_cmd(
    config: ConfigOpt = None,
    cuda: Annotated[bool, typer.Option(help="CUDA build (-DGGML_CUDA=ON)")] = False,
    cuda_arch: Annotated[
        str | None, typer.Option(help="CUDA architectures, e.g. 90 for H100/H200")
    ] = None,
    cmake_flag: Annotated[
        list[str] | None,
        typer.Option("--cmake-flag", help="extra CMake flag (repeatable)"),
    ] = None,
    jobs: Annotated[
        int | None, typer.Option(help="parallel compile jobs [default: all CPUs]")
    ] = None,
    patches: Annotated[
        bool,
        typer.Option(
            help="apply Fronde's llama.cpp patches (per-request speculation); "
            "--no-patches builds stock b11434"
        ),
    ] = True,
) -> None:
    """Build llama.cpp b11434's llama-server and llama-bench from source, into the cache."""
    from fronde.runtime.install import PATCH_DIR, build_key, cmake_flags
    from fronde.runtime.install import install as do_install
    from fronde.runtime.patches import PatchSet, load_patch_set

    settings = settings_from(config)
    flags = cmake_flags(cuda=cuda, cuda_arch=cuda_arch, extra=cmake_flag or ())
    patch_set = load_patch_set(PATCH_DIR) if patches else PatchSet()
    key = build_key(flags, patch_set.digest)
    err.print(f"llama.cpp b11434 → {settings.cache_dir / 'llama.cpp' / key}")
    with _progress_reporter() as on_progress:
        result = do_install(
            settings.cache_dir,
            cuda=cuda,
            cuda_arch=cuda_arch,
            extra_flags=cmake_flag or (),
            jobs=jobs,
            on_progress=on_progress,
            patches=patches,
        )
    how = "already built (cache hit)" if result.cached else f"built in {result.seconds:.0f} s"
    err.print(f"{result.llama_server}: {result.version_line} — {how}")
    if result.patches:
        line = f"patched with ({PATCH_DIR}): {', '.join(result.patches)}"
        err.print(line, highlight=False, soft_wrap=True)
    else:
        err.print("no patches: stock llama.cpp b11434", highlight=False)
