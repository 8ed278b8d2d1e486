"""What one request costs Fronde's CPU, part by part, in process: checkouts side by side.

The end-to-end figure (``relay_cost.py``'s ms a request) moves by ±0.5 ms between rounds
on a shared 2-core CPU, more than most parts of a request cost; here each part runs alone,
thousands of times, on uvloop (as ``fronde serve`` runs), and the best of 5 passes is kept,
which the other jobs on the machine disturb least. For each ``--tree`` in turn, ``--runs``
times alternating, a child process imports Fronde from that checkout, builds the app of
``fronde serve --mode baseline`` (a fake llama-server's models folder, nothing started) and
times, in µs:

- ``stream``: the chat route answering a stream of 5 pieces, the dispatcher's answer
  stubbed (no upstream): FastAPI's layers, the body's checks, the watch on the client,
  the streamed response;
- ``whole``: the same route answering a whole (JSON) answer, and ``route`` that route's
  function and its response called directly, without the app's layers;
- ``plan``: one ``Router.plan`` of that chat on the one-mode server;
- ``log``: one ``request.finished`` line below the log level (``warning``);
- ``gate``: the gate middleware around an app that sends a head of 7 headers.

    python scripts/request_cost.py --tree . --tree /tmp/old --runs 2
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
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

BODY = json.dumps({
    "model": "x", "messages": [{"role": "user", "content": "write power_1 in python"}],
    "max_tokens": 4, "stream": True,
}).encode()  # fmt: skip
HEAD = [
    (b"content-type", b"text/event-stream"), (b"x-fronde-mode", b"baseline"),
    (b"x-fronde-class", b"fallback"), (b"x-fronde-request-id", b"r1"),
    (b"x-fronde-overhead-ms", b"0.300"), (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]  # fmt: skip


def best_us(fn: Callable[[], object], n: int, passes: int = 5) -> float:
    """The best of ``passes`` passes of ``n`` calls of ``fn``: CPU µs a call (thread clock)."""
    best = float("inf")
    for _ in range(passes):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n * 1e6)
    return best


async def abest_us(fn: Callable[[], Awaitable[object]], n: int, passes: int = 5) -> float:
    """:func:`best_us` for a coroutine function, awaited in turn."""
    best = float("inf")
    for _ in range(passes):
        t0 = time.thread_time()
        for _ in range(n):
            await fn()
        best = min(best, (time.thread_time() - t0) / n * 1e6)
    return best


def _scope(app: Any) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2), "state": {}, "app": app,
        "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(BODY)).encode())],
    }  # fmt: skip


def _exchange() -> tuple[Any, Any]:
    """A client's ``receive`` and ``send``: the body, then a disconnect once the answer ended."""
    ended = asyncio.Event()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await ended.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            ended.set()

    return receive, send


