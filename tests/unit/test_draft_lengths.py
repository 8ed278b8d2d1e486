"""The draft length by load: measured by ``fronde bench load``, saved with the load curves,
set per request on the one server of every mode.

Over fake llama-servers (tests/fakes): a non-streamed answer carries ``fake_received``,
the body the server received, so a test sees the ``speculative.n_max`` it carried.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.pool import BackendPool
from fronde.bench.arms import static_argv
from fronde.bench.load import arm_about, load_setup
from fronde.bench.load_lengths import best_lengths, schedule_lines, with_lengths
from fronde.bench.load_rows import LoadRow
from fronde.bench.passes import Timed
from fronde.compose import Runtime
from fronde.config import Settings
from fronde.evidence.calibration import LoadCurves, load_curves, load_key, save_load_curves
from fronde.evidence.draft_schedule import DraftSchedule
from fronde.modes import Mode
from fronde.router.draft_length import DraftLengths

from ..conftest import cli_env, gemma_on_fake
from .test_contract import chat, ready
from .test_load_cli import fronde
from .test_single import single_plan, value

SCHEDULE = DraftSchedule({Mode.NGRAM_MOD: ((1, 24), (4, 8)), Mode.CASCADE: ((2, 16),)})
CURVES = LoadCurves(
    {
        Mode.BASELINE: ((1, 600.0), (4, 2200.0)),
        Mode.NGRAM_MOD: ((1, 700.0), (4, 1900.0)),
        Mode.CASCADE: ((1, 690.0), (4, 1850.0)),
    },
    "runs/load-test",
    lengths=SCHEDULE,
)


# --- the schedule and its file -------------------------------------------------------------


def test_the_schedule_is_a_step_from_the_largest_load_measured_at_or_below_n() -> None:
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 1) == 24
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 3) == 24  # a step, not a line
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 4) == 8
    assert SCHEDULE.n_max(Mode.NGRAM_MOD, 64) == 8
    assert SCHEDULE.n_max(Mode.CASCADE, 1) == 16  # below the smallest c: its point
    assert SCHEDULE.n_max(Mode.NGRAM_SIMPLE, 4) is None  # not measured


def test_the_schedule_survives_load_json_and_an_old_entry_loads_without_one(
    tmp_path: Path,
) -> None:
    save_load_curves(tmp_path, "k", CURVES)
    data = json.loads((tmp_path / "load.json").read_text())
    assert data["k"]["draft_lengths"] == {"ngram-mod": [[1, 24], [4, 8]], "cascade": [[2, 16]]}
    back = load_curves(tmp_path, "k")
    assert back is not None and back.lengths == SCHEDULE and back.points == CURVES.points
    # An entry written before the schedule existed: the curves load, no schedule.
    del data["k"]["draft_lengths"]
    data["old"] = data["k"]
    data["bad"] = data["k"] | {"draft_lengths": {"ngram-mod": [[0, 8]], "nope": [[1, 2]]}}
    (tmp_path / "load.json").write_text(json.dumps(data))
    old = load_curves(tmp_path, "old")
    assert old is not None and old.lengths is None and old.points == CURVES.points
    bad = load_curves(tmp_path, "bad")
    assert bad is not None and bad.lengths is None  # nothing readable in it


# --- applied per request on the one server --------------------------------------------------


def _client(fake_binary: Path, tmp_path: Path, topology: str = "auto", **kw: Any) -> TestClient:
    """The app over the fakes (:func:`single_plan`; the one server patched)."""
    plan = single_plan(fake_binary, tmp_path, "--fake-per-request", topology=topology)
    backend = {"topology": topology}
    settings = gemma_on_fake(tmp_path, fake_binary, backend=backend, **kw)
    return TestClient(create_app(settings, pool=BackendPool(plan, stop_grace_s=1.0)))


def _saved(tmp_path: Path, fake_binary: Path) -> None:
    """:data:`CURVES` (with :data:`SCHEDULE`) saved where the app reads them."""
    save_load_curves(tmp_path, load_key(gemma_on_fake(tmp_path, fake_binary)), CURVES)


def _ask(c: TestClient, mode: Mode, others: int = 0, **extra: Any) -> tuple[Any, dict[str, Any]]:
    """One chat request forced to ``mode`` with ``others`` requests already open to its server.

    The others are counted as the client counts an open request (``in_flight`` per
    URL): what the draft length reads, without a race between real streams.
    """
    rt = cast("Runtime", c.app.state.runtime)  # type: ignore[attr-defined]
    url = rt.pool.get(mode).url
    rt.client.in_flight[url] += others
    try:
        r = c.post("/v1/chat/completions", json=chat(**extra), headers={"x-fronde-mode": str(mode)})
    finally:
        rt.client.in_flight[url] -= others
    assert r.status_code == 200, r.text
    return r, r.json()["fake_received"]["body"]


def test_a_speculative_request_carries_the_schedules_length_at_its_load(
    fake_binary: Path, tmp_path: Path
) -> None:
    _saved(tmp_path, fake_binary)
    with _client(fake_binary, tmp_path) as c:
        ready(c)
        r, alone = _ask(c, Mode.NGRAM_MOD)
        assert alone["speculative.n_max"] == 24 and r.headers["x-fronde-draft-n-max"] == "24"
        r, busy = _ask(c, Mode.NGRAM_MOD, others=3)  # 4 in flight with it
        assert busy["speculative.n_max"] == 8 and r.headers["x-fronde-draft-n-max"] == "8"
        assert busy["speculative.types"] == ["ngram-mod"]  # the mode's own fields stay
        # Cascade's point (16) is under its maximum (ngram-simple's 48); ngram-simple and
        # baseline have none: their bodies are as without a schedule.
        assert _ask(c, Mode.CASCADE)[1]["speculative.n_max"] == 16
        r, simple = _ask(c, Mode.NGRAM_SIMPLE, others=3)
        assert "speculative.n_max" not in simple and "x-fronde-draft-n-max" not in r.headers
        assert _ask(c, Mode.BASELINE, others=3)[1]["speculative.n_max"] == 0
        state = c.get("/fronde/v1/router").json()
    lengths = state["load"]["draft_lengths"]
    assert lengths["schedule"]["ngram-mod"] == [[1, 24], [4, 8]]
    assert "runs/load-test" in lengths["why"] and lengths["caps"]["ngram-mod"] == 32
    by_mode = [(d["mode"], d["draft_n_max"]) for d in state["recent"]]
    assert by_mode[:2] == [("ngram-mod", 24), ("ngram-mod", 8)]


def test_a_clients_own_n_max_wins_over_the_schedule(fake_binary: Path, tmp_path: Path) -> None:
    _saved(tmp_path, fake_binary)
    with _client(fake_binary, tmp_path) as c:
        ready(c)
        r, body = _ask(c, Mode.NGRAM_MOD, others=3, **{"speculative.n_max": 30})
    assert body["speculative.n_max"] == 30 and "x-fronde-draft-n-max" not in r.headers


def test_without_a_schedule_or_switched_off_the_body_is_as_before(
    fake_binary: Path, tmp_path: Path
) -> None:
    with _client(fake_binary, tmp_path) as c:  # nothing saved
        ready(c)
        r, body = _ask(c, Mode.NGRAM_MOD, others=3)
        why = c.get("/fronde/v1/router").json()["load"]["draft_lengths"]["why"]
    assert "speculative.n_max" not in body and body["speculative.types"] == ["ngram-mod"]
    assert "x-fronde-draft-n-max" not in r.headers and "--draft-lengths" in why
    _saved(tmp_path, fake_binary)
    with _client(fake_binary, tmp_path, router={"draft_lengths": "off"}) as c:
        ready(c)
        assert "speculative.n_max" not in _ask(c, Mode.NGRAM_MOD, others=3)[1]


def test_a_server_of_its_own_per_mode_gets_no_length(fake_binary: Path, tmp_path: Path) -> None:
    _saved(tmp_path, fake_binary)
    with _client(fake_binary, tmp_path, topology="per-mode") as c:
        ready(c)
        r, body = _ask(c, Mode.NGRAM_MOD, others=3)
    assert "speculative.n_max" not in body and "x-fronde-draft-n-max" not in r.headers


def test_a_length_is_never_set_at_or_above_the_modes_own_maximum() -> None:
    lengths = DraftLengths(DraftSchedule({Mode.NGRAM_MOD: ((1, 48), (8, 32), (16, 12))}),
                           {Mode.NGRAM_MOD: 32}, "test")  # fmt: skip
    assert lengths.n_max(Mode.NGRAM_MOD, 1) is None  # above the server's n_max: its 400
    assert lengths.n_max(Mode.NGRAM_MOD, 8) is None  # its own maximum caps nothing
    assert lengths.n_max(Mode.NGRAM_MOD, 20) == 12


# --- measured by fronde bench load ---------------------------------------------------------


def _row(arm: str, c: int, tok_s: float) -> LoadRow:
    return LoadRow(arm, c, tok_s, tok_s, tok_s, 1.0, 1.0, 0.1, float(c), 10, 0, 1, {})


def test_the_bench_picks_the_length_that_served_most_at_each_c() -> None:
    table = {Mode.NGRAM_MOD: {32: "s-mod", 16: "s-mod-n16", 8: "s-mod-n8"}}
    rows = [
        *(_row("s-mod", c, r) for c, r in ((1, 300.0), (8, 1500.0), (32, 2000.0))),
        *(_row("s-mod-n16", c, r) for c, r in ((1, 290.0), (8, 1700.0), (32, 2600.0))),
        *(_row("s-mod-n8", c, r) for c, r in ((1, 250.0), (8, 1650.0), (32, 2900.0))),
        _row("plain", 32, 3000.0),
    ]
    schedule, best = best_lengths(rows, table)
    assert schedule == DraftSchedule({Mode.NGRAM_MOD: ((1, 32), (8, 16), (32, 8))})
    assert best == {Mode.NGRAM_MOD: ((1, 300.0), (8, 1700.0), (32, 2900.0))}
    # The mode's curve is what the schedule serves; the other curves are untouched.
    curves = LoadCurves({Mode.BASELINE: ((32, 3000.0),), Mode.NGRAM_MOD: ((1, 300.0),)}, "x")
    out = with_lengths(curves, rows, table)
    assert out.points[Mode.NGRAM_MOD] == ((1, 300.0), (8, 1700.0), (32, 2900.0))
    assert out.points[Mode.BASELINE] == ((32, 3000.0),) and out.lengths == schedule
    lines = schedule_lines(rows, table)
    assert lines[0] == "| c | mode | best n_max | n8 tok/s | n16 tok/s | n32 tok/s |"
    assert lines[2:] == [
        "| 1 | ngram-mod | 32 | 250 | 290 | 300 |",
        "| 8 | ngram-mod | 16 | 1650 | 1700 | 1500 |",
        "| 32 | ngram-mod | 8 | 2900 | 2600 | 2000 |",
    ]
    # No length measured: the curves as they were, nothing printed.
    assert with_lengths(curves, rows, {Mode.NGRAM_MOD: {32: "s-mod"}}) == curves
    assert schedule_lines(rows, {}) == []


def test_a_draft_length_arm_is_the_modes_server_with_its_length_set(
    fake_gemma: Callable[[int], Settings],
) -> None:
    settings = fake_gemma(400)  # ngram-mod n_min 16, n_max 32; no draft model
    timed = Timed(warmup_s=1.0, window_s=2.0)
    setup = load_setup(
        settings,
        "completion",
        16,
        1,
        (1, 8),
        slots=8,
        items=3,
        timed=timed,
        lengths=(8, 16, 32, 64),
    )
    by = {a.name: a for a in setup.static.arms}
    assert setup.lengths[Mode.NGRAM_MOD] == {32: "s-mod", 8: "s-mod-n8", 16: "s-mod-n16"}
    assert setup.lengths[Mode.NGRAM_SIMPLE] == {
        48: "s-simple", 8: "s-simple-n8", 16: "s-simple-n16", 32: "s-simple-n32"
    }  # fmt: skip
    assert Mode.BASELINE not in setup.lengths and "s-mod-n64" not in by
    assert any("64 is above its configured 32" in n for n in setup.notes)
    argv = static_argv(by["s-mod-n8"], setup.settings)[1]
    assert value(argv, "--spec-ngram-mod-n-max") == "8"
    assert value(argv, "--spec-ngram-mod-n-min") == "8"  # n_min <= n_max
    assert value(argv, "--spec-ngram-mod-n-match") == "24"  # the rest as the mode's
    casc = static_argv(by["s-casc-n16"], setup.settings)[1]
    assert value(casc, "--spec-ngram-mod-n-max") == "16"
    assert value(casc, "--spec-ngram-simple-size-m") == "16"
    assert by["s-mod-n8"].pin and by["s-mod"].pin  # pinned as their calibration arm
    assert "draft length 8" in arm_about("s-mod-n8")
    # Arms named: the lengths' arms come with the calibration arms they are read against.
    named = load_setup(
        settings, "completion", 16, 1, (1,), 1, arms={"single-b": None}, lengths=(16,)
    )
    names = {a.name for a in named.static.arms}
    assert {"s-mod", "s-mod-n16", "s-casc", "s-casc-n16", "s-simple-n16"} <= names
    assert load_setup(settings, "completion", 16, 1, (1,), 1).lengths == {}


def test_a_load_run_with_draft_lengths_saves_the_schedule_and_prints_it(
    tmp_path: Path, fake_gemma: Callable[[int], Settings]
) -> None:
    settings = fake_gemma(500)
    env = cli_env(settings, tmp_path / "cache")
    run = tmp_path / "run"
    load = ["bench", "load", "--clients", "1", "--items", "2", "--max-tokens", "8", "--slots", "1"]
    load += ["--window-s", "0.3", "--warmup-s", "0.1", "--no-screen", "--arm", "s-mod"]
    out = fronde([*load, "--draft-lengths", "16", "--out", str(run)], env, tmp_path)
    assert "Draft length by load" in out and "| 1 | ngram-mod |" in out
    saved = json.loads((tmp_path / "cache" / "load.json").read_text())
    [entry] = saved.values()
    assert set(entry["draft_lengths"]) == {"ngram-simple", "ngram-mod", "cascade"}
    assert entry["draft_lengths"]["ngram-mod"][0][0] == 1  # c = 1, one of 16 and 32
    page = (run / "load.md").read_text()
    assert "s-mod-n16" in page and "| c | mode | best n_max |" in page
    fronde(["bench", "report", str(run)], env, tmp_path)
    assert (run / "load.md").read_text() == page  # the page again from the records
