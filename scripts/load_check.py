# pyright: reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""An outside client's tok/s for one server at c clients: the check on `fronde bench load`.

It imports nothing from Fronde. c closed-loop streaming clients over keep-alive
connections send the requests of a `workload.json` (`fronde bench load` writes it into
its results folder: every body as the benchmark sends it, and the endpoint), in order
and round again, client k its next request as soon as its last answer ended, for
--warmup-s and then --window-s seconds; when the window closes the answers still
streaming are cut off. With --pin client k sends llama-server's `id_slot` = k.

Counting, the benchmark's own rule: an answer's tokens are its usage
`completion_tokens` (else `timings.predicted_n`, else its text events; a cut-off
answer's, its text events), spread evenly over its text events (SSE events whose delta
carries text); those whose events arrived inside the window count. tok/s = tokens
counted ÷ window.

    python scripts/load_check.py --url http://127.0.0.1:8080 --clients 8 \
        --workload results/<run>/workload.json --window-s 20 --warmup-s 3 --pin
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx

Answer = tuple[list[float], int]  # an answer's text events' arrival times (s), its tokens
Body = dict[str, Any]


def text_of(event: dict[str, Any]) -> str:
    """The text an OpenAI stream event carries (chat delta or completion text)."""
    out = ""
    for c in event.get("choices") or []:
        piece = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
        out += piece if isinstance(piece, str) else ""
    return out


async def stream(http: httpx.AsyncClient, url: str, body: Body, head: Body, at: list[float]) -> int:
    """One streamed answer: appends each text event's arrival to ``at``; returns its tokens."""
    tokens = 0
    async with http.stream("POST", url, json=body, headers=head) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url} answered {resp.status_code}: {(await resp.aread())[:200]!r}")
        async for line in resp.aiter_lines():
            if line == "data: [DONE]":
                break
            if not line.startswith("data: {"):
                continue
            event: dict[str, Any] = json.loads(line[6:])
            if text_of(event):
                at.append(time.perf_counter())
            done = (event.get("usage") or {}).get("completion_tokens")
            tokens = int(done or (event.get("timings") or {}).get("predicted_n") or tokens)
    return tokens or len(at)


async def send(http: httpx.AsyncClient, url: str, body: Body, head: Body, at: list[float]) -> int:
    """:func:`stream`, once again when a kept-alive connection was closed before any answer."""
    try:
        return await stream(http, url, body, head, at)
    except httpx.RemoteProtocolError as exc:
        if "without sending a response" not in str(exc):
            raise
    return await stream(http, url, body, head, at)


def hello(k: int, chat: bool) -> dict[str, Any]:
    """The k-th short request that gives a server slot history (as the benchmark's)."""
    text = f"Say hello to visitor number {k}."
    body = {"max_tokens": 8, "temperature": 0.0, "stream": True}
    body |= {"stream_options": {"include_usage": True}}
    return body | ({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})


async def check(args: argparse.Namespace, bodies: list[Body], url: str) -> Body:
    """Run the clients on ``bodies`` at ``url``; the figures the command prints."""
    head = dict(h.split(":", 1) for h in args.header)
    keep = max(args.clients, args.history)  # idle for 4 s at most: the servers keep 5
    limits = httpx.Limits(max_keepalive_connections=keep, keepalive_expiry=4.0)
    answers: list[Answer] = []
    failed = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0, connect=10.0), limits=limits) as http:
        hellos = [hello(k, "messages" in bodies[0]) for k in range(args.history)]
        await asyncio.gather(*(send(http, url, b, head, []) for b in hellos))
        lo, wall = time.perf_counter() + args.warmup_s, time.time() + args.warmup_s
        hi = lo + args.window_s
        cursor = itertools.count()

        async def client(k: int) -> None:
            nonlocal failed
            while time.perf_counter() < hi:
                body = bodies[next(cursor) % len(bodies)] | ({"id_slot": k} if args.pin else {})
                at: list[float] = []
                try:
                    answers.append((at, await send(http, url, body, head, at)))
                except (httpx.HTTPError, RuntimeError):
                    failed += 1
                except asyncio.CancelledError:  # cut off when the window closed
                    answers.append((at, len(at)))
                    raise

        tasks = [asyncio.create_task(client(k)) for k in range(args.clients)]
        await asyncio.wait(tasks, timeout=max(0.0, hi - time.perf_counter()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    # Tokens that arrived in [lo, hi]: each answer's tokens spread over its text events.
    tokens = sum(n * sum(lo <= t <= hi for t in at) / len(at) for at, n in answers if at)
    return {
        "url": args.url, "clients": args.clients, "pin": args.pin, "window_s": args.window_s,
        "warmup_s": args.warmup_s, "history": args.history, "answers": len(answers),
        "failed": failed, "tokens": round(tokens, 1), "tok_s": round(tokens / args.window_s, 1),
        "tokens_all": sum(n for _, n in answers), "window_wall": [wall, wall + args.window_s],
    }  # fmt: skip


def main() -> None:
    """Parse the command line, run, print one line (or one JSON object with --json)."""
    p = argparse.ArgumentParser(description="An outside client's tok/s at c clients.")
    p.add_argument("--url", required=True, help="the server's base URL, no /v1")
    p.add_argument("--clients", type=int, required=True, help="closed-loop clients, c")
    p.add_argument("--workload", required=True, help="a workload.json of `fronde bench load`")
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--pin", action="store_true", help="client k sends id_slot = k")
    p.add_argument("--history", type=int, default=0, help="short requests sent at once first")
    p.add_argument("--header", action="append", default=[], help="NAME:VALUE, sent with each")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args()
    work: dict[str, Any] = json.loads(Path(args.workload).read_text())
    bodies = [item["body"] for item in work["items"]]
    out = asyncio.run(check(args, bodies, args.url.rstrip("/") + work["path"]))
    pinned = " pinned" if args.pin else ""
    line = f"c={out['clients']}{pinned}: {out['tok_s']} tok/s ({out['tokens']} tokens in "
    line += f"{args.window_s} s, {out['answers']} answers, {out['failed']} failed)"
    print(json.dumps(out) if args.json else line)


if __name__ == "__main__":
    main()
