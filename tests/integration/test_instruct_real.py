"""The default profile answers chat, and any GGUF serves with `fronde serve --model PATH`.

Real parts: llama-server b11434 and SmolLM2-135M-Instruct Q4_1 (profile cpu-smollm2-135m).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from openai import OpenAI

from fronde.config import load_settings
from fronde.runtime.install import find_llama_binary
from fronde.runtime.models import load_profile, model_path

from .conftest import SMOLLM2, Serve, start_serve

pytestmark = pytest.mark.integration


def chat(serve: Serve, content: str, max_tokens: int = 32) -> tuple[str, str]:
    """The README's snippet: (x-fronde-class, answer)."""
    url = f"{serve.base_url}/v1"
    with OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="fronde",
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            temperature=0,
        )
    return raw.headers["x-fronde-class"], raw.parse().choices[0].message.content or ""


def is_sentence(text: str) -> bool:
    """Words, most of them different: an answer, not `10\\n10\\n10`."""
    words = text.split()
    return len(words) >= 3 and len(set(words)) > len(words) // 2


def test_the_readme_snippet_gets_an_answer_from_the_default_profile(tmp_path: Path) -> None:
    env = {"FRONDE_PROFILE": SMOLLM2}
    serve = start_serve(tmp_path, "--mode", "baseline", "--mode", "ngram-mod", env=env)
    try:
        for question in ("Name three colours.", "What is 2 + 2?"):
            route, text = chat(serve, question)
            assert route in ("probe", "cache", "predicted", "fallback")
            assert is_sentence(text), text
    finally:
        serve.stop()


def test_any_gguf_serves_with_model(tmp_path: Path) -> None:
    settings = load_settings()
    source = model_path(settings.models_dir, load_profile(settings.models_dir, SMOLLM2).target)
    folder = tmp_path / "my models"
    folder.mkdir()
    gguf = folder / "tiny chat.gguf"  # an arbitrary path, a space in it, no manifest
    shutil.copyfile(source, gguf)
    # Its own cache: the sha256 cache of the user's real ~/.cache/fronde stays untouched.
    env = {
        "FRONDE_CACHE_DIR": str(tmp_path / "cache"),
        "FRONDE_LLAMA_SERVER": str(find_llama_binary(settings.cache_dir, settings.llama_server)),
    }
    serve = start_serve(tmp_path, "--model", str(gguf), "--mode", "baseline", env=env)
    try:
        assert serve.health()["backends"]["baseline"]["state"] == "ready"
        _, text = chat(serve, "Say hello in one sentence.")
        assert is_sentence(text), text
    finally:
        serve.stop()
    listed = subprocess.run(
        [sys.executable, "-m", "fronde", "models", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **env},
    )
    assert f"{gguf} (present)" in listed.stdout