async def measure() -> dict[str, float]:
    """The child: every part of :mod:`this script <request_cost>`, from ``sys.path``'s Fronde."""
    from fronde.api import routes
    from fronde.api.app import create_app
    from fronde.api.middleware import GateMiddleware
    from fronde.cli_options import settings_from
    from fronde.logging import configure_logging, get_logger
    from fronde.modes import Mode
    from fronde.request import Streamed, Whole
    from fronde.request.admission import Arrival
    from fronde.router.engine import Router

    settings = settings_from(None, {}, modes=[Mode.BASELINE], server={"port": 1})
    configure_logging("json", "warning")
    app = create_app(settings)
    rt = app.state.runtime
    headers = {"x-fronde-mode": "baseline", "x-fronde-class": "fallback"}
    streamed = True

    async def answer(*_: object, **__: object) -> object:
        if not streamed:
            return Whole({"ok": 1}, dict(headers))

        async def events() -> AsyncIterator[bytes]:
            for _ in range(5):
                yield b'data: {"choices":[]}\n\n'

        async def close() -> None:
            pass

        return Streamed(events(), dict(headers), close, 10.0)

    rt.dispatcher.answer = answer
    out: dict[str, float] = {}

    async def through_app() -> None:
        receive, send = _exchange()
        await app(_scope(app), receive, send)

    async def route_alone() -> None:
        from starlette.requests import Request

        receive, send = _exchange()
        scope = _scope(app)
        request = Request(scope, receive, send)
        fn: Any = routes.chat_completions
        takes_rt = "rt" in fn.__code__.co_varnames[: fn.__code__.co_argcount]
        response = await (fn(request, rt) if takes_rt else fn(request))
        await response(scope, receive, send)

    out["stream"] = await abest_us(through_app, 2000)
    streamed = False
    out["whole"] = await abest_us(through_app, 2000)
    out["route"] = await abest_us(route_alone, 2000)

    plans: list[tuple[Any, Any]] = []
    plan = Router.plan

    def capture(self: Router, *args: Any, **kwargs: Any) -> Any:
        plans.append((args, kwargs))
        return plan(self, *args, **kwargs)

    Router.plan = capture  # type: ignore[method-assign]
    try:
        body = routes.ChatRequest.parse(json.loads(BODY)).wire()
        rt.dispatcher.routable = lambda: [Mode.BASELINE]  # as once the backend is up
        await rt.dispatcher._admit("chat", body, None, Arrival(rt.router))
    finally:
        Router.plan = plan  # type: ignore[method-assign]
    args, kwargs = plans[-1]
    out["plan"] = best_us(lambda: plan(rt.router, *args, **kwargs), 3000)

    log = get_logger("fronde.router.engine")
    line = {"id": "r1", "status": "done", "route": "fallback", "mode": "baseline", "tokens": 4}
    out["log"] = best_us(lambda: log.info("request.finished", **line), 3000)

    async def head_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEAD})

    gate = GateMiddleware(
        head_app, keys=[], open_paths=[], known_paths=["/v1/chat/completions"], metrics=rt.metrics
    )
    gate_scope: dict[str, Any] = {"type": "http", "path": "/v1/chat/completions", "method": "POST"}
    gate_scope["headers"] = []
    receive, _ = _exchange()

    async def nothing(message: Any) -> None:
        pass

    out["gate"] = await abest_us(lambda: gate(gate_scope, receive, nothing), 5000)
    return out


def child() -> None:
    """Run :func:`measure` on uvloop and print its figures as one JSON line."""
    import uvloop

    print(json.dumps(uvloop.run(measure())))


def main() -> None:
    """Parse the arguments, run the trees in turn, print each part's figures."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, help="a Fronde checkout")
    ap.add_argument("--runs", type=int, default=2, help="runs of each tree, alternating")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    from relay_cost import fake_dir

    work = Path(tempfile.mkdtemp(prefix="request-cost-"))
    fake_dir(work)
    env = os.environ | {
        "FRONDE_MODELS_DIR": str(work), "FRONDE_CACHE_DIR": str(work),
        "FRONDE_LLAMA_SERVER": str(work / "llama-server"), "FRONDE_PROFILE": "cpu-gemma-270m",
    }  # fmt: skip
    got: dict[str, list[dict[str, float]]] = {t: [] for t in args.tree}
    for k in range(args.runs):
        for tree in args.tree if k % 2 == 0 else args.tree[::-1]:
            src = str(Path(tree).resolve())
            cmd = [sys.executable, __file__, "--tree", tree, "--child"]
            done = subprocess.run(
                cmd, env=env | {"PYTHONPATH": src}, capture_output=True, text=True, check=True
            )
            got[tree].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"run {k}: {tree}: {got[tree][-1]}", flush=True)
    print(f"load {os.getloadavg()[0]:.2f}; µs, median [lowest, highest] of {args.runs} runs:")
    for tree, runs in got.items():
        parts = ", ".join(
            f"{p} {statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]"
            for p in runs[0]
            for v in [[r[p] for r in runs]]
        )
        print(f"{tree}: {parts}")


if __name__ == "__main__":
    main()
