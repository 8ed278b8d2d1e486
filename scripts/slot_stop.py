"""How soon a llama-server frees its slot after a streamed client leaves, without Fronde.

Against a running ``fronde serve`` (its ``/health`` names each mode's llama-server URL),
for each ready mode: stream a 400-token chat answer straight from the llama-server,
close the connection after 1.5 s, then poll that server's ``/slots`` every 10 ms until
no slot is processing. Prints the seconds per try.

    .venv/bin/python scripts/slot_stop.py [--base http://127.0.0.1:8080] [--tries 5]
"""

from __future__ import annotations

import argparse
import time

import httpx


def busy(url: str) -> bool:
    """Whether the llama-server at ``url`` has a slot processing."""
    return any(s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=10).json())


def stop_time(url: str, seed: int, leave_after_s: float = 1.5) -> float:
    """Seconds from closing a stream after ``leave_after_s`` until no slot processes."""
    body = {
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "max_tokens": 400,
        "stream": True,
        "seed": seed,
    }
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
        t0 = time.monotonic()
        for _ in r.iter_lines():
            if time.monotonic() - t0 > leave_after_s:
                break
    left = time.monotonic()
    while busy(url) and time.monotonic() - left < 30:
        time.sleep(0.01)
    return time.monotonic() - left


def main() -> None:
    """Measure each ready mode (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="http://127.0.0.1:8080")
    ap.add_argument("--tries", type=int, default=5)
    args = ap.parse_args()
    health = httpx.get(f"{args.base}/health", timeout=10).json()
    for mode, b in health["backends"].items():
        if b["state"] == "ready":
            times = [round(stop_time(b["url"], k), 2) for k in range(args.tries)]
            print(f"{mode}: slot free after {times} s")


if __name__ == "__main__":
    main()
