"""One request at a time: Fronde calls its backend for the completion and for nothing else.

Over fake backends that log every call (``--fake-calls``). At c = 1 no call of Fronde's
own comes before a streamed request's completion (no ``GET /slots``, ``/props`` or
``/tokenize``), also where slots are pinned (``-np 4``); and after a forced answer the
counterfactual book learns nothing from (baseline keeps no n-gram table) no call comes
at all: the hindsight's ``/apply-template`` and two ``/tokenize`` ran during the client's
next request (``scripts/ttft_split.py``). A mode whose table the book mirrors
(ngram-mod) still has its answer's ids fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from fronde.modes import Mode
from fronde.request.hindsight import Hindsight

from .test_contract import MODES, chat


class Calls:
    """The calls each fake backend logged, read as they come."""

    def __init__(self, folder: Path) -> None:
        self.files = {m: folder / f"calls-{m}.txt" for m in MODES}
        self.seen = dict.fromkeys(MODES, 0)

    def knobs(self) -> dict[Mode, list[str]]:
        return {m: ["-np", "4", "--fake-calls", str(f)] for m, f in self.files.items()}

    def new(self, mode: Mode) -> list[str]:
        """``mode``'s backend's calls since the last look."""
        f = self.files[mode]
        lines = f.read_text().splitlines() if f.exists() else []
        fresh, self.seen[mode] = lines[self.seen[mode] :], len(lines)
        return fresh


def answered(c: TestClient, mode: Mode, content: str) -> None:
    """Stream one chat request forced to ``mode``, read it whole, let its replay run."""
    body = chat(content, stream=True, stream_options={"include_usage": True})
    with c.stream("POST", "/v1/chat/completions", json=body, headers={"x-fronde-mode": mode}) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["x-fronde-class"] == "forced"
        text = "".join(r.iter_text())
    assert text.rstrip().endswith("data: [DONE]")
    app: Any = c.app
    hindsight: Hindsight = app.state.runtime.dispatcher.hindsight
    assert c.portal is not None
    c.portal.call(hindsight.drain)  # the replay, if any, has run


def test_at_one_in_flight_a_forced_baseline_stream_makes_its_completion_alone(
    serve: Any, tmp_path: Path
) -> None:
    calls = Calls(tmp_path)
    c: TestClient = serve(calls.knobs(), backend={"parallel": 4})
    calls.new(Mode.BASELINE)  # whatever the start made
    for i in range(3):  # the next requests too: no slot lookup beside the last one's
        answered(c, Mode.BASELINE, f"alpha beta {i}")
        assert calls.new(Mode.BASELINE) == ["POST /v1/chat/completions"]


def test_a_forced_answer_on_a_mirrored_mode_still_feeds_the_books_mirror(
    serve: Any, tmp_path: Path
) -> None:
    calls = Calls(tmp_path)
    c: TestClient = serve(calls.knobs(), backend={"parallel": 4})
    calls.new(Mode.NGRAM_MOD)
    answered(c, Mode.NGRAM_MOD, "alpha beta gamma")
    made = calls.new(Mode.NGRAM_MOD)
    assert made[0] == "POST /v1/chat/completions"  # the completion first, the ids after it
    assert made[1:] == ["POST /apply-template", "POST /tokenize", "POST /tokenize"]
    state = c.get("/fronde/v1/router").json()["counterfactual"]
    assert state["mirror_entries"]["ngram-mod"] > 0


def test_with_hindsight_off_an_answer_makes_its_completion_alone(
    serve: Any, tmp_path: Path
) -> None:
    # router.hindsight false (the load benchmark's single-nh arm): no /apply-template and
    # no /tokenize after an answer that would have fed the book's mirror.
    calls = Calls(tmp_path)
    c: TestClient = serve(calls.knobs(), backend={"parallel": 4}, router={"hindsight": False})
    calls.new(Mode.NGRAM_MOD)
    answered(c, Mode.NGRAM_MOD, "alpha beta gamma")
    assert calls.new(Mode.NGRAM_MOD) == ["POST /v1/chat/completions"]
    assert c.get("/fronde/v1/router").json()["counterfactual"]["mirror_entries"]["ngram-mod"] == 0
