"""Any local GGUF with one flag: ``fronde serve --model PATH.gguf [--draft PATH.gguf]``.

A profile is derived from the files, with no manifest: its name from the file, its
sha256 computed once and cached (``<cache>/gguf-sha256.json``, keyed by path, size
and modification time), no source to fetch from. Before any llama-server starts,
each file must exist and be a GGUF (the four magic bytes ``GGUF``), and a draft must
share the target's vocabulary by llama.cpp's own rule (``common/speculative.cpp``,
``common_speculative_are_compatible``, b11434): the same tokenizer model, the same
BOS/EOS when they are added, at most ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128`` tokens
apart in size, and the same token texts from id ``SPEC_VOCAB_CHECK_START_TOKEN_ID = 5``
on. llama-server only warns and drafts nothing otherwise; Fronde says what to fix.
The metadata is read with the ``gguf`` package (llama.cpp's own reader, on PyPI).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fronde.config import Settings
from fronde.errors import ModelError
from fronde.json_types import JSONObject
from fronde.logging import get_logger
from fronde.runtime.models import LocalSource, ModelEntry, Profile, load_profile, sha256_file

__all__ = [
    "BUILTIN_CHAT_TEMPLATES",
    "GGUF_MAGIC",
    "SPEC_VOCAB_CHECK_START_TOKEN_ID",
    "SPEC_VOCAB_MAX_SIZE_DIFFERENCE",
    "NotGgufError",
    "VocabMismatchError",
    "cached_sha256",
    "check_chat_template",
    "check_draft",
    "check_gguf",
    "has_chat_template",
    "known_local_files",
    "local_profile",
    "profile_of",
]

log = get_logger(__name__)

GGUF_MAGIC = b"GGUF"
"""The first four bytes of every GGUF file (GGUF specification, "File Structure")."""

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
"""Largest vocabulary size difference llama.cpp accepts between target and draft, tokens."""

SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
"""From this id on, llama.cpp compares the target's and the draft's token texts."""

BUILTIN_CHAT_TEMPLATES = frozenset(
    {
        "chatml",
        "llama2",
        "llama2-sys",
        "llama2-sys-bos",
        "llama2-sys-strip",
        "mistral-v1",
        "mistral-v3",
        "mistral-v3-tekken",
        "mistral-v7",
        "mistral-v7-tekken",
        "phi3",
        "phi4",
        "falcon3",
        "zephyr",
        "monarch",
        "gemma",
        "orion",
        "openchat",
        "vicuna",
        "vicuna-orca",
        "deepseek",
        "deepseek2",
        "deepseek3",
        "deepseek-ocr",
        "command-r",
        "llama3",
        "chatglm3",
        "chatglm4",
        "glmedge",
        "minicpm",
        "exaone3",
        "exaone4",
        "exaone-moe",
        "rwkv-world",
        "granite",
        "granite-4.0",
        "granite-4.1",
        "gigachat",
        "megrez",
        "yandex",
        "bailing",
        "bailing-think",
        "bailing2",
        "llama4",
        "smolvlm",
        "hunyuan-moe",
        "gpt-oss",
        "hunyuan-dense",
        "hunyuan-vl",
        "kimi-k2",
        "seed_oss",
        "grok-2",
        "pangu-embedded",
        "solar-open",
    }
)
"""llama.cpp b11434's built-in chat template names (``LLM_CHAT_TEMPLATES`` in
``src/llama-chat.cpp``); llama-server refuses to start with any other name."""

SHA_CACHE = "gguf-sha256.json"
"""The sha256 cache's file name under the cache folder."""


class NotGgufError(ModelError):
    """The file given is missing or is not a GGUF."""


class VocabMismatchError(ModelError):
    """The draft model's vocabulary differs from the target's."""


