"""`fronde serve --model PATH.gguf`: a profile derived from a local file, checked first.

Small GGUFs are written with the `gguf` package (llama.cpp's writer): metadata only,
which is all the checks read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from fronde.config import load_settings
from fronde.errors import ConfigError
from fronde.runtime.local import (
    NotGgufError,
    VocabMismatchError,
    cached_sha256,
    check_draft,
    known_local_files,
    local_profile,
    profile_of,
)
from fronde.runtime.models import LocalSource, model_path

TOKENS = [f"tok{i}" for i in range(300)]


def write_gguf(path: Path, tokens: list[str], model: str = "gpt2", bos: int = 1) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(tokens)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_local_gguf_becomes_a_profile_with_a_cached_sha256(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "my model.gguf", TOKENS)
    profile = local_profile(model, None, "chatml", tmp_path / "cache")
    assert profile.name == "local:my model"
    assert (profile.chat_template, profile.draft) == ("chatml", None)
    t = profile.target
    assert isinstance(t.source, LocalSource) and t.source.path == str(model.resolve())
    assert t.size == model.stat().st_size
    assert model_path(tmp_path / "elsewhere", t) == model.resolve()
    assert known_local_files(tmp_path / "cache") == [(str(model.resolve()), t.sha256)]
    # Cached: a changed file under the same size and mtime keeps its digest; a new mtime does not.
    st = model.stat()
    model.write_bytes(model.read_bytes()[:-1] + b"\x01")
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cached_sha256(model.resolve(), tmp_path / "cache") == t.sha256
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert cached_sha256(model.resolve(), tmp_path / "cache") != t.sha256


def test_a_draft_of_the_same_vocabulary_is_accepted(tmp_path: Path) -> None:
    target = write_gguf(tmp_path / "t.gguf", TOKENS)
    draft = write_gguf(tmp_path / "d.gguf", TOKENS[:-100])  # 100 fewer: within 128
    profile = local_profile(target, draft, None, tmp_path)
    assert profile.draft is not None and profile.draft.name == "d"


@pytest.mark.parametrize(
    ("draft_tokens", "kwargs", "says"),
    [
        (TOKENS, {"model": "llama"}, "tokenizer 'llama' vs 'gpt2'"),
        (TOKENS, {"bos": 7}, "BOS token 7 vs 1"),
        (TOKENS[:100], {}, "vocabularies of 100 and 300 tokens"),
        ([*TOKENS[:10], "other", *TOKENS[11:]], {}, "token 10 is 'other' in the draft"),
    ],
)
def test_a_draft_of_another_vocabulary_is_one_line(
    tmp_path: Path, draft_tokens: list[str], kwargs: dict[str, object], says: str
) -> None:
    target = write_gguf(tmp_path / "t.gguf", TOKENS)
    draft = write_gguf(tmp_path / "d.gguf", draft_tokens, **kwargs)  # pyright: ignore[reportArgumentType]
    with pytest.raises(VocabMismatchError, match=f"--draft d.gguf cannot draft for t.gguf: {says}"):
        check_draft(target, draft)


def test_a_missing_file_or_a_file_that_is_not_gguf_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NotGgufError, match=r"--model .*nope.gguf: no such file"):
        local_profile(tmp_path / "nope.gguf", None, None, tmp_path)
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00{}")
    with pytest.raises(NotGgufError, match=r"not a GGUF file \(it starts with"):
        local_profile(bad, None, None, tmp_path)
    with pytest.raises(NotGgufError, match="a folder"):
        local_profile(tmp_path, None, None, tmp_path)
    good = write_gguf(tmp_path / "t.gguf", TOKENS)
    with pytest.raises(NotGgufError, match=r"--draft .*bad: no such file"):
        local_profile(good, tmp_path / "bad", None, tmp_path)


def test_settings_take_model_and_refuse_a_draft_alone(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "t.gguf", TOKENS)
    settings = load_settings(model=model, cache_dir=tmp_path)
    assert profile_of(settings).name == "local:t"
    with pytest.raises(ConfigError, match="draft and chat_template go with model"):
        load_settings(draft=model)


def fronde(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fronde", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


def test_cli_errors_are_one_line_and_models_list_shows_the_file(tmp_path: Path) -> None:
    env = {"FRONDE_CACHE_DIR": str(tmp_path / "cache")}
    r = fronde("serve", "--model", str(tmp_path / "missing.gguf"), env=env)
    assert r.returncode == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("fronde: error: --model ") and line.endswith(
        "missing.gguf: no such file"
    )
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    r = fronde("serve", "--model", str(text), env=env)
    [line] = r.stderr.strip().splitlines()
    assert "not a GGUF file" in line
    model = write_gguf(tmp_path / "t.gguf", TOKENS)
    r = fronde("models", "list", "--model", str(model), env=env)
    assert r.returncode == 0, r.stderr
    assert "* local:t:" in r.stdout and "target t.gguf (present) sha256" in r.stdout
    r = fronde("models", "list", env=env)  # served (hashed) once: still listed
    assert f"{model.resolve()} (present)" in r.stdout
