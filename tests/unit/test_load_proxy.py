"""``fr-plain``: Fronde in front of the plain server alone, the load run's proxy control.

On the H200 (2026-12-04, gemma, c = 32) ``router-b`` sent every request to baseline
and read 1.20× ``plain``: the same server, faster through Fronde. The control arm
separates what the hop does to a server from what routing adds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fronde.bench.load import PROXY, load_setup
from fronde.bench.load_page import load_markdown
from fronde.bench.load_report import report_load
from fronde.bench.load_rows import load_rows
from fronde.bench.load_verdict import ratio_sets, session_ratios, verdict_lines
from fronde.bench.store import Store
from fronde.config import Settings
from fronde.modes import Mode


def _samples(arm: str, tokens: int, session: str = "A", c: int = 2) -> list[dict[str, Any]]:
    """Two 1-s requests side by side, then one more (the steady window is [0, 1] s)."""
    level = f"c{c}" if c > 1 else ""
    return [
        {
            "arm": arm,
            "level": level,
            "rep": 0,
            "item": item,
            "t0": t0,
            "wall_s": 1.0,
            "ttft_s": 0.01,
            "tokens": tokens,
            "ok": True,
            "repetition": 0.1,
            "route": {},
            "session": session,
        }
        for item, t0 in (("a", 0.0), ("b", 0.0), ("z", 1.0))
    ]


def test_the_router_plan_starts_with_the_proxy_control_on_the_routers_settings(
    fake_gemma: Callable[[int], Settings],
) -> None:
    setup = load_setup(fake_gemma(400), "completion", 16, 1, (1, 4), slots=4, items=3)
    control, *routers = setup.router.arms
    assert control.name == PROXY.name == "fr-plain"
    assert control.kind == "fronde" and control.force is Mode.BASELINE
    env = dict(control.env)
    assert env["FRONDE_BACKEND__PARALLEL"] == "4"
    assert "FRONDE_ROUTER__LOAD_PLACEMENT" not in env  # nothing is placed: all forced
    assert [a.name for a in routers] == ["router", "router-b"]
    assert {k: v for k, v in routers[0].env if k in env} == env  # the routers' settings
    bare = load_setup(fake_gemma(400), "completion", 16, 1, (1,), 1, proxy=False)
    assert [a.name for a in bare.router.arms] == ["router", "router-b"]
    # No router arm (the screening block): no control either.
    screen = load_setup(fake_gemma(400), "completion", 16, 1, (1,), 1, placements=())
    assert not screen.router.arms


def test_the_proxy_control_is_no_static_arm_of_the_verdict() -> None:
    # c = 2: plain 20 tok/s, fr-plain 30 (the same server through Fronde), router-b 24.
    samples = [*_samples("plain", 10), *_samples("fr-plain", 15), *_samples("router-b", 12)]
    [line] = verdict_lines(load_rows(samples, []))
    assert line.startswith("c=2: router-b 24 tok/s = 1.200× plain")
    assert session_ratios(samples, [], "fr-plain", "plain") == pytest.approx({2: 1.5})
    assert session_ratios(samples, [], "router-b", "fr-plain") == pytest.approx({2: 0.8})
    # Arms of different sessions are not compared.
    apart = [*_samples("plain", 10, "A"), *_samples("fr-plain", 15, "B")]
    assert session_ratios(apart, [], "fr-plain", "plain") == {}


def test_the_page_says_what_placement_changes_and_what_routing_adds(tmp_path: Path) -> None:
    store = Store(tmp_path / "records.jsonl")
    store.append(
        {
            "type": "run",
            "identity": {"machine": {"cpus": 2}, "slots": 2, "skip": []},
            "calibration": {"baseline": "plain"},
            "title": "Load: here",
        }
    )
    samples = [*_samples("plain", 10), *_samples("fr-plain", 15), *_samples("router-b", 12)]
    for arm in ("plain", "fr-plain", "router-b"):
        block = f"agent-mix|{arm}|0|c2"
        for s in samples:
            if s["arm"] == arm:
                rec = {k: v for k, v in s.items() if k != "session"}
                store.append({"type": "sample", "block": block, "block_id": block, **rec})
        store.append({"type": "block", "block": block, "block_id": block, "ok": True})
    report_load(tmp_path)
    page = (tmp_path / "load.md").read_text()
    assert "## Placement and routing (tok/s ratios, same session)" in page
    placement, routing = page.index("What slot placement gives"), page.index("What routing adds")
    assert placement < page.index("- fr-plain ÷ plain: c=2 1.50×") < routing
    assert routing < page.index("- router-b ÷ fr-plain: c=2 0.80×")
    assert "- router-b ÷ plain: c=2 1.20×" in page
    assert "- `fr-plain`: Fronde in front of the plain server alone" in page
    body = json.loads((tmp_path / "load.json").read_text())
    assert body["ratios"]["placement"]["fr-plain ÷ plain"] == pytest.approx({"2": 1.5})
    # A run without the control gives no ratio to it.
    assert "÷ fr-plain" not in _page_without(tmp_path, "fr-plain")


def _page_without(folder: Path, arm: str) -> str:
    """The page of ``folder``'s records with ``arm``'s left out."""
    other = folder / "without"
    other.mkdir()
    kept = [
        line
        for line in (folder / "records.jsonl").read_text().splitlines()
        if f'"{arm}"' not in line and f"|{arm}|" not in line
    ]
    (other / "records.jsonl").write_text("\n".join(kept) + "\n")
    report_load(other)
    return (other / "load.md").read_text()


def test_each_row_gives_its_servers_own_decode_rate() -> None:
    # plain's server decoded the two long answers at 34 and 36 tok/s; the 3-token answer
    # (a few passes) and the looping item count nowhere.
    rated = [*_samples("plain", 10)]
    rated[0]["timings"] = {"predicted_n": 10, "predicted_per_second": 34.0}
    rated[1]["timings"] = {"predicted_n": 10, "predicted_per_second": 36.0}
    rated[2]["timings"] = {"predicted_n": 3, "predicted_per_second": 90.0}
    loop = {**rated[0], "item": "loop", "repetition": 0.9}
    loop["timings"] = {"predicted_n": 64, "predicted_per_second": 500.0}
    [row] = load_rows([*rated, loop], ["loop"])
    assert row.server_tok_s == pytest.approx(35.0)
    [bare] = load_rows(_samples("plain", 10), [])
    assert bare.server_tok_s is None
    page = load_markdown([row, bare], [], "t", {}, None)
    assert "| ttft s | srv | load |" in page
    assert "| 0.010 | 35 | " in page and "| 0.010 | - | " in page


def test_the_one_server_arms_name_their_topology_and_the_router_arms_theirs(
    fake_gemma: Callable[[int], Settings],
) -> None:
    """``single-b`` and ``fr-sbase`` ask for one llama-server for every mode, the router
    arms and ``fr-plain`` for one per mode: with ``auto`` the default, an arm that named
    neither would change topology with the binary it found."""
    arms = {"fr-plain": None, "router-b": None, "single-b": None, "fr-sbase": None}
    setup = load_setup(fake_gemma(400), "completion", 16, 1, (1, 4), 4, items=3, arms=arms)
    by = {a.name: a for a in setup.router.arms}
    topology = {name: dict(a.env)["FRONDE_BACKEND__TOPOLOGY"] for name, a in by.items()}
    assert topology == {
        "fr-plain": "per-mode", "router-b": "per-mode", "single-b": "single", "fr-sbase": "single",
    }  # fmt: skip
    assert dict(by["single-b"].env)["FRONDE_ROUTER__LOAD_PLACEMENT"] == "best"
    assert by["single-b"].routed and by["fr-sbase"].force is Mode.BASELINE
    # fr-sbase starts every mode (no --mode): its requests share the server with drafts.
    assert by["fr-plain"].alone and not by["fr-sbase"].alone
    samples = [*_samples("router-b", 10), *_samples("single-b", 12)]
    samples += [*_samples("fr-plain", 10), *_samples("fr-sbase", 9)]
    ratios = ratio_sets(samples, [], ["router-b", "single-b", "fr-plain", "fr-sbase"])
    topo = ratios["topology"]
    assert topo["single-b ÷ router-b"] == pytest.approx({2: 1.2})
    assert topo["fr-sbase ÷ fr-plain"] == pytest.approx({2: 0.9})


def test_single_nh_is_single_b_without_hindsight_and_its_ratio_is_the_feeding_cost(
    fake_gemma: Callable[[int], Settings],
) -> None:
    arms = {"single-b": None, "single-nh": None}
    setup = load_setup(fake_gemma(400), "completion", 16, 1, (1, 4), 4, items=3, arms=arms)
    by = {a.name: dict(a.env) for a in setup.router.arms}
    assert by["single-nh"] == by["single-b"] | {"FRONDE_ROUTER__HINDSIGHT": "false"}
    samples = [*_samples("single-b", 9), *_samples("single-nh", 10)]
    ratios = ratio_sets(samples, [], ["single-b", "single-nh"])
    assert ratios["hindsight"]["single-b ÷ single-nh"] == pytest.approx({2: 0.9})
