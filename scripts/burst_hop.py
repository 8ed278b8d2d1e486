"""What Fronde adds to a burst's time to first token: through Fronde against the server alone.

On the H200, at gemma c = 32, the first 32 requests of a cell reached their first token
70-100 ms later through Fronde (``fr-plain``, every request forced to the plain server)
than from the plain server alone (issue 23). This script asks the same of the test
suite's fake llama-server (tests/fakes/fake_llama_server.py: no model), so that only
Fronde's own process differs between the arms:

- ``fronde``: a fresh ``fronde serve`` (the four modes, ``--slots`` slots each, slot
  pinning on unless ``--no-pin``) with every request sent to ``fronde:baseline``;
- ``direct``: a fresh fake server alone.

Each repetition starts both arms afresh (the order alternates) and sends ``--bursts``
bursts of ``--clients`` streamed chat requests of the agent mix at once, 1 s apart. The
fake waits ``--prefill-s`` before the first token of each request (a prefill), so that
a burst is forwarded before any token is relayed. Printed per burst: the median time
to first token of each arm, ms, and Fronde's excess (its median − direct's median of
the same repetition), with Fronde's median ``x-fronde-settle-ms`` (the wait to learn
where the server placed the first request of the burst). ``--warm`` first sends
``--clients`` ``/tokenize`` requests at once through Fronde, which leaves that many
upstream connections open: the part of the first burst's excess that is opening them.

Measured on the 2-core CPU (``--reps 4``, defaults): see the closing notes of issue 23.
Linux; about 20 s a repetition on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from fronde.bench.load_mix import agent_mix
from fronde.bench.serve import machine_line, run_info

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from load_burst import MODES, fake_binary  # noqa: E402  (a sibling script)

CHAT = "/v1/chat/completions"


async def burst(base: str, model: str, clients: int, max_tokens: int) -> list[tuple[float, float]]:
    """Send ``clients`` streamed chat requests at once to ``base``.

    Returns each one's (time to first content token, ms; ``x-fronde-settle-ms``, or 0).
    """
    items = agent_mix().items
    limits = httpx.Limits(max_connections=4 * clients, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        t0 = time.perf_counter()

        async def one(i: int) -> tuple[float, float]:
            body = items[i % len(items)].body("chat", max_tokens) | {"model": model}
            ttft: float | None = None
            async with http.stream("POST", base + CHAT, json=body) as r:
                settle = float(r.headers.get("x-fronde-settle-ms", "0"))
                async for line in r.aiter_lines():
                    if ttft is None and line.startswith("data:") and '"content"' in line:
                        ttft = (time.perf_counter() - t0) * 1000
            if ttft is None:
                raise RuntimeError(f"request {i} ended without a token")
            return ttft, settle

        return list(await asyncio.gather(*(one(i) for i in range(clients))))


async def warm(base: str, clients: int) -> None:
    """``clients`` ``/tokenize`` requests through Fronde at once: as many upstream connections."""
    limits = httpx.Limits(max_connections=4 * clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as h:
        body = {"content": "x"}
        await asyncio.gather(*(h.post(base + "/tokenize", json=body) for _ in range(clients)))


def start(arm: str, folder: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    """Start ``arm``'s server afresh; its process and base URL once it answers."""
    fake = str(fake_binary(folder))
    knobs = ["--fake-tps", str(args.tps), "--fake-prefill-s", str(args.prefill_s)]
    if arm == "direct":
        port = args.port + 1
        proc = subprocess.Popen(
            [fake, "--port", str(port), *knobs],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    return proc, base
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the fake server did not start")
    env = {
        "FRONDE_LLAMA_SERVER": fake,
        "FRONDE_CACHE_DIR": str(folder),
        "FRONDE_BACKEND__PARALLEL": str(args.slots),
        "FRONDE_BACKEND__PIN_SLOTS": "false" if args.no_pin else "true",
        "FRONDE_MODES": json.dumps([str(m) for m in MODES]),
        "FRONDE_BACKEND__EXTRA_ARGS": json.dumps(knobs),
        "FRONDE_LOG_LEVEL": "warning",
    }
    argv = [sys.executable, "-m", "fronde", "serve", "--port", str(args.port)]
    proc = subprocess.Popen(argv, env=os.environ | env, stdout=subprocess.PIPE, text=True)
    if proc.stdout is not None:
        proc.stdout.readline()  # the ready line, once the backends are up
    return proc, f"http://127.0.0.1:{args.port}"


def main() -> None:
    """Parse the arguments, run the repetitions, print the table."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--reps", type=int, default=4, help="repetitions [4]")
    p.add_argument("--clients", type=int, default=32, help="requests in a burst [32]")
    p.add_argument("--bursts", type=int, default=2, help="bursts a repetition [2]")
    p.add_argument("--slots", type=int, default=32, help="slots a Fronde backend [32]")
    p.add_argument("--prefill-s", type=float, default=0.5, help="fake prefill, s [0.5]")
    p.add_argument("--tps", type=float, default=200, help="fake decode tok/s [200]")
    p.add_argument("--max-tokens", type=int, default=4, help="tokens an answer [4]")
    p.add_argument("--no-pin", action="store_true", help="Fronde without slot pinning")
    p.add_argument("--warm", action="store_true", help="open the upstream connections first")
    p.add_argument("--port", type=int, default=18460)
    args = p.parse_args()
    info = run_info()
    dirty = " (dirty)" if info["dirty"] else ""
    print(f"{info['started_at']} · {machine_line()} · commit {info['commit']}{dirty}")
    print(" ".join(sys.argv[1:]) or "(defaults)")
    print("rep burst | fronde ms | direct ms | excess ms | settle ms")
    excess: list[list[float]] = [[] for _ in range(args.bursts)]
    for rep in range(args.reps):
        got: dict[str, list[list[tuple[float, float]]]] = {}
        for arm in ("fronde", "direct") if rep % 2 == 0 else ("direct", "fronde"):
            with tempfile.TemporaryDirectory() as tmp:
                proc, base = start(arm, Path(tmp), args)
                try:
                    time.sleep(1)
                    if args.warm and arm == "fronde":
                        asyncio.run(warm(base, args.clients))
                        time.sleep(1)
                    model = "fronde:baseline" if arm == "fronde" else "fake"
                    got[arm] = []
                    for _ in range(args.bursts):
                        sent = burst(base, model, args.clients, args.max_tokens)
                        got[arm].append(asyncio.run(sent))
                        time.sleep(1)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
        for b in range(args.bursts):
            fr, di = (statistics.median(t for t, _ in got[a][b]) for a in ("fronde", "direct"))
            settle = statistics.median(s for _, s in got["fronde"][b])
            excess[b].append(fr - di)
            print(f"{rep:3d} {b + 1:5d} | {fr:9.0f} | {di:9.0f} | {fr - di:9.0f} | {settle:9.1f}")
    for b, xs in enumerate(excess):
        mid = statistics.median(xs)
        print(f"burst {b + 1}: excess median {mid:.0f} ms, [{min(xs):.0f}, {max(xs):.0f}]")


if __name__ == "__main__":
    main()
