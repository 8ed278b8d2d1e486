"""What each topology costs a user: memory, start time and switching modes.

One llama-server for every mode (``single``), one per mode (``per-mode``), and one per
mode with a single one resident (``swap``: the others stopped until a request needs
them). Each arm is `fronde serve` started fresh with the same profile, slots and
context; then a mixed workload, one request at a time, whose mode changes every
request (``fronde:<mode>`` in turn over the modes up, each answer ``--max-tokens``
long), which is where swap residency pays a restart.

Memory: the GPU's used MiB from ``nvidia-smi`` where there is one (the whole card,
less what it used before the arm started), else the summed resident set (VmRSS) of
the llama-server processes ``/health`` names. A figure per arm, a JSON line each:

    python scripts/topology_cost.py --profile cpu-smollm2-135m --rounds 3 \
        --out results/topology-cpu-<stamp>/topology.jsonl

``--topology`` picks arms (default: all three); ``--slots``/``--ctx`` as the load runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fronde.bench.serve import running_serve

ENV = {
    "single": {"FRONDE_BACKEND__TOPOLOGY": "single"},
    "per-mode": {"FRONDE_BACKEND__TOPOLOGY": "per-mode"},
    "swap": {"FRONDE_BACKEND__TOPOLOGY": "per-mode", "FRONDE_RESIDENCY": "swap"},
}
PROMPT = "Write three sentences about the sea."


def gpu_used_mib() -> int | None:
    """Used MiB on the first GPU (``nvidia-smi``), or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    return int(out[0]) if out else None


def rss_mib(pids: set[int]) -> float:
    """Summed VmRSS of ``pids`` in MiB (``/proc/<pid>/status``; a gone pid counts 0)."""
    total_kib = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


def mixed(base: str, modes: list[str], n: int, max_tokens: int) -> list[float]:
    """Wall seconds of ``n`` sequential chat requests, the mode changing every request."""
    walls: list[float] = []
    with httpx.Client(timeout=600) as client:
        for k in range(n):
            body = {
                "model": f"fronde:{modes[k % len(modes)]}",
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            t0 = time.monotonic()
            r = client.post(f"{base}/v1/chat/completions", json=body)
            r.raise_for_status()
            walls.append(time.monotonic() - t0)
    return walls


def one(topology: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start ``topology`` fresh, measure it, stop it: one JSON record."""
    env = {**ENV[topology], "FRONDE_PROFILE": args.profile, "FRONDE_LOG_LEVEL": "warning"}
    env |= {"FRONDE_BACKEND__PARALLEL": str(args.slots), "FRONDE_BACKEND__CTX_SIZE": str(args.ctx)}
    before = gpu_used_mib()
    t0 = time.monotonic()
    with running_serve(None, 600, (), env=env) as serve:
        ready_s = time.monotonic() - t0
        health = httpx.get(f"{serve.base_url}/health", timeout=10).json()
        up = [m for m, b in health["backends"].items() if b["state"] in ("ready", "stopped")]
        pids = {int(b["pid"]) for b in health["backends"].values() if b.get("pid")}
        used = gpu_used_mib()
        mem = {"rss_mib": round(rss_mib(pids), 1)}
        if used is not None and before is not None:
            mem["gpu_mib"] = used - before
        walls = mixed(serve.base_url, up, args.requests, args.max_tokens)
        after = gpu_used_mib()
        if after is not None and before is not None:
            mem["gpu_mib_after"] = after - before  # swap: the resident one at the end
    return {
        "topology": health.get("topology", topology) if topology != "swap" else "swap",
        "arm": topology, "profile": args.profile, "slots": args.slots, "ctx": args.ctx,
        "modes": up, "servers": len(pids), "ready_s": round(ready_s, 2), **mem,
        "requests": len(walls), "mixed_s": round(sum(walls), 2),
        "per_request_s": round(sum(walls) / len(walls), 3), "max_request_s": round(max(walls), 2),
    }  # fmt: skip


def main() -> int:
    """Run the arms in turn for ``--rounds`` rounds; print and append a line each."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--profile", default=os.environ.get("FRONDE_PROFILE", "cpu-smollm2-135m"))
    ap.add_argument("--topology", action="append", choices=list(ENV))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--requests", type=int, default=12, help="mixed requests an arm")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    arms = args.topology or list(ENV)
    for k in range(args.rounds):
        for topology in arms if k % 2 == 0 else arms[::-1]:  # turned order each round
            rec = one(topology, args) | {"round": k}
            print(json.dumps(rec), flush=True)
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
