"""The server's own decode rate reached straight and through Fronde, by llama-server's ``-t``.

A streamed answer through Fronde costs its process some CPU a token; on a host where
llama-server's decode threads hold every core, that CPU is taken from them. This probe
asks how much of it shows in the server's own decode rate
(``timings.predicted_per_second``, tok/s), and whether leaving a core free
(``backend.threads``) removes it.

For each block and each ``--threads`` value in turn (rotated block by block), it starts
``fronde serve --mode baseline`` with ``FRONDE_BACKEND__THREADS`` set (other ``FRONDE_*``
settings pass through; the profile defaults to SmolLM2), then runs ``--rounds`` rounds,
each ``--n`` streamed chats one at a time straight to Fronde's llama-server and ``--n``
through Fronde (which path goes first alternates), distinct prompts, greedy, 64 tokens.
Each path keeps one connection. Per round it keeps each path's median decode rate and
median first token − prefill (the client's time to the first text less the server's
``prompt_ms``); it prints each round and, per thread count, the median of the rounds' ratios
(through Fronde ÷ straight) and of their first-token differences, with the lowest and
highest round. ``--out`` writes one JSON line a round.

    python scripts/server_decode.py --threads 2 --threads 1 --blocks 2 --rounds 4

Raises SystemExit with a message when Fronde does not come up within 300 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any, NamedTuple

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_split import start, stream_chat

READY_S = 300.0


class Answer(NamedTuple):
    """One answer: the server's decode rate (tok/s), first token − prefill and prefill (ms)."""

    rate: float
    outside_ms: float
    prompt_ms: float


@contextlib.contextmanager
def fronde(port: int, threads: int, log: Path) -> Generator[tuple[str, str], None, None]:
    """Run ``fronde serve --mode baseline`` at ``-t threads``; yield its URL and its server's.

    Started by ``ttft_split.start`` (a sibling script) without its stamps, so that Fronde
    does no more than a user's: the profile defaults to SmolLM2, the log level to warning.
    """
    env = {
        "FRONDE_BACKEND__THREADS": str(threads),
        "FRONDE_SERVER__STAMPS": "false",
        "FRONDE_LOG_LEVEL": os.environ.get("FRONDE_LOG_LEVEL", "warning"),
        "FRONDE_PROFILE": os.environ.get("FRONDE_PROFILE", "cpu-smollm2-135m"),
    }
    proc, backend = start(port, str(log), env, ready_s=READY_S)
    try:
        yield f"http://127.0.0.1:{port}", backend
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def answer(client: httpx.Client, base: str, k: int, headers: dict[str, str]) -> Answer | None:
    """One streamed chat: its server's decode rate (tok/s), first token − prefill, prefill (ms).

    The second is the client's time to the first text event less the server's own
    ``prompt_ms`` (the third): what the path adds outside the prefill. None without timings.
    """
    t0 = time.monotonic()
    text = f"Item {k}: a short paragraph on {k}."
    got = stream_chat(client, base, text, 64, headers, check=False)
    if got.first is None or "predicted_per_second" not in got.timings:
        return None
    prompt_ms = float(got.timings.get("prompt_ms", 0.0))
    outside_ms = (got.first - t0) * 1000 - prompt_ms
    return Answer(float(got.timings["predicted_per_second"]), outside_ms, prompt_ms)


def one_round(url: str, backend: str, n: int, first: str, k0: int) -> dict[str, float]:
    """Each path's median decode rate and first token − prefill over ``n`` answers.

    Keys ``direct``, ``fronde`` (tok/s), ``direct_out_ms``, ``fronde_out_ms`` and the
    prefill's ``direct_prompt_ms``, ``fronde_prompt_ms``; each path keeps one connection
    (an SDK's keep-alive), ``first`` path first.
    """
    paths: dict[str, tuple[str, dict[str, str]]] = {
        "direct": (backend, {}),
        "fronde": (url, {"x-fronde-mode": "baseline"}),
    }
    order = [first, *(p for p in paths if p != first)]
    out: dict[str, float] = {}
    for i, path in enumerate(order):
        base, headers = paths[path]
        with httpx.Client(timeout=120) as client:
            got = [answer(client, base, k0 + i * n + j, headers) for j in range(n)]
        done = [a for a in got if a is not None]
        out[path] = statistics.median(a.rate for a in done)
        out[f"{path}_out_ms"] = statistics.median(a.outside_ms for a in done)
        out[f"{path}_prompt_ms"] = statistics.median(a.prompt_ms for a in done)
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """Per thread count: the median of the rounds' ratios, [lowest, highest], and rates."""
    lines: list[str] = []
    for t in sorted({r["threads"] for r in rows}, reverse=True):
        mine = [r for r in rows if r["threads"] == t]
        ratio = [r["fronde"] / r["direct"] for r in mine]
        lines.append(
            f"-t {t}: through Fronde ÷ straight {statistics.median(ratio):.3f} "
            f"[{min(ratio):.3f}, {max(ratio):.3f}] over {len(mine)} rounds; decode tok/s "
            f"straight {statistics.median(r['direct'] for r in mine):.1f}, "
            f"through Fronde {statistics.median(r['fronde'] for r in mine):.1f}"
        )
        for key, what in (("out_ms", "first token − prefill"), ("prompt_ms", "prefill")):
            extra = [r[f"fronde_{key}"] - r[f"direct_{key}"] for r in mine if f"fronde_{key}" in r]
            if extra:
                lines.append(
                    f"      {what}, through Fronde − straight: "
                    f"{statistics.median(extra):+.2f} ms [{min(extra):+.2f}, {max(extra):+.2f}]"
                )
    return lines


def main() -> None:
    """Parse the options, run the blocks, print the rounds and the summary."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--threads", type=int, action="append", required=True)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--port", type=int, default=18651)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "server_decode.log")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    k = 0
    for block in range(args.blocks):
        shift = block % len(args.threads)
        for t in args.threads[shift:] + args.threads[:shift]:
            with fronde(args.port, t, args.log) as (url, backend):
                one_round(url, backend, 2, "direct", 10_000 + k)  # warm both paths
                for r in range(args.rounds):
                    first = "direct" if (r + block) % 2 == 0 else "fronde"
                    row = {"block": block, "threads": t, "round": r, "first": first}
                    row |= one_round(url, backend, args.n, first, k)
                    k += 2 * args.n
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if args.out:
                        with args.out.open("a") as f:
                            f.write(json.dumps(row) + "\n")
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
