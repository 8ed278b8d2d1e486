"""``scripts/load_check.py``, the outside client: its count against what the fake server sent.

The fake llama-server writes each token's wall-clock time as it sends it
(``--fake-token-log``); the script's tokens in its window must be the fake's tokens
sent in that window, give or take the ones a loaded loopback delays across an edge,
and every token it counted at all must be one the fake sent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fronde.backends.process import free_port
from tests.scripts import ROOT


def _up(base: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _workload(path: Path) -> None:
    """Three chat requests of 12 tokens, as `fronde bench load`'s workload.json holds them."""
    items = [
        {
            "id": f"q{k}",
            "body": {
                "messages": [{"role": "user", "content": f"question {k} about the weather"}],
                "max_tokens": 12,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        }
        for k in range(3)
    ]
    path.write_text(json.dumps({"name": "t", "path": "/v1/chat/completions", "items": items}))


@pytest.mark.parametrize("pin", [False, True])
def test_the_outside_client_counts_the_tokens_the_server_sent_in_its_window(
    fake_binary: Path, tmp_path: Path, pin: bool
) -> None:
    port = free_port()
    log = tmp_path / "tokens.log"
    argv = [str(fake_binary), "--port", str(port), "--fake-tps", "100"]
    proc = subprocess.Popen(
        [*argv, "--fake-token-log", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _up(base)
        _workload(tmp_path / "workload.json")
        cmd = [sys.executable, str(ROOT / "scripts" / "load_check.py"), "--url", base]
        cmd += ["--clients", "2", "--workload", str(tmp_path / "workload.json")]
        cmd += ["--window-s", "1.5", "--warmup-s", "0.3", "--json", *(["--pin"] if pin else [])]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    got = json.loads(run.stdout)
    sent = [float(line) for line in log.read_text().split()]
    lo, hi = got["window_wall"]
    in_window = sum(lo <= t <= hi for t in sent)
    assert got["failed"] == 0 and got["pin"] is pin
    # Every answer's usage, and the cut-off answers' events: what the fake generated but
    # the token or so of each cut-off answer made after the client left.
    assert len(sent) - 4 <= got["tokens_all"] <= len(sent)
    # 2 clients at 100 tok/s each for 1.5 s: about 300 tokens, each counted where it
    # arrived; an edge token may land either side on a loaded machine.
    assert in_window > 200
    assert got["tokens"] == pytest.approx(in_window, abs=8)
    assert got["tok_s"] == pytest.approx(got["tokens"] / 1.5, abs=0.1)
