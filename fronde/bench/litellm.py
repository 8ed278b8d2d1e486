"""LiteLLM's proxy, the other OpenAI-compatible proxy a user might put in front of llama-server.

Installed on first use into its own virtual environment under Fronde's cache
(``litellm[proxy]`` from PyPI), and run with one model, :data:`LITELLM_MODEL`, that
points at one llama-server's OpenAI endpoint: the ``litellm`` arm of a benchmark.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path

import httpx

from fronde.bench.serve import child
from fronde.errors import FrondeError
from fronde.serving import free_port

__all__ = ["LITELLM_MODEL", "LITELLM_SPEC", "litellm_proxy", "litellm_python"]

LITELLM_SPEC = "litellm[proxy]"
"""What the LiteLLM venv installs."""

LITELLM_MODEL = "fronde-bench"
"""The model name the proxy is configured with; requests through it must name it."""


def litellm_python(cache_dir: Path) -> Path:
    """The LiteLLM venv's Python, created and filled on first use (``pip install``).

    Raises:
        FrondeError: the install failed (no network, or PyPI refused).
    """
    venv = cache_dir / "litellm-venv"
    python = venv / "bin" / "python"
    if not (venv / "bin" / "litellm").is_file():
        print(f"installing {LITELLM_SPEC} into {venv} (first use, about a minute)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", LITELLM_SPEC],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise FrondeError(f"cannot install {LITELLM_SPEC}: {out.stderr.strip()[-300:]}")
    return python


@contextlib.contextmanager
def litellm_proxy(python: Path, backend_url: str, timeout_s: float = 120.0) -> Generator[str]:
    """Run LiteLLM's proxy for ``backend_url`` (OpenAI-compatible); yield its base URL.

    The model ``fronde-bench`` maps to ``openai/bench`` at ``backend_url/v1``. One
    worker, no database, logging at its default level.

    Raises:
        FrondeError: it exited, or did not answer within ``timeout_s``.
    """
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="fronde-litellm-"))
    config = folder / "config.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {LITELLM_MODEL}\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: {backend_url}/v1\n"
        "      api_key: none\n"
    )
    exe = python.parent / "litellm"
    argv = [str(exe), "--config", str(config), "--port", str(port), "--host", "127.0.0.1"]
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "true",
        # No key on either proxy (Fronde runs without api_keys here): loopback only.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200
        return False

    try:
        with child("litellm", argv, env, folder / "litellm.log", ready, timeout_s):
            yield base
    finally:
        shutil.rmtree(folder, ignore_errors=True)
