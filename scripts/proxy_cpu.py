"""Fronde's own CPU per streamed token: the proxy's process time over a run of prompts.

Start `fronde serve` with one mode (e.g. ``FRONDE_PROFILE=cpu-gemma-270m fronde serve
--port 18431 --mode ngram-mod``), then
``python scripts/proxy_cpu.py 18431 --proxy-pid "$(pgrep -f 'fronde serve --port 18431')"``.
Streams ``--n`` prompts it has never sent (numbered from ``--first``: a repeated prompt
would be drafted from ngram-mod's memory) of 64 tokens through Fronde and reads the
proxy's and the backend's ``utime + stime`` from ``/proc/PID/stat`` (Linux) before and
after: the proxy's CPU per streamed token while streaming, and per request after the
answers (the counterfactual replay, which waits for the decodes to end). Used in the
closing note of issue 21 (0.56-1.05 ms a token over seven runs on 2 cores, gemma-3-270m).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import httpx


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    """Parse the arguments, stream the prompts, print the figures."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("--n", type=int, default=16, help="prompts [16]")
    p.add_argument("--first", type=int, default=0, help="number of the first prompt [0]")
    p.add_argument("--proxy-pid", type=int, required=True, help="the `fronde serve` process")
    args = p.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    health = httpx.get(f"{base}/health").json()
    proxy = args.proxy_pid
    backend = next(b["pid"] for b in health["backends"].values() if b.get("pid"))
    chunks = 0
    c0, b0, t0 = cpu_s(proxy), cpu_s(backend), time.perf_counter()
    for i in range(args.first, args.first + args.n):
        prompt = f'def function_{i}(x):\n    """Return the {i}th power of x."""\n'
        body = {"model": "fronde", "prompt": prompt, "max_tokens": 64, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    event = json.loads(line[6:])
                    if event.get("choices") and event["choices"][0].get("text"):
                        chunks += 1
    wall = time.perf_counter() - t0
    c_mid = cpu_s(proxy)
    time.sleep(6)  # the replays run once the decodes have ended
    c1, b1 = cpu_s(proxy), cpu_s(backend)
    print(f"{chunks} streamed tokens in {wall:.2f} s")
    print(f"proxy CPU while streaming: {(c_mid - c0) / chunks * 1000:.2f} ms a token")
    print(f"proxy CPU after the answers: {(c1 - c_mid) * 1000 / args.n:.1f} ms a request")
    print(f"backend CPU: {b1 - b0:.2f} s")


if __name__ == "__main__":
    main()
