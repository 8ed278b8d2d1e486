"""``scripts/burst_hop.py``'s measurement: a burst's time to first token, on the fake server.

The fake's ``--fake-prefill-s`` holds each generation's first token back (its headers
come at once, as b11434 sends them once the request has a slot), so that the script's
burst is forwarded before any token is relayed; these tests pin that the script reads
the first token's time from the burst's start, not from each request's headers.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import httpx

from fronde.backends.process import free_port
from tests.scripts import load_script


def test_a_burst_reads_each_first_token_after_the_fake_prefill(fake_binary: Path) -> None:
    port = free_port()
    argv = [str(fake_binary), "--port", str(port), "--fake-prefill-s", "0.3", "--fake-tps", "500"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        script = load_script("burst_hop.py")
        got = asyncio.run(script.burst(base, "fake", 4, 2))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert len(got) == 4
    for ttft, settle in got:
        assert 300 <= ttft < 3000  # the prefill, then the first token
        assert settle == 0.0  # no Fronde in front: no settle header
