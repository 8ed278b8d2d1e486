"""Where a burst of clients lands: the measured rule's placements on fake backends.

Saves the load curves of a ``fronde bench load`` folder (its static arms, one
repetition) for a `fronde serve` whose llama-servers are the test suite's fake
(tests/fakes/fake_llama_server.py: no model, ``--fake-tps`` tokens a second), starts
it with 32 slots a backend and the four modes, sends ``--clients`` streamed chat
requests of the agent mix at once (or ``--spacing-ms`` apart) and prints where each
went (``x-fronde-class → x-fronde-mode``), once a fresh server is up and again 1 s
later, with Fronde's own time (``x-fronde-overhead-ms``) and the part of it spent in
the burst wait (``x-fronde-gather-ms``). Used in the closing note of issue 23:
``.venv/bin/python scripts/load_burst.py results/load-gpu-h200-cpu-gemma-270m-20261203-bs2``
(with ``--spacing-ms`` 0, 0.5, 1): on the commit before the arriving count every burst
went 11 baseline, 9 cascade, 9 ngram-mod, 3 ngram-simple; after it the first burst went
32 to baseline in three of four runs (21 once, 0.5 ms apart), the second 21-32 at 0
and 1 ms apart but 11 at 0.5 ms (a warm server plans each request before the next
arrives). With the burst wait (``router.gather_ms`` 10) the first burst went 32, 32, 31
to baseline and the second 32, 31, 31 at 0.5, 1 and 2 ms apart; with
``FRONDE_ROUTER__GATHER_MS=0`` the second went 21, 21, 11 (the first 21 at 2 ms).
Linux, a few seconds plus the start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import httpx

from fronde.bench.load import ROUTERS
from fronde.bench.load_mix import agent_mix
from fronde.bench.load_report import recorded_run
from fronde.bench.load_verdict import session_curves
from fronde.bench.store import Store
from fronde.config import load_settings
from fronde.evidence.calibration import load_key, save_load_curves
from fronde.modes import Mode

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
MODES = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]


def fake_binary(folder: Path) -> Path:
    """An executable in ``folder`` that runs the fake llama-server with this Python."""
    exe = folder / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def save_curves(run: Path, rep: int, env: dict[str, str]) -> str:
    """Save ``run``'s curves (repetition ``rep``'s static arms) for the settings of ``env``.

    Each mode's curve from the static arm the run recorded as its calibration; returns
    the key the curves are saved under (:func:`~fronde.evidence.calibration.load_key`).
    """
    store = Store(run / "records.jsonl")
    _, calibration = recorded_run(run, store)
    routers = set(ROUTERS.values())  # the static plan's samples: plain2's ratio included
    static = [s for s in store.samples() if s["rep"] == rep and s["arm"] not in routers]
    curves = session_curves(static, calibration, f"{run.name} rep {rep}")
    with mock.patch.dict(os.environ, env):
        settings = load_settings()
    key = load_key(settings)
    save_load_curves(settings.cache_dir, key, curves)
    return key


async def burst(
    base: str, clients: int, spacing_s: float
) -> tuple[Counter[str], list[tuple[float, float]]]:
    """Send ``clients`` streamed chat requests, the i-th ``i × spacing_s`` late.

    Returns where they went, and each one's (``x-fronde-overhead-ms``,
    ``x-fronde-gather-ms``): Fronde's own time before the upstream call and the part
    of it spent waiting for the burst to end, ms.
    """
    items = agent_mix().items
    async with httpx.AsyncClient(
        timeout=120, limits=httpx.Limits(max_keepalive_connections=0)
    ) as http:

        async def one(i: int) -> tuple[str, tuple[float, float]]:
            await asyncio.sleep(i * spacing_s)
            body = items[i % len(items)].body("chat", 64) | {"model": "fronde"}
            async with http.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
                where = f"{r.headers.get('x-fronde-class')} → {r.headers.get('x-fronde-mode')}"
                own = (
                    float(r.headers.get("x-fronde-overhead-ms", "nan")),
                    float(r.headers.get("x-fronde-gather-ms", "nan")),
                )
                async for _ in r.aiter_lines():
                    pass
            return where, own

        done = await asyncio.gather(*(one(i) for i in range(clients)))
        return Counter(where for where, _ in done), [own for _, own in done]


def main() -> None:
    """Parse the arguments, save the curves, start the server, send the bursts."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("run", type=Path, help="a `fronde bench load` folder with records.jsonl.gz")
    p.add_argument("--rep", type=int, default=0, help="the repetition whose curves [0]")
    p.add_argument("--clients", type=int, default=32, help="requests in the burst [32]")
    p.add_argument("--spacing-ms", type=float, default=0.0, help="between two clients [0]")
    p.add_argument("--bursts", type=int, default=2, help="bursts, one after another [2]")
    p.add_argument("--port", type=int, default=18450)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "FRONDE_LLAMA_SERVER": str(fake_binary(Path(tmp))),
            "FRONDE_CACHE_DIR": tmp,
            "FRONDE_BACKEND__PARALLEL": "32",
            "FRONDE_MODES": json.dumps([str(m) for m in MODES]),
            "FRONDE_BACKEND__EXTRA_ARGS": '["--fake-tps", "64"]',
            "FRONDE_ROUTER__LOAD_RULE": "measured",
            "FRONDE_ROUTER__LOAD_PLACEMENT": "best",
            "FRONDE_LOG_LEVEL": "warning",
        }
        print(f"curves saved for {save_curves(args.run, args.rep, env)}")
        argv = [sys.executable, "-m", "fronde", "serve", "--port", str(args.port)]
        serve = subprocess.Popen(
            argv, env=os.environ | env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            out = serve.stdout
            print(out.readline().strip() if out else "")  # the ready line, once the backends are up
            base = f"http://127.0.0.1:{args.port}"
            for n in range(args.bursts):
                where, own = asyncio.run(burst(base, args.clients, args.spacing_ms / 1000))
                print(f"burst {n + 1}: " + ", ".join(f"{k} {v}" for k, v in where.most_common()))
                overhead, gather = (sorted(x[k] for x in own) for k in (0, 1))
                print(
                    f"  Fronde's own time, ms: median {overhead[len(own) // 2]:.1f}, most "
                    f"{overhead[-1]:.1f}; of it the wait for the burst: median "
                    f"{gather[len(own) // 2]:.1f}, most {gather[-1]:.1f}"
                )
                time.sleep(1)
        finally:
            serve.terminate()
            serve.wait(timeout=30)


if __name__ == "__main__":
    main()
