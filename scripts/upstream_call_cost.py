"""What Fronde's streamed upstream call costs its CPU, through aiohttp's session or through httpx.

One process runs a keep-alive HTTP server that answers every POST with a two-event SSE body
and Fronde's :class:`~fronde.backends.client.BackendClient` (the aiohttp transport, as
``fronde serve`` builds it), which opens ``--calls`` streamed calls one after another and
reads each to its end. The rounds alternate the two ways the call can go: ``native``
(:mod:`fronde.backends.aiohttp_post`, the default) and ``httpx`` (httpx's request
machinery over the same transport, as before it). CPU is :func:`time.process_time` per
call, the test server's share included (the same in both).

    python scripts/upstream_call_cost.py [--calls 300 --rounds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvloop

import fronde.backends.client as client_module
from fronde.backends.client import BackendClient, make_http_client
from fronde.config_sections import UpstreamSettings
from fronde.json_types import JSONObject

SSE = b"data: 1\n\ndata: [DONE]\n\n"
BODY: JSONObject = {
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. " * 20},
        {"role": "user", "content": "Name three colours."},
    ],
    "max_tokens": 2,
    "stream": True,
}


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request on the connection with :data:`SSE`, until it closes."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            fields = head.lower().split(b"\r\n")
            n = next(int(f.split(b":")[1]) for f in fields if f.startswith(b"content-length"))
            await reader.readexactly(n)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n%b" % (len(SSE), SSE)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(calls: int, rounds: int) -> None:
    """Run the rounds and print each way's CPU a call, median [lowest, highest]."""
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = BackendClient(make_http_client(UpstreamSettings(client="aiohttp")))
    native_session = client_module.aiohttp_session

    def no_session(http: object) -> None:
        return None

    async def run(n: int, native: bool) -> float:
        client_module.aiohttp_session = native_session if native else no_session
        t0 = time.process_time()
        for _ in range(n):
            async with client.stream(url, "/v1/chat/completions", BODY) as upstream:
                async for _ in upstream.line_batches():
                    pass
        return (time.process_time() - t0) / n * 1000

    await run(50, True)
    await run(50, False)  # warm both ways
    ms: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for native in (True, False) if r % 2 else (False, True):
            ms[native].append(await run(calls, native))
    for native, xs in ms.items():
        name = "native" if native else "httpx"
        print(f"{name:6} {statistics.median(xs):.3f} ms CPU a call [{min(xs):.3f}, {max(xs):.3f}]")
    await client.http.aclose()
    server.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    uvloop.run(main(args.calls, args.rounds))
