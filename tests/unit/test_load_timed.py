"""Timed load blocks: what a user receives in a window, counted whole, loops apart.

An outside client's check of the H200 runs (gemma, the agent mix, c = 1) found the
plain server at 314 tok/s where every token counted gives 629–644: the tokens of the 23
items that looped in some arm were left out of the numerator while their requests
still filled the window, and at c = 32 the window was the first 1.2 s burst.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.bench import passes
from fronde.bench.arms import Target
from fronde.bench.load import PINNED, load_setup
from fronde.bench.load_mix import distinct_workload, load_mix
from fronde.bench.load_page import load_markdown
from fronde.bench.load_rows import load_rows
from fronde.bench.load_verdict import ratio_lines, ratio_sets
from fronde.bench.passes import Timed, timed_pass, window_counts
from fronde.bench.workloads import Item, Workload
from fronde.config import Settings
from fronde.errors import FrondeError


def _timed(arm: str, item: str, tokens: int, ev: list[int], **kw: Any) -> dict[str, Any]:
    """A timed sample of c = 2, repetition 0, window [1, 3] s."""
    base: dict[str, Any] = {
        "arm": arm,
        "level": "c2",
        "rep": 0,
        "item": item,
        "t0": 1.5,
        "wall_s": 1.0,
        "ttft_s": 0.1,
        "tokens": tokens,
        "ok": True,
        "repetition": 0.1,
        "route": {},
        "win": [1.0, 3.0],
        "ev": ev,
        "pass": 0,
    }
    return base | kw


def test_a_looping_answer_stays_in_tok_s_and_its_share_is_reported_apart() -> None:
    samples = [
        _timed("plain", "a", 10, [0, 10, 0]),
        # 100 tokens, half of its events inside the window: 50 counted.
        _timed("plain", "loop", 100, [0, 50, 50], repetition=0.9),
        # Sent before the window: the 10 events that came in it count.
        _timed("plain", "b", 20, [10, 10, 0], t0=0.5),
        # The same prompt again, later in the block.
        _timed("plain", "a", 10, [0, 10, 0], t0=2.0, **{"pass": 1}),
        # All of it in the warm-up: neither its tokens nor its latency count.
        _timed("plain", "c", 5, [5, 0, 0], t0=0.1, wall_s=0.5),
    ]
    [row] = load_rows(samples, ["loop"])
    assert row.tok_s == pytest.approx((10 + 50 + 10 + 10) / 2.0)
    assert row.loop_share == pytest.approx(50 / 80, abs=1e-3)
    assert row.tok_s_noloop == pytest.approx(30 / 2.0)
    assert row.repeat_share == pytest.approx(10 / 80, abs=1e-3)
    assert row.window_s == pytest.approx(2.0) and row.rule == "timed"
    assert row.n == 4  # the requests in flight in the window (b from the warm-up on)
    page = load_markdown([row], ["loop"], "t", {}, None)
    assert "| 2 | plain | 40 | [40, 40] | 62% | 15 | 12% |" in page
    assert "Looping answers, counted in tok/s and reported apart" in page


def test_window_counts_leave_out_what_arrived_before_the_warm_up_ended_or_after_it() -> None:
    assert window_counts([0.1, 0.2, 1.0, 1.5, 2.0, 2.5], 1.0, 2.0) == [2, 3, 1]


class _Events(httpx.AsyncByteStream):
    """An SSE answer of ``n`` text events ``gap_s`` apart, then usage and ``[DONE]``."""

    def __init__(self, n: int, gap_s: float) -> None:
        self.n, self.gap_s = n, gap_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.n):
            await asyncio.sleep(self.gap_s)
            yield b'data: {"choices": [{"delta": {"content": "w "}}]}\n\n'
        usage: dict[str, Any] = {"choices": [], "usage": {"completion_tokens": self.n}}
        yield f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()


def _fake_http(bodies: list[dict[str, Any]]) -> Callable[[int], httpx.AsyncClient]:
    """``keepalive_http`` over a transport that keeps each body and streams 5 events."""

    async def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, stream=_Events(5, 0.02))

    return lambda _n: httpx.AsyncClient(transport=httpx.MockTransport(answer))


@pytest.mark.anyio
async def test_a_timed_block_counts_arrivals_in_its_window_and_pins_each_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bodies: list[dict[str, Any]] = []
    monkeypatch.setattr(passes, "keepalive_http", _fake_http(bodies))
    items = tuple(
        Item(f"i{k}", "d", f"p{k}", ({"role": "user", "content": f"p{k}"},)) for k in range(2)
    )
    records: list[dict[str, Any]] = []
    timed = Timed(warmup_s=0.2, window_s=0.5, history=4)
    await timed_pass(
        Target("http://fake", {}), "chat", 16, Workload("w", items), 3, timed,
        level="c3", pin=True, emit=records.append,
    )  # fmt: skip
    history, sent = bodies[:4], bodies[4:]
    assert [b["messages"][0]["content"] for b in history] == [
        f"Say hello to visitor number {k}." for k in range(4)
    ]
    assert all("id_slot" not in b for b in history)  # the server places those itself
    assert len(records) == len(sent) >= 6
    for rec, body in zip(sorted(records, key=lambda r: r["order"]), sent, strict=False):
        assert body["id_slot"] == rec["client"]  # client k names slot k
    assert {r["client"] for r in records} == {0, 1, 2}
    assert {r["pass"] for r in records} >= {0, 1}  # round the two items again
    assert all(r["win"] == [0.2, 0.7] for r in records)
    # The answers streaming when the window closed were cut off there, one per client:
    # their events so far count, one token each; every other answer has its 5.
    cut = [r for r in records if r.get("cut_off")]
    assert len(cut) == 3 and all(r["ev"][2] == 0 and r["tokens"] == sum(r["ev"]) for r in cut)
    assert all(sum(r["ev"]) == r["tokens"] == 5 for r in records if r not in cut)
    assert max(r["t0"] for r in records) <= 0.7  # none sent after the window
    # 3 clients, each an event every 20 ms (a few ms between answers): about 25 events a
    # client in the 0.5 s window.
    inside = sum(r["ev"][1] for r in records)
    assert 50 <= inside <= 75
    [row] = load_rows([{**r, "arm": "pinned", "rep": 0} for r in records], [])
    assert row.tok_s == pytest.approx(inside / 0.5)


@pytest.mark.anyio
async def test_once_ends_the_window_at_the_last_request_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(passes, "keepalive_http", _fake_http([]))
    items = tuple(
        Item(f"i{k}", "d", f"p{k}", ({"role": "user", "content": f"p{k}"},)) for k in range(3)
    )
    records: list[dict[str, Any]] = []
    await timed_pass(
        Target("http://fake", {}), "chat", 16, Workload("w", items), 1, Timed(0.0, 5.0, once=True),
        level="", pin=False, emit=records.append,
    )  # fmt: skip
    assert [r["item"] for r in records] == ["i0", "i1", "i2"]
    last = max(r["t0"] for r in records)
    assert all(r["cut"] and r["win"][1] == pytest.approx(last, abs=1e-3) for r in records)
    [row] = load_rows([{**r, "arm": "plain", "rep": 0} for r in records], [])
    assert row.rule == "cut" and row.window_s is not None and row.window_s < 1.0
    assert "`*` window cut" in load_markdown([row], [], "t", {}, None)


def test_distinct_prompts_are_the_same_every_time_and_never_repeat() -> None:
    one, two = distinct_workload(), distinct_workload()
    assert one == two and len(one.items) == 1536
    texts = [i.messages[-1]["content"] for i in one.items]
    assert len(set(texts)) == len(texts) and len({i.id for i in one.items}) == len(texts)
    assert all(i.max_tokens is None for i in one.items)  # the run's budget, 128 by default
    assert len({i.domain for i in one.items[:48]}) > 12  # shuffled, not template by template
    kept = load_mix("distinct", 5, skip=[one.items[0].id])
    assert [i.id for i in kept.items] == [i.id for i in one.items[1:6]]


def _ratio_samples(arm: str, tokens: int) -> list[dict[str, Any]]:
    return [_timed(arm, i, tokens, [0, tokens, 0], session="A") for i in ("a", "b")]


def test_the_page_tells_placement_from_routing() -> None:
    # c = 2, window 2 s: plain 10 tok/s, pinned 20, fr-plain 18, router-b 24.
    samples = [
        *_ratio_samples("plain", 10),
        *_ratio_samples("pinned", 20),
        *_ratio_samples("fr-plain", 18),
        *_ratio_samples("router-b", 24),
    ]
    ratios = ratio_sets(samples, [], ["plain", "pinned", "fr-plain", "router-b"])
    flat = {label: by_c[2] for kind in ratios.values() for label, by_c in kind.items()}
    assert flat == pytest.approx(
        {
            "pinned ÷ plain": 2.0,
            "fr-plain ÷ plain": 1.8,
            "router-b ÷ fr-plain": 24 / 18,
            "router-b ÷ pinned": 1.2,
            "router-b ÷ plain": 2.4,
        }
    )
    assert list(ratios) == ["placement", "routing", "together"]
    assert list(ratios["routing"]) == ["router-b ÷ fr-plain", "router-b ÷ pinned"]
    text = "\n".join(ratio_lines(ratios))
    placement, routing = text.index("What slot placement gives"), text.index("What routing adds")
    assert placement < text.index("- pinned ÷ plain: c=2 2.00×") < routing
    assert routing < text.index("- router-b ÷ pinned: c=2 1.20×") < text.index("Both together")


def test_the_load_arms_pinned_plain_nobs_and_their_own_concurrencies(
    fake_gemma: Callable[[int], Settings],
) -> None:
    from fronde.bench.arms import static_argv

    base = fake_gemma(400)
    backend = base.backend.model_copy(update={"plain_args": ["--backend-sampling"]})
    settings = base.model_copy(update={"backend": backend})
    timed = Timed(3.0, 20.0)
    arms = {"plain": None, "pinned": None, "plain-nobs": (1, 8), "router-b": None}
    setup = load_setup(settings, "chat", 16, 1, (1, 2, 8), 8, 3, arms=arms, timed=timed)
    # router-b brings the calibration arms of its speculative modes (pinned: baseline's).
    assert [a.name for a in setup.static.arms] == ["plain", "s-simple", "s-mod", "s-casc", "pinned"]
    assert [a.name for a in setup.router.arms] == ["router-b"]
    assert setup.notes == ("--arm: the router arms' calibration added: s-simple, s-mod, s-casc",)
    [(part, own)] = [(k, p) for k, p in setup.more if p.arms]
    assert part == "static" and [a.name for a in own.arms] == ["plain-nobs"]
    assert [lv.concurrency for lv in own.levels] == [1, 8] and own.levels[0].timed == timed
    pinned = next(a for a in setup.static.arms if a.name == PINNED.name)
    nobs = own.arms[0]
    plain_argv = static_argv(setup.static.arms[0], setup.settings)[1]
    assert pinned.pin and static_argv(pinned, setup.settings)[1] == plain_argv
    assert "--backend-sampling" in plain_argv
    assert static_argv(nobs, setup.settings)[1] == [
        a for a in plain_argv if a != "--backend-sampling"
    ]
    with pytest.raises(FrondeError, match="no load arm plain-bs"):
        load_setup(settings, "chat", 16, 1, (1,), 1, arms={"plain-bs": None})
    # By default a timed run measures the pinned plain server beside the others.
    default = load_setup(base, "chat", 16, 1, (1,), 1, timed=timed)
    assert "pinned" in [a.name for a in default.static.arms]


def test_a_named_router_arm_brings_the_load_curves_it_places_by(
    fake_gemma: Callable[[int], Settings],
) -> None:
    """Named without its modes' calibration arms a router arm has no curve for them and
    sends everything to the modes that have one: the arms come with it, at its own c."""
    timed = Timed(3.0, 20.0)
    arms = {"pinned": None, "s-mod": (8,), "single-b": (1, 8)}
    setup = load_setup(fake_gemma(400), "chat", 16, 1, (1, 8, 32), 32, 3, arms=arms, timed=timed)
    own = {a.name: [lv.concurrency for lv in p.levels] for _, p in setup.more for a in p.arms}
    assert own == {"s-mod": [8], "s-simple": [1, 8], "s-casc": [1, 8], "single-b": [1, 8]}
    assert [a.name for a in setup.static.arms] == ["pinned"]
    assert setup.notes == ("--arm: the router arms' calibration added: s-simple, s-casc",)
    # No router arm named: nothing is added.
    bare = load_setup(fake_gemma(400), "chat", 16, 1, (1,), 1, arms={"plain": None}, timed=timed)
    assert [a.name for a in bare.static.arms] == ["plain"] and bare.notes == ()


def test_an_old_results_folder_is_reported_with_what_its_records_lack(tmp_path: Path) -> None:
    import shutil

    from fronde.bench.load_report import report_load

    old = (
        Path(__file__).resolve().parents[2]
        / "results"
        / "load-gpu-h200-cpu-gemma-270m-20261205-loose"
    )
    shutil.copytree(old, tmp_path / "old", ignore=shutil.ignore_patterns("*.png", "*.md", "logs"))
    verdict = report_load(tmp_path / "old")
    page = (tmp_path / "old" / "load.md").read_text()
    assert (
        "Recorded before timed windows" in page
        and "`†` records of a run before timed windows" in page
    )
    assert "| 32 | router-b |" in page and verdict
