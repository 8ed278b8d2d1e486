"""The draft mode end to end on real parts: SmolLM2-135M F16 the target, its Q4_1 file the draft.

No two different models sharing a vocabulary are on this machine, but a model and its own
requantization are (:func:`fronde.runtime.requant.self_draft_pair`: the shipped Q4_1
written out as F16 with llama.cpp's ``llama-quantize --allow-requantize``). `fronde
serve --model F16 --draft Q4_1` then runs the draft mode for real, in both topologies.

**A test of the path, not a speed claim**: the target computes with the draft's own
weights at 16 bits, so nearly every draft is accepted (α near 1), which no real draft
model does. What is asserted is the plumbing: the draft model is started, it drafts,
the target verifies (at temperature 0 the draft mode says the plain decoder's text),
and on one llama-server the draft runs per request (``fronde:draft``) or not at all
(``fronde:baseline``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.capability import COPY_PROMPT
from fronde.config import load_settings
from fronde.errors import FrondeError
from fronde.runtime.models import load_profile, model_path
from fronde.runtime.requant import SelfDraftPair, self_draft_pair
from fronde.timings import Timings

from .conftest import SMOLLM2, Serve, require_real_parts, start_serve
from .test_single_real import patched_binary

pytestmark = pytest.mark.integration

MAX_TOKENS = 48
"""Tokens per answer: a few draft rounds on the copy prompt, a second or two on 2 cores."""

MODES = ("--mode", "baseline", "--mode", "draft")


@pytest.fixture(scope="module")
def pair() -> SelfDraftPair:
    """The shipped SmolLM2 Q4_1 as the draft, its F16 requantization (made once) as the target."""
    require_real_parts()
    settings = load_settings(profile=SMOLLM2)
    q4 = model_path(settings.models_dir, load_profile(settings.models_dir, SMOLLM2).target, SMOLLM2)
    try:
        return self_draft_pair(q4, settings.cache_dir)
    except FrondeError as exc:
        pytest.fail(f"the draft pair needs the installed llama-quantize: {exc.message}")


def answer(serve: Serve, mode: str) -> tuple[str, dict[str, Any]]:
    """A greedy completion of the copy prompt forced to ``fronde:<mode>``: (text, timings)."""
    body = {"prompt": COPY_PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}
    r = httpx.post(
        f"{serve.base_url}/v1/completions",
        json=body | {"model": f"fronde:{mode}"},
        timeout=300,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-fronde-mode"] == mode
    data: dict[str, Any] = r.json()
    return data["choices"][0]["text"], data["timings"]


def argv(pid: int) -> list[str]:
    """The command line of a running llama-server (Linux ``/proc``)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def flag(args: list[str], name: str) -> str | None:
    """The value after ``name`` in ``args``, or None."""
    return args[args.index(name) + 1] if name in args else None


def drafted(timings: dict[str, Any]) -> Timings:
    """The timings parsed, after checking that the draft model drafted and was verified."""
    t = Timings.parse(timings)
    assert t is not None, timings
    assert t.draft_n > 0 and 0 < t.draft_n_accepted <= t.draft_n, timings
    # The figures the report quotes (-s shows them): a path test, not a speed claim.
    print(f"draft_n {t.draft_n} accepted {t.draft_n_accepted} α {t.alpha:.3f} τ {t.tau:.2f}")
    return t


@pytest.fixture
def per_mode(tmp_path: Path, pair: SelfDraftPair) -> Iterator[Serve]:
    """`fronde serve --model F16 --draft Q4_1`: a llama-server for baseline, one for draft."""
    env = {"FRONDE_BACKEND__TOPOLOGY": "per-mode"}
    serve = start_serve(tmp_path, *pair.serve_args, *MODES, env=env)
    yield serve
    serve.stop()


@pytest.fixture
def single(tmp_path: Path, pair: SelfDraftPair) -> Iterator[Serve]:
    """The same on one patched llama-server (skips, saying why, on a stock binary)."""
    env = {"FRONDE_BACKEND__TOPOLOGY": "single", "FRONDE_LLAMA_SERVER": str(patched_binary())}
    serve = start_serve(tmp_path, *pair.serve_args, *MODES, env=env)
    yield serve
    serve.stop()


def test_the_pair_is_the_draft_and_its_f16_copy(pair: SelfDraftPair) -> None:
    assert pair.target.name.endswith(".F16.gguf") and pair.target.is_file()
    # F16 holds 4 bits a weight as 16: the copy is larger (SmolLM2: 271 MB against 98 MB).
    assert pair.target.stat().st_size > 2 * pair.draft.stat().st_size
    settings = load_settings()
    again = self_draft_pair(pair.draft, settings.cache_dir)
    assert (again.target, again.made) == (pair.target, False)  # made once, then reused


def test_per_mode_the_draft_server_drafts_and_says_the_baseline_text(
    per_mode: Serve, pair: SelfDraftPair
) -> None:
    health = per_mode.health()
    assert health["topology"] == "per-mode", health
    backends = health["backends"]
    draft_args, plain_args = argv(backends["draft"]["pid"]), argv(backends["baseline"]["pid"])
    assert flag(draft_args, "-m") == flag(plain_args, "-m") == str(pair.target)
    assert flag(draft_args, "--spec-draft-model") == str(pair.draft)
    assert flag(draft_args, "--spec-type") == "draft-simple"
    assert "--spec-draft-model" not in plain_args
    text, timings = answer(per_mode, "draft")
    drafted(timings)
    plain, plain_timings = answer(per_mode, "baseline")
    assert not plain_timings.get("draft_n")
    # Greedy: the target verifies every draft, so the text is the plain decoder's. The
    # draft mode verifies several tokens in one batch, whose float sums may differ from
    # one-token steps in the last bits; on this prompt no near-tie flips (checked).
    assert text == plain


def test_single_one_server_drafts_per_request_on_and_off(
    single: Serve, pair: SelfDraftPair
) -> None:
    health = single.health()
    assert health["topology"] == "single", health
    pids = {b["pid"] for b in health["backends"].values()}
    assert len(pids) == 1, health
    args = argv(pids.pop())
    assert flag(args, "-m") == str(pair.target)
    assert flag(args, "--spec-draft-model") == str(pair.draft)
    assert "draft-simple" in (flag(args, "--spec-type") or "").split(",")
    text, timings = answer(single, "draft")  # on: speculative.types ["draft-simple"]
    drafted(timings)
    plain, plain_timings = answer(single, "baseline")  # off: speculative.n_max 0
    assert not plain_timings.get("draft_n"), plain_timings
    assert plain_timings.get("draft_n_max") == 0, plain_timings
    assert text == plain
