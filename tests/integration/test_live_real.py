"""The live demo and the live page on real parts: llama-server b11434 and gemma-3-270m.

- ``demo.py --plain`` starts its own `fronde serve` and plays its four scenes.
- Headless Chromium (Debian's ``chromium``, driven by Playwright) shows a request
  on ``/ui`` while it streams, then its result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from fronde.backends.process import free_port

from ..unit.test_demo import parse_plain
from .conftest import ORIGINAL_POLICY, Serve, require_real_parts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODES = {"baseline", "ngram-simple", "ngram-mod", "cascade"}


def test_demo_plain_plays_every_scene_on_the_real_model(tmp_path: Path) -> None:
    require_real_parts()
    # Nothing answers on this port, so the demo starts its own `fronde serve`: the
    # path a new user takes, with fresh n-gram pools. Its scenes show the probe, which
    # the default policy never runs on their 128-token answers: the original one does.
    env = {**os.environ, **ORIGINAL_POLICY, "FRONDE_SERVER__PORT": str(free_port())}
    out = subprocess.run(
        [sys.executable, str(ROOT / "demo.py"), "--plain"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    print(out.stdout)  # the summary, for the CI log
    rows = parse_plain(out.stdout)
    assert list(rows) == ["prose", "code", "JSON", "edit"]
    for row in rows.values():
        assert row["mode"] in MODES, row
        # Rates are shown, not speed targets (CI's 2 cores are shared).
        assert float(row["decode_tok_s"]) > 0.0
        assert float(row["baseline_tok_s"]) > 0.0
        assert float(row["overhead_ms"]) >= 0.0
    assert rows["prose"]["class"] == "probe"
    assert re.match(r"ngram-mod \d+\.\d", rows["prose"]["probe"])  # words, not ngram-mod_41.2
    # The edit: an 800+ character block and an edit verb go straight to ngram-mod.
    assert (rows["edit"]["class"], rows["edit"]["mode"]) == ("edit", "ngram-mod")
    assert float(rows["edit"]["alpha"]) > 0.5  # a rewrite is mostly a copy
    # Cut at its closing fence inside a verify pass, it still has a τ (it had "-").
    assert float(rows["edit"]["tau"]) > 1.0
    assert float(rows["edit"]["repetition"]) < 0.5  # ... and not a loop (demo.EDIT_PROMPT)


def test_the_live_page_shows_a_request_while_it_streams(
    real_serve: Serve, browser: Browser, tmp_path: Path
) -> None:
    shots = Path(os.environ.get("FRONDE_UI_SCREENSHOTS") or tmp_path)  # where the PNGs go
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1366, "height": 768})  # a laptop screen
    page.goto(f"{real_serve.base_url}/ui")
    expect(page.locator("#conn")).to_have_class("live", timeout=10_000)
    expect(page.locator(".mode.ready")).to_have_count(len(MODES))
    expect(page.locator("#legend dt")).to_have_count(8)  # every route, in words
    expect(page.locator(".saving")).to_have_count(2)  # against the floor, against baseline

    body = {
        "prompt": "A list of the planets of the solar system, one per line:\n1. Mercury\n",
        "max_tokens": 200,
        "temperature": 0,
        "stream": True,
        "seed": 7,
    }
    rid: list[str] = []

    def request() -> None:
        with httpx.stream(
            "POST", f"{real_serve.base_url}/v1/completions", json=body, timeout=120
        ) as r:
            rid.append(r.headers["x-fronde-request-id"])
            r.read()

    t = threading.Thread(target=request)
    t.start()
    try:
        running = page.locator("#requests tr.running")
        expect(running).to_have_count(1, timeout=30_000)
        shown_id = running.get_attribute("data-id")
        # Its token count grows while it streams (the 8th cell).
        expect(running.locator("td").nth(7)).to_have_text(re.compile(r"^[1-9]\d*$"), timeout=30_000)
        expect(running.locator("td").nth(6)).to_have_text(re.compile(r"^\d+\.\d$"))
        page.screenshot(path=shots / "ui-running.png")
    finally:
        t.join(timeout=120)
    assert rid == [shown_id]
    row = page.locator(f'#requests tr[data-id="{shown_id}"]')
    expect(row).to_have_class("done", timeout=10_000)
    cells = row.locator("td").all_inner_texts()
    assert cells[4] in MODES  # the mode column
    # decode tok/s, from llama-server's timings: a rate is shown, not a speed target
    # (CI's 2 shared cores read 4.1 tok/s here under load on 2026-12-03)
    assert float(cells[6]) > 0.0
    assert int(cells[7]) > 0  # tokens
    # A mode's large figure rests on 3 fresh samples or more, else it says why not (this
    # server may be shared: other tests may have measured the mode already).
    card = page.locator(f'.mode[data-mode="{cells[4]}"]')
    if "weak" in (card.locator(".big").get_attribute("class") or ""):
        expect(card).to_contain_text(re.compile(r"too few to trust|not measured yet|stale"))
    else:
        expect(card).to_contain_text(re.compile(r"median of ([3-9]|\d\d+) samples"))
    expect(page.locator('#class-rows tr[data-class="general"]')).to_have_count(1)
    page.screenshot(path=shots / "ui-done.png")
    page.close()
