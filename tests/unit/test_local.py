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
from structlog.testing import capture_logs

from fronde.backends.pool import plan_pool
from fronde.config import load_settings
from fronde.errors import ConfigError, ModelError
from fronde.modes import Mode
from fronde.runtime.local import (
    NotGgufError,
    VocabMismatchError,
    cached_sha256,
    check_draft,
    has_chat_template,
    known_local_files,
    local_profile,
    profile_of,
)
from fronde.runtime.models import LocalSource, model_path

TOKENS = [f"tok{i}" for i in range(300)]


def write_gguf(
    path: Path, tokens: list[str], model: str = "gpt2", bos: int = 1, template: str | None = None
) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    if template is not None:
        w.add_chat_template(template)
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
        (TOKENS, {"model": "llama"}, "its tokenizer is 'llama', the target's 'gpt2'"),
        (TOKENS, {"bos": 7}, "its BOS token is 7, the target's 1"),
        (TOKENS[:100], {}, "its vocabulary has 100 tokens, the target's 300"),
        ([*TOKENS[:10], "other", *TOKENS[11:]], {}, "token 10 is 'other' in the draft"),
    ],
)
def test_a_draft_of_another_vocabulary_is_one_line(
    tmp_path: Path, draft_tokens: list[str], kwargs: dict[str, object], says: str
) -> None:
    target = write_gguf(tmp_path / "t.gguf", TOKENS)
    draft = write_gguf(tmp_path / "d.gguf", draft_tokens, **kwargs)  # pyright: ignore[reportArgumentType]
    with pytest.raises(VocabMismatchError) as err:
        check_draft(target, draft)
    assert str(err.value).startswith(f"--draft d.gguf cannot draft for --model t.gguf: {says}")
    assert str(err.value).endswith("; use a draft model of the same family as the target")


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
    with pytest.raises(ConfigError) as err:
        load_settings(draft=model)
    assert str(err.value) == "--draft needs --model PATH.gguf"
    with pytest.raises(ConfigError) as both:
        load_settings(draft=model, chat_template="chatml")
    assert str(both.value) == "--draft and --chat-template need --model PATH.gguf"


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


def test_model_and_profile_together_is_one_line(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "t.gguf", TOKENS)
    env = {"FRONDE_CACHE_DIR": str(tmp_path / "cache")}
    r = fronde("serve", "--model", str(model), "--profile", "cpu-gemma-270m", env=env)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "fronde: error: give --model PATH.gguf or --profile NAME, not both"
    ]


def test_a_draft_without_a_model_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    env = {"FRONDE_CACHE_DIR": str(tmp_path / "cache")}
    r = fronde("serve", "--draft", str(tmp_path / "d.gguf"), env=env)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["fronde: error: --draft needs --model PATH.gguf"]


def test_the_sha256_cache_forgets_deleted_files(tmp_path: Path) -> None:
    first = write_gguf(tmp_path / "a.gguf", TOKENS).resolve()
    second = write_gguf(tmp_path / "b.gguf", TOKENS[:-1]).resolve()
    cached_sha256(first, tmp_path / "cache")
    first.unlink()
    digest = cached_sha256(second, tmp_path / "cache")
    assert known_local_files(tmp_path / "cache") == [(str(second), digest)]


def test_a_chat_template_is_a_built_in_name_or_an_existing_file(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "t.gguf", TOKENS)
    assert local_profile(model, None, "chatml", tmp_path).chat_template == "chatml"
    jinja = tmp_path / "mine.jinja"
    jinja.write_text("{{ messages[0].content }}")
    assert local_profile(model, None, str(jinja), tmp_path).chat_template == str(jinja)
    with pytest.raises(ModelError, match=r"^--chat-template .*gone.jinja: no such file$"):
        local_profile(model, None, str(tmp_path / "gone.jinja"), tmp_path)
    with pytest.raises(ModelError) as err:
        local_profile(model, None, "chatmll", tmp_path)
    assert str(err.value).startswith(
        "--chat-template 'chatmll' is not a llama.cpp built-in template; did you mean 'chatml'?"
    )
    assert "chatml, command-r," in str(err.value)


def test_a_local_model_without_a_draft_says_which_flag_adds_one(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "t.gguf", TOKENS)
    settings = load_settings(model=model, cache_dir=tmp_path)
    plan = plan_pool(settings, profile_of(settings), Path("/bin/llama-server"), tmp_path)
    assert plan.left_out[Mode.DRAFT].startswith("no --draft given")


def test_a_gguf_without_a_chat_template_is_served_with_a_warning(tmp_path: Path) -> None:
    bare = write_gguf(tmp_path / "base.gguf", TOKENS)
    chat = write_gguf(tmp_path / "chat.gguf", TOKENS, template="{{ messages[0].content }}")
    assert (has_chat_template(bare), has_chat_template(chat)) == (False, True)
    with capture_logs() as logs:
        local_profile(bare, None, None, tmp_path)
        local_profile(bare, None, "gemma", tmp_path)  # a template given: no warning
        local_profile(chat, None, None, tmp_path)  # its own template: no warning
    [warning] = [e for e in logs if e["event"] == "model.no_chat_template"]
    assert warning["log_level"] == "warning" and "--chat-template" in warning["fix"]