def check_gguf(path: Path, what: str = "--model") -> Path:
    """Return ``path`` resolved, after checking that it is a GGUF file.

    Raises:
        NotGgufError: the file is missing, a folder, unreadable, or not a GGUF.
    """
    path = path.expanduser()
    if not path.exists():
        raise NotGgufError(f"{what} {path}: no such file")
    if not path.is_file():
        raise NotGgufError(f"{what} {path}: a folder, not a .gguf file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise NotGgufError(f"{what} {path}: cannot be read ({exc.strerror})") from exc
    if magic != GGUF_MAGIC:
        raise NotGgufError(
            f"{what} {path}: not a GGUF file (it starts with {magic!r}, not b'GGUF'); "
            "convert it with llama.cpp's convert_hf_to_gguf.py or pick the .gguf file"
        )
    return path.resolve()


@dataclass(frozen=True)
class _Vocab:
    model: str
    add_bos: bool
    bos: int | None
    add_eos: bool
    eos: int | None
    tokens: list[str]


def _vocab(path: Path) -> _Vocab:
    from gguf import GGUFReader  # heavy import (numpy memmap): only for a draft check

    fields = GGUFReader(path).fields

    def value(key: str) -> Any:
        field = fields.get(key)
        return None if field is None else field.contents()

    tokens = value("tokenizer.ggml.tokens")
    return _Vocab(
        model=str(value("tokenizer.ggml.model") or ""),
        add_bos=bool(value("tokenizer.ggml.add_bos_token")),
        bos=value("tokenizer.ggml.bos_token_id"),
        add_eos=bool(value("tokenizer.ggml.add_eos_token")),
        eos=value("tokenizer.ggml.eos_token_id"),
        tokens=[str(t) for t in cast("list[Any]", tokens)] if isinstance(tokens, list) else [],
    )


def check_draft(target: Path, draft: Path) -> None:
    """Check that ``draft`` can draft for ``target`` (llama.cpp's compatibility rule).

    Raises:
        VocabMismatchError: one line naming the first difference.
    """
    t, d = _vocab(target), _vocab(draft)
    where = f"--draft {draft.name} cannot draft for --model {target.name}"
    fix = "use a draft model of the same family as the target"
    if t.model != d.model:
        raise VocabMismatchError(
            f"{where}: its tokenizer is {d.model!r}, the target's {t.model!r}; {fix}"
        )
    if t.add_bos != d.add_bos or (t.add_bos and t.bos != d.bos):
        raise VocabMismatchError(f"{where}: its BOS token is {d.bos}, the target's {t.bos}; {fix}")
    if t.add_eos != d.add_eos or (t.add_eos and t.eos != d.eos):
        raise VocabMismatchError(f"{where}: its EOS token is {d.eos}, the target's {t.eos}; {fix}")
    diff = abs(len(t.tokens) - len(d.tokens))
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        raise VocabMismatchError(
            f"{where}: its vocabulary has {len(d.tokens)} tokens, the target's {len(t.tokens)} "
            f"(more than {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} apart); {fix}"
        )
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(len(t.tokens), len(d.tokens))):
        if t.tokens[i] != d.tokens[i]:
            raise VocabMismatchError(
                f"{where}: token {i} is {d.tokens[i]!r} in the draft, {t.tokens[i]!r} in the "
                f"target; {fix}"
            )


def has_chat_template(path: Path) -> bool:
    """Whether the GGUF at ``path`` carries a chat template (``tokenizer.chat_template``)."""
    from gguf import GGUFReader  # heavy import (numpy memmap): only for --model

    return GGUFReader(path).fields.get("tokenizer.chat_template") is not None


