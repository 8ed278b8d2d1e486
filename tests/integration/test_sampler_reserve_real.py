"""Patch 0007 on real parts: a request that samples on the backend recreates no scheduler.

Real parts: the llama-server `fronde install` built (patched by default; the test skips,
saying so, on a stock build) serving SmolLM2-135M as Fronde's ngram-mod server, whose
outputs are sized for ``1 + n_max`` a sequence, so a scheduler reserve there is the
costly one (docs/llama-patches.md). b11434 reserved once a request (the slot dropped
the last chain, then attached the new one: each asked for a reserve before the next
decode); the patched build reserves when the chains attached outgrow the last reserve,
i.e. once for one slot. ``llama-server -lv 5`` logs
each reserve as ``sched_reserve: reserve took … ms``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.capability import PER_REQUEST_FLAG
from fronde.modes import Mode

from .conftest import SMOLLM2, patched_server
from .test_per_request_spec_real import server_argv

pytestmark = pytest.mark.integration

RESERVE = "sched_reserve: reserve took"
"""The line b11434's ``llama_context::sched_reserve`` logs at the end of each reserve."""

LISTENING = "listening on"
"""The server's line once it is ready: reserves after it are the requests' own."""


@pytest.fixture(scope="module")
def verbose_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """SmolLM2 as Fronde's ngram-mod server, one slot, logging at verbosity 5: (URL, log)."""
    log = tmp_path_factory.mktemp("reserve") / "server.log"
    argv = [*server_argv(SMOLLM2, Mode.NGRAM_MOD, ("-np", "1", "-lv", "5"))]
    with patched_server(argv, log, PER_REQUEST_FLAG) as base:
        yield base, log


def reserves_after_start(log: Path) -> int:
    """How many scheduler reserves ``log`` shows after the server said it was listening."""
    text = log.read_text(errors="replace")
    return text[text.index(LISTENING) :].count(RESERVE)


def backend_sampled(base: str, **fields: Any) -> str:
    """The text of a short /completion sampled on the backend, with ``fields``."""
    body = {
        "prompt": "List three colours of the rainbow:",
        "n_predict": 12,
        "backend_sampling": True,
        "speculative.n_max": 0,
        "cache_prompt": False,
    }
    r = httpx.post(base + "/completion", json=body | fields, timeout=120)
    assert r.status_code == 200, r.text
    text: str = r.json()["content"]
    return text


def test_backend_sampled_requests_reserve_once_for_one_slot(
    verbose_server: tuple[str, Path],
) -> None:
    """Six requests in a row on one slot reserve at most once, and answer alike.

    The same greedy request gives the same text each time, and a seeded one at
    temperature 0.8 too: a new chain that reuses the reserve (and may sit where the
    last one was freed) is the one the graph samples with.
    """
    base, log = verbose_server
    before = reserves_after_start(log)
    greedy = {backend_sampled(base, temperature=0) for _ in range(3)}
    seeded = {backend_sampled(base, temperature=0.8, seed=7) for _ in range(3)}
    reserves = reserves_after_start(log) - before
    assert reserves <= 1, f"{reserves} scheduler reserves for 6 requests (b11434: one a request)"
    assert len(greedy) == 1, greedy
    assert len(seeded) == 1, seeded
