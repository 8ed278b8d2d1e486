"""Requests that wait seconds for llama-server to read them: a burst through `fronde serve`.

llama-server serves each HTTP connection with one thread of cpp-httplib's pool, and a
burst of new connections can leave some waiting for a thread until a kept-alive
connection ends (``fronde/backends/connections.py``). This starts ``fronde serve`` on the
real llama-server (one server for every mode, ``-np`` = ``--clients``), runs that many
closed-loop clients streaming short chat answers for ``--seconds``, and reads each
request's stamps (``server.stamps``): the time from Fronde handing the request to its
HTTP client to the response head (``sent`` → ``headers``). A run prints how many waited
more than 3 s and the longest wait.

Arms, alternated over ``--runs``: ``fronde`` (as Fronde starts its servers) and
``stock`` (the same, with llama-server's own number of HTTP threads,
``max(-np + 4, cores - 1)``, restored through ``backend.extra_args``).

    python scripts/http_stall.py --clients 32 --seconds 25 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``fronde serve`` at ``url`` answers ``/health`` with status ok.

    Raises:
        SystemExit: the process exited, or it was not ready within 120 s.
    """
    async with httpx.AsyncClient(timeout=5) as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"fronde serve exited with {proc.returncode}")
            try:
                if (await http.get(url + "/health")).json().get("status") == "ok":
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit("fronde serve was not ready in 120 s")


async def client(http: httpx.AsyncClient, url: str, k: int, until: float, tokens: int) -> int:
    """Stream chat answers one after another until ``until`` (perf_counter); how many."""
    n = 0
    while time.perf_counter() < until:
        content = f"Say something about the number {k * 1000 + n}."
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": tokens}
        body |= {"model": "fronde", "stream": True}
        async with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
            async for _ in r.aiter_lines():
                pass
        n += 1
    return n


def waits_ms(log: Path) -> list[float]:
    """Each request's ``sent`` → ``headers`` time from a Fronde log's stamps, ms."""
    out: list[float] = []
    for line in log.read_text().splitlines():
        if '"request.stamps"' in line:
            ms = json.loads(line)["ms"]
            if "sent" in ms and "headers" in ms:
                out.append(ms["headers"] - ms["sent"])
    return out


async def burst(
    url: str, proc: subprocess.Popen[bytes], clients: int, seconds: float, tokens: int
) -> int:
    """Wait for Fronde, then run the clients; the answers they got."""
    await wait_ready(url, proc)
    limits = httpx.Limits(max_connections=clients + 8)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        until = time.perf_counter() + seconds
        done = await asyncio.gather(*(client(http, url, k, until, tokens) for k in range(clients)))
    return sum(done)


def run(arm: str, clients: int, seconds: float, tokens: int, profile: str) -> str:
    """One run of ``arm``; its line of figures."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stock = ["--threads-http", str(max(clients + 4, (os.cpu_count() or 1) - 1))]
    env = os.environ | {
        "FRONDE_PROFILE": profile, "FRONDE_LOG_LEVEL": "info", "FRONDE_SERVER__STAMPS": "true",
        "FRONDE_BACKEND__PARALLEL": str(clients), "FRONDE_BACKEND__CTX_SIZE": str(clients * 1024),
        "FRONDE_MODES": '["baseline", "ngram-mod"]', "FRONDE_ROUTER__FLOOR": "baseline",
        "FRONDE_BACKEND__EXTRA_ARGS": json.dumps(stock if arm == "stock" else []),
    }  # fmt: skip
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as log:
        cmd = [sys.executable, "-m", "fronde", "serve", "--port", str(port)]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            answers = asyncio.run(burst(url, proc, clients, seconds, tokens))
        finally:
            proc.terminate()
            proc.wait(30)
        waits = sorted(waits_ms(Path(log.name)))
    slow = sum(w > 3000 for w in waits)
    return (
        f"{arm}: {answers} answers, {slow} waited over 3 s for their head, "
        f"longest {waits[-1] / 1000:.1f} s, median {waits[len(waits) // 2]:.0f} ms"
    )


def main() -> None:
    """Parse the arguments, alternate the arms, print a line a run."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--clients", type=int, default=32, help="clients and -np")
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--tokens", type=int, default=8, help="max_tokens of each answer")
    ap.add_argument("--runs", type=int, default=3, help="runs of each arm")
    ap.add_argument("--profile", default="cpu-smollm2-135m")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, {args.clients} clients, {args.seconds:.0f} s a run")
    for k in range(args.runs):
        for arm in ("stock", "fronde") if k % 2 == 0 else ("fronde", "stock"):
            line = run(arm, args.clients, args.seconds, args.tokens, args.profile)
            print(f"run {k}: {line}", flush=True)


if __name__ == "__main__":
    main()