def check_chat_template(name: str) -> str:
    """Return ``name`` after checking it is a llama.cpp built-in name or a readable .jinja file.

    Raises:
        ModelError: a ``.jinja`` file that does not exist, or an unknown built-in name.
    """
    if name.endswith(".jinja"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelError(f"--chat-template {name}: no such file")
        return str(path.resolve())
    if name not in BUILTIN_CHAT_TEMPLATES:
        close = difflib.get_close_matches(name, sorted(BUILTIN_CHAT_TEMPLATES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ModelError(
            f"--chat-template {name!r} is not a llama.cpp built-in template; {hint}give a "
            f".jinja file or one of: {', '.join(sorted(BUILTIN_CHAT_TEMPLATES))}"
        )
    return name


def cached_sha256(path: Path, cache_dir: Path) -> str:
    """The sha256 of ``path``, computed once per (path, size, modification time)."""
    store = cache_dir / SHA_CACHE
    try:
        known: JSONObject = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    st = path.stat()
    key = str(path)
    raw = known.get(key)
    hit: JSONObject = raw if isinstance(raw, dict) else {}
    if hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
        return str(hit["sha256"])
    digest = sha256_file(path)
    known = {k: v for k, v in known.items() if Path(k).is_file()}  # forget deleted files
    known[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    store.parent.mkdir(parents=True, exist_ok=True)
    tmp = store.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1))
    tmp.replace(store)
    return digest


def known_local_files(cache_dir: Path) -> list[tuple[str, str]]:
    """The local GGUFs whose sha256 was computed here: (path, sha256), sorted by path."""
    try:
        known: JSONObject = json.loads((cache_dir / SHA_CACHE).read_text())
    except (OSError, ValueError):
        return []
    return sorted(
        (path, str(v.get("sha256", ""))) for path, v in known.items() if isinstance(v, dict)
    )


def _entry(role: str, path: Path, cache_dir: Path) -> ModelEntry:
    stem = path.name.removesuffix(".gguf")
    return ModelEntry.model_validate(
        {
            "role": role,
            "name": stem,
            "file": re.sub(r"[^A-Za-z0-9._-]", "_", stem) + ".gguf",
            "size": path.stat().st_size,
            "sha256": cached_sha256(path, cache_dir),
            "license": "as its author says (a local file)",
            "source": LocalSource(kind="local", path=str(path)),
        }
    )


def local_profile(
    model: Path, draft: Path | None, chat_template: str | None, cache_dir: Path
) -> Profile:
    """The profile of a local GGUF (and draft), derived with no manifest.

    Args:
        model: the target GGUF.
        draft: a draft GGUF sharing the target's vocabulary, or None.
        chat_template: a llama.cpp built-in template name or a Jinja file, or None
            for the GGUF's own.
        cache_dir: where the sha256 cache lives.

    Raises:
        NotGgufError: a file is missing or not a GGUF.
        VocabMismatchError: the draft's vocabulary differs from the target's.
        ModelError: ``chat_template`` is neither a built-in name nor an existing file.
    """
    target = check_gguf(model, "--model")
    if chat_template is not None:
        chat_template = check_chat_template(chat_template)
    elif not has_chat_template(target):
        # llama-server then falls back to ChatML, which a model trained on other turns
        # reads as text (a trial's gemma answered "Say hello.<|im_end|>...").
        log.warning(
            "model.no_chat_template",
            model=str(target),
            fallback="chatml",
            fix="pass --chat-template NAME (e.g. gemma) or a .jinja file; "
            "completions (/v1/completions) need none",
        )
    models = [_entry("target", target, cache_dir)]
    if draft is not None:
        d = check_gguf(draft, "--draft")
        check_draft(target, d)
        models.append(_entry("draft", d, cache_dir))
    name = "local:" + target.name.removesuffix(".gguf")
    return Profile(
        name=name,
        description=f"{target} (local file)",
        chat_template=chat_template,
        models=models,
    )


def profile_of(settings: Settings) -> Profile:
    """The profile ``settings`` serve: derived from ``model`` if set, else the manifest.

    Raises:
        NotGgufError, VocabMismatchError: a ``model`` or ``draft`` that cannot be served.
        ManifestError: the named profile does not exist or is malformed.
    """
    if settings.model is not None:
        return local_profile(
            settings.model, settings.draft, settings.chat_template, settings.cache_dir
        )
    return load_profile(settings.models_dir, settings.profile)
