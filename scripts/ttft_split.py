"""Where a streamed request's time to first token goes, straight to llama-server and through Fronde.

Starts ``fronde serve --mode baseline`` with ``server.stamps`` on (:mod:`fronde.stamps`; other
``FRONDE_*`` settings pass through) and uses its llama-server. Sends ``--n`` short streamed chat
requests each way (greedy, ``include_usage``, ``x-fronde-mode: baseline`` as the load benchmark's
``fr-plain``), one at a time, ``--block`` in a row to a path, ``--gap-s`` apart, the first path
alternating; ``--prompts distinct`` numbers each text at its start (both paths reuse the cached
system turn), ``same`` repeats one. Prints per path median [p25, p75] ms from the send to the
headers, the first chunk with text and the end, the server's ``prompt_ms``; the paired difference
(k-th via Fronde minus k-th direct); Fronde's marks (ms since it saw the request; CPU ms) too.

    python scripts/ttft_split.py --n 40 [--prompts same] [--block 5 --gap-s 0]

``--fronde-connection new`` opens a connection to Fronde for each request (the direct path
keeps its own): what a client without keep-alive adds to the hop. ``--context-kb N`` puts N KB
of source text before every question, the same each time: the server finds it cached, as it
finds an agent's conversation, while Fronde parses and scans all of it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

WARMUP, PATHS, PORT = 3, ("direct", "fronde"), 18620  # WARMUP: requests a path not counted
ROOT = Path(__file__).resolve().parent.parent
FORCE = {"x-fronde-mode": "baseline"}  # llama-server ignores it


@dataclass
class Sample:
    """One request: the client's times (``time.monotonic``, s) and the server's ``prompt_ms``."""

    sent: float
    headers: float
    first: float
    end: float
    prompt_ms: float

    def ms(self, name: str) -> float:
        """The time ``name`` (``headers``, ``first``, ``end``) since the send, ms."""
        return (getattr(self, name) - self.sent) * 1000


@dataclass
class Streamed:
    """One streamed chat as its client saw it.

    When its response head and its first text came (``time.monotonic``, s; ``first`` None:
    no text), and the server's ``timings``.
    """

    headers: float
    first: float | None
    timings: dict[str, Any]


def stream_chat(
    client: httpx.Client,
    url: str,
    text: str,
    max_tokens: int,
    headers: dict[str, str],
    check: bool = True,
) -> Streamed:
    """Send ``text`` to ``url`` as a greedy streamed chat with usage and read it to its end.

    Also used by ``scripts/server_decode.py``.

    Raises:
        httpx.HTTPStatusError: an error status, where ``check``.
        httpx.HTTPError: the connection failed.
    """
    body: dict[str, object] = {"messages": [{"role": "user", "content": text}], "stream": True}
    body |= {"max_tokens": max_tokens, "temperature": 0, "stream_options": {"include_usage": True}}
    first: float | None = None
    timings: dict[str, Any] = {}
    with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
        if check:
            r.raise_for_status()
        head = time.monotonic()
        for line in r.iter_lines():
            squeezed = line.replace(": ", ":")
            if first is None and '"content":"' in squeezed and '"content":""' not in squeezed:
                first = time.monotonic()
            if line.startswith("data: {") and '"timings"' in line:
                timings = json.loads(line[6:]).get("timings") or timings
    return Streamed(head, first, timings)


def one(client: httpx.Client, url: str, text: str, max_tokens: int, t0: float = 0.0) -> Sample:
    """Stream a chat request to ``url``, timed from ``t0`` (sent again once if stale)."""
    sent = t0 or time.monotonic()
    try:
        got = stream_chat(client, url, text, max_tokens, FORCE)
    except httpx.RemoteProtocolError:  # a connection a llama-server without 0008 had closed
        if t0:
            raise
        return one(client, url, text, max_tokens, sent)
    prompt_ms = float(got.timings.get("prompt_ms", float("nan")))
    return Sample(sent, got.headers, got.first or time.monotonic(), time.monotonic(), prompt_ms)


def spread(xs: list[float]) -> str:
    """``median [p25, p75]`` of ``xs``."""
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return f"{statistics.median(xs):7.2f} [{q[0]:.2f}, {q[2]:.2f}]"


def start(
    port: int, log: str, env: dict[str, str] | None = None, ready_s: float = 120.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``fronde serve --mode baseline`` on ``port``; return it and its backend's URL.

    Its stderr goes to ``log``. ``env`` adds to (or overrides) this process's environment
    and the stamps this script reads (``server.stamps``, JSON log lines); also used by
    ``scripts/server_decode.py``.

    Raises:
        SystemExit: it exited, or was not ready within ``ready_s`` seconds.
    """
    env = os.environ | {"FRONDE_SERVER__STAMPS": "true", "FRONDE_LOG_FORMAT": "json"} | (env or {})
    argv = [sys.executable, "-m", "fronde", "serve", "--port", str(port), "--mode", "baseline"]
    with open(log, "wb") as err:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    for _ in range(int(ready_s / 0.5)):
        time.sleep(0.5)
        if proc.poll() is not None:
            sys.exit(f"fronde serve exited; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            if r.status_code == 200:
                return proc, r.json()["backends"]["baseline"]["url"]
    proc.terminate()
    sys.exit(f"fronde serve was not ready in {ready_s:.0f} s")


def report(runs: dict[str, list[Sample]], log: str) -> None:
    """Print each path's times, the paired differences, and Fronde's marks with the client's."""
    print(f"{'path':8} {'headers ms':>24} {'TTFT ms':>26} {'total ms':>26} {'prompt_ms':>10}")
    for name, xs in runs.items():
        cols = [spread([s.ms(f) for s in xs]) for f in ("headers", "first", "end")]
        pm = statistics.median(s.prompt_ms for s in xs)
        print(f"{name:8} {cols[0]:>24} {cols[1]:>26} {cols[2]:>26} {pm:10.2f}")
    for f, what in (("first", "TTFT"), ("end", "total")):
        diff = [a.ms(f) - b.ms(f) for a, b in zip(runs["fronde"], runs["direct"], strict=True)]
        print(f"fronde - direct, paired, {what} ms: {spread(diff)}")
    with open(log) as fh:
        recs = [json.loads(line) for line in fh if '"request.stamps"' in line]
    rows, cpu = dict[str, list[float]](), dict[str, list[float]]()  # each mark's ms, CPU ms
    for s, rec in zip(runs["fronde"], recs[WARMUP : WARMUP + len(runs["fronde"])], strict=True):
        marks = {f"client {f}": (getattr(s, f) - rec["t0"]) * 1000 for f in ("sent", "first")}
        for k, v in (rec["ms"] | marks).items():
            rows.setdefault(k, []).append(v)
            cpu.setdefault(k, []).append(rec["cpu_ms"].get(k, 0.0))  # a client mark: none
    print(f"Fronde's marks, ms since its middleware saw the request, and its CPU ms ({log}):")
    for k, v in sorted(rows.items(), key=lambda kv: statistics.median(kv[1])):
        print(f"  {k:20} {spread(v):>26} {spread(cpu[k]) if k[:6] != 'client' else '':>26}")


def context_text(kb: int) -> str:
    """``kb`` KB of this repository's Python source, then a blank line ("" for 0)."""
    if kb <= 0:
        return ""
    source = (ROOT / "fronde" / "request" / "relay.py").read_text()
    return (source * (kb * 1024 // len(source) + 1))[: kb * 1024] + "\n\n"


def main() -> None:
    """Parse the arguments, send the requests, print the split."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--n", type=int, default=40, help="requests each way [40]")
    p.add_argument("--prompts", choices=["distinct", "same"], default="distinct")
    p.add_argument("--max-tokens", type=int, default=16, help="answer budget [16]")
    p.add_argument(
        "--context-kb",
        type=int,
        default=0,
        help="KB of source text before each question, the same every request (a cached "
        "prefix, as an agent's conversation is), so that parsing and scanning it shows [0]",
    )
    p.add_argument("--gap-s", type=float, default=0.3, help="pause after each request [0.3]")
    p.add_argument("--block", type=int, default=1, help="requests to a path in a row [1]")
    p.add_argument(
        "--fronde-connection",
        choices=["keep", "new"],
        default="keep",
        help="the client to Fronde keeps its connection, or opens one a request [keep]",
    )
    args = p.parse_args()
    b: int = args.block
    log = os.path.join(tempfile.gettempdir(), f"ttft-split-{os.getpid()}.log")
    proc, direct = start(PORT, log)
    urls = {"direct": direct, "fronde": f"http://127.0.0.1:{PORT}"}
    runs: dict[str, list[Sample]] = {name: [] for name in PATHS}
    context = context_text(args.context_kb)
    clients = {name: httpx.Client(timeout=120) for name in runs}
    if args.fronde_connection == "new":
        clients["fronde"] = httpx.Client(
            timeout=120, limits=httpx.Limits(max_keepalive_connections=0)
        )
    try:
        for i in range(-(-(WARMUP + args.n) // b) * b * 2):  # whole blocks
            name = PATHS[(i // b + i // (2 * b)) % 2]
            k = i // (2 * b) * b + i % b  # this path's k-th
            tag = "" if args.prompts == "same" else f"Request {2 * k + (name == 'fronde')}. "
            s = one(
                clients[name], urls[name], f"{context}{tag}Name three colours.", args.max_tokens
            )
            (runs[name] if WARMUP <= k < WARMUP + args.n else []).append(s)
            time.sleep(args.gap_s)
        time.sleep(1.0)  # the last stamps line is written
    finally:
        proc.terminate()
        proc.wait(30)
    print(
        f"{args.n} a path, {args.prompts} prompts, blocks of {args.block}, gap {args.gap_s} s, "
        f"connection to Fronde: {args.fronde_connection}"
    )
    report(runs, log)


if __name__ == "__main__":
    main()
