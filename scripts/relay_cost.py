"""What a streamed token costs the relay in front of llama-server, against two floors.

Each arm is a process between this client and one fake llama-server
(``tests/fakes/fake_llama_server.py``, paced at --tps, one event per token, so every
token is one upstream read and one downstream write):

- ``fronde:DIR``: ``fronde serve --mode baseline`` run from the checkout DIR (its
  relayed-stream route: one mode, no probe), the fake as its llama-server;
  ``fronde-iter:DIR`` (and ``fronde-iter+held:DIR``) the same with ``server.push`` off
  (each read sent through ASGI ``send`` by the task it wakes, not written from the read's
  callback);
  ``fronde+held:DIR`` the same over a fake that sends the text held back for a stop
  string (``--fake-held-stop-text``, as patch 0009), so that ``--stop`` strings go upstream;
  ``fronde+whole:DIR`` over a fake that also says it stops a whole answer for a gone client
  (``--fake-whole-stops``, as patch 0010), so that ``--whole`` answers go upstream whole;
  ``fronde-probe:DIR`` Fronde routing between baseline and ngram-mod on one fake
  llama-server that takes per-request speculation (``--fake-per-request``), every
  request probed (``router.probe`` always, the floor baseline, no prediction): the probe
  route, its segments spliced into one stream;
- ``asgi``: the least an ASGI relay does (uvicorn with uvloop and httptools, one aiohttp
  session, each upstream piece sent on as it comes): the floor of Fronde's stack;
- ``tcp``: asyncio Protocols on uvloop passing bytes through (no HTTP parsing): the
  floor of a Python relay;
- ``wake``, ``driven``, ``direct``: uvicorn as in ``asgi``, but the upstream answer read
  by an asyncio Protocol with httptools' parser (no client library), its body pieces
  sent on (``wake``) by a task woken once a read, through ``await send``; (``driven``)
  from the Protocol's ``data_received`` itself, through ``send`` wrapped in three
  closures (as Starlette's middleware stack wraps it) and run to its end at once
  (uvicorn's ``send`` awaits nothing but flow control); (``direct``) from
  ``data_received`` straight to uvicorn's transport, chunk-framed: how far a relay
  could get that left the ASGI send path for the stream's bytes.

For each arm in turn, round after round, it streams --requests completions of
--long tokens and as many of --short tokens, one at a time over one keep-alive
connection, and reads the arm's ``utime + stime`` from ``/proc/PID/stat``. CPU per
token = (long − short) ÷ (the tokens between them), which leaves out what a request
costs once (printed apart, ms a request). Median [lowest, highest] over the rounds, and
each arm's difference from the first, paired by round.

    python scripts/relay_cost.py --arm fronde:. --arm fronde:/tmp/old --arm asgi --arm tcp
    python scripts/relay_cost.py --arm asgi --arm wake --arm driven --arm direct --arm tcp
    python scripts/relay_cost.py --arm fronde:. --arm fronde+held:. --arm asgi --stop
    python scripts/relay_cost.py --arm fronde+held:. --arm fronde+whole:. --whole

With ``--whole`` every request is non-streamed, and a token is one the answer's ``usage``
counts (the floors relay streams only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"

ASGI_FLOOR = """
import sys, aiohttp, uvicorn
UP, session = sys.argv[1], None
async def app(scope, receive, send):
    global session
    if scope["type"] != "http":
        return
    body = b""
    while True:
        m = await receive(); body += m.get("body", b"")
        if not m.get("more_body"): break
    session = session or aiohttp.ClientSession()
    head = {"content-type": "application/json"}
    async with session.post(UP + scope["path"], data=body, headers=head) as r:
        await send({"type": "http.response.start", "status": r.status,
                    "headers": [(b"content-type", b"text/event-stream")]})
        async for piece in r.content.iter_any():
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
uvicorn.run(app, port=int(sys.argv[2]), loop="uvloop", http="httptools",
            log_level="warning", access_log=False, lifespan="off")
"""

TCP_FLOOR = """
import asyncio, sys, uvloop
UP, PORT = int(sys.argv[1].rsplit(":", 1)[1]), int(sys.argv[2])
class Up(asyncio.Protocol):
    def __init__(self, down): self.down = down
    def data_received(self, data): self.down.write(data)
    def connection_lost(self, exc): self.down.close()
class Down(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.up, self.early = t, None, []
        asyncio.ensure_future(self.connect())
    async def connect(self):
        loop = asyncio.get_running_loop()
        self.up, _ = await loop.create_connection(lambda: Up(self.t), "127.0.0.1", UP)
        for data in self.early: self.up.write(data)
    def data_received(self, data):
        (self.early.append if self.up is None else self.up.write)(data)
    def connection_lost(self, exc):
        if self.up: self.up.close()
async def main():
    srv = await asyncio.get_running_loop().create_server(Down, "127.0.0.1", PORT)
    await srv.serve_forever()
uvloop.run(main())
"""

PROTOCOL_UP = """
import asyncio, sys, httptools, uvicorn
HOST, UPORT = sys.argv[1].split("//")[1].rsplit(":", 1)
HOW = sys.argv[3]
class Up(asyncio.Protocol):
    def __init__(self, sink, end):
        self.sink, self.end, self.parser = sink, end, httptools.HttpResponseParser(self)
    def data_received(self, data): self.parser.feed_data(data)
    def on_body(self, body): self.sink(body)
    def on_message_complete(self): self.end()
    def connection_lost(self, exc): self.end()
def wrapped(send):
    async def a(m): await send(m)
    async def b(m): await a(m)
    async def c(m): await b(m)
    return c
def at_once(send, message):
    try: send(message).send(None)
    except StopIteration: return
    raise RuntimeError("send awaited (flow control)")
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        m = await receive(); body += m.get("body", b"")
        if not m.get("more_body"): break
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    loop = asyncio.get_running_loop()
    ended, wake, pending = loop.create_future(), [loop.create_future()], []
    def end():
        ended.done() or ended.set_result(None)
        wake[0].done() or wake[0].set_result(None)
    if HOW == "direct":
        down = send.__self__.transport
        sink = lambda b: down.write(b"%x\\r\\n%b\\r\\n" % (len(b), b))
    elif HOW == "driven":
        send_c = wrapped(send)
        sink = lambda b: at_once(send_c, {"type": "http.response.body", "body": b,
                                          "more_body": True})
    else:
        def sink(b):
            pending.append(b)
            wake[0].done() or wake[0].set_result(None)
    up, _ = await loop.create_connection(lambda: Up(sink, end), HOST, int(UPORT))
    up.write(b"POST %b HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json\\r\\n"
             b"content-length: %d\\r\\n\\r\\n%b" % (scope["path"].encode(), len(body), body))
    while not ended.done() or pending:
        await wake[0]
        wake[0] = loop.create_future()
        while pending:
            await send({"type": "http.response.body", "body": pending.pop(0), "more_body": True})
    up.close()
    await send({"type": "http.response.body", "body": b"", "more_body": False})
uvicorn.run(app, port=int(sys.argv[2]), loop="uvloop", http="httptools",
            log_level="warning", access_log=False, lifespan="off")
"""

UP_ARMS = ("wake", "driven", "direct")
"""The arms of :data:`PROTOCOL_UP`: how its body pieces reach the client."""


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """CPU seconds process ``pid``'s live threads have run (Linux ``/proc``, nanoseconds).

    Each thread's ``schedstat`` counts its run time exactly; ``utime + stime`` in
    ``/proc/PID/stat`` comes in clock ticks (10 ms), which over a round's 2,480 tokens is
    a step of 0.004 ms a token. A thread that exited takes its time with it; the arms
    keep theirs (the event loop's, the resolver's pool).
    """
    total_ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total_ns += int(f.read().split()[0])
    return total_ns / 1e9


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    """Return once ``url`` answers; raise SystemExit if ``proc`` died first."""
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up in 60 s")


def start(arm: str, upstream: str, tps: float, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``arm`` in front of ``upstream`` (a fake llama-server's URL); (process, its URL)."""
    port = free_port()
    floors = {"asgi": ASGI_FLOOR, "tcp": TCP_FLOOR} | dict.fromkeys(UP_ARMS, PROTOCOL_UP)
    if arm in floors:
        cmd = [sys.executable, "-c", floors[arm], upstream, str(port), arm]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        wait_up(url + "/health", proc)
        return proc, url
    kind, _, where = arm.partition(":")
    src = Path(where).resolve()
    fake_args = ["--fake-tps", str(tps)]
    fake_args += ["--fake-held-stop-text"] if kind.endswith(("+held", "+whole")) else []
    fake_args += ["--fake-whole-stops"] if kind.endswith("+whole") else []
    mode = ["--mode", "baseline"]
    probe: dict[str, str] = {}
    if kind == "fronde-probe":
        fake_args += ["--fake-per-request"]
        mode = []
        probe = {
            "FRONDE_MODES": '["baseline", "ngram-mod"]', "FRONDE_ROUTER__PROBE": "always",
            "FRONDE_ROUTER__FLOOR": "baseline", "FRONDE_ROUTER__PREDICT": "false",
        }  # fmt: skip
    env = os.environ | probe | {
        "PYTHONPATH": str(src), "FRONDE_MODELS_DIR": str(work), "FRONDE_CACHE_DIR": str(work),
        "FRONDE_LLAMA_SERVER": str(work / "llama-server"), "FRONDE_PROFILE": "cpu-gemma-270m",
        "FRONDE_LOG_LEVEL": "warning",
        "FRONDE_BACKEND__EXTRA_ARGS": json.dumps(fake_args),
    }  # fmt: skip
    if kind.startswith("fronde-iter"):  # unset: the default (on), and a checkout without it
        env["FRONDE_SERVER__PUSH"] = "false"
    cmd = [sys.executable, "-m", "fronde", "serve", "--port", str(port), *mode]
    # From DIR itself: ``python -m`` puts the working directory before PYTHONPATH.
    proc = subprocess.Popen(
        cmd, env=env, cwd=src, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_up(f"http://127.0.0.1:{port}/health", proc)
    return proc, f"http://127.0.0.1:{port}"


NEVER_STOP = "\n\n### never said"
"""The stop string ``--stop`` sends: one the fake never writes, so every answer runs to its
budget while Fronde matches the string against each event (it owns a stream's stops)."""


def stream_cpu(
    url: str, pid: int, n: int, tokens: int, first: int, stop: bool = False, whole: bool = False
) -> tuple[float, int]:
    """Stream ``n`` completions of ``tokens`` through ``url``: (CPU s of ``pid``, text events).

    With ``stop``, each request carries :data:`NEVER_STOP`; with ``whole`` each is
    non-streamed, and the tokens its ``usage`` counts stand for the text events.
    """
    got = 0
    c0 = cpu_s(pid)
    with httpx.Client(timeout=300) as http:
        for i in range(first, first + n):
            body: dict[str, object] = {"model": "x"}
            body["prompt"] = f"def power_{i}(x): return x to the {i}th power now"
            body |= {"max_tokens": tokens, "stream": not whole}
            if stop:
                body["stop"] = [NEVER_STOP]
            if whole:
                answer = http.post(f"{url}/v1/completions", json=body).json()
                got += int(answer["usage"]["completion_tokens"])
                continue
            with http.stream("POST", f"{url}/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and '"text":"' in line.replace(" ", ""):
                        got += 1
    time.sleep(0.5)  # what the arm does once an answer has ended
    return cpu_s(pid) - c0, got


def profile(pid: int, url: str, out: Path, n: int, tokens: int) -> None:
    """Sample ``pid`` with py-spy (500 Hz, not stopping it) while ``n`` answers stream.

    Writes py-spy's collapsed stacks (``--format raw``, idle samples left out) to ``out``
    and the share of the samples each package's frames hold beside it (:func:`shares`).
    """
    exe = shutil.which("py-spy", path=Path(sys.executable).parent) or "py-spy"
    spy = subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--rate", "500", "--nonblocking",
         "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # py-spy attaches
    stream_cpu(url, pid, n, tokens, 90_000)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    out.with_suffix(".shares.txt").write_text(shares(out.read_text()))


PACKAGES = (
    "fronde/request", "fronde/backends", "fronde/api", "fronde/router", "fronde/evidence",
    "fronde", "uvicorn", "starlette", "fastapi", "aiohttp", "httpx_aiohttp", "httpx",
    "httpcore", "structlog", "pydantic", "anyio", "asyncio", "uvloop",
)  # fmt: skip
"""The packages :func:`shares` tells apart, the more specific first."""


def shares(raw: str) -> str:
    """Each package's share of the samples, from py-spy's collapsed stacks.

    A sample counts for a package where any frame of its stack is in it (*inclusive*)
    and for the package of its innermost Python frame (*self*). Lines of ``frame;frame
    count``; a frame names its file as ``function (path:line)``.
    """
    total = 0
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        total += k
        packs = [_package(frame) for frame in stack.split(";")]
        for pack in set(packs):
            incl[pack] += k
        own[packs[-1]] += k
    rows = [f"{total} samples; package: inclusive % / self %"]
    for pack, _ in incl.most_common():
        rows.append(f"{pack}: {100 * incl[pack] / total:.1f} / {100 * own[pack] / total:.1f}")
    return "\n".join(rows) + "\n"


def _package(frame: str) -> str:
    """The package of one py-spy frame (``function (path:line)``), or ``other``."""
    path = frame.rpartition("(")[2]
    for pack in PACKAGES:
        if f"/{pack}/" in path or path.startswith(f"{pack}/"):
            return pack
    return "other"


def fake_dir(work: Path) -> None:
    """A models folder with the gemma profile and a sparse GGUF, and the fake as llama-server."""
    shutil.copy(ROOT / "models" / "cpu-gemma-270m.toml", work)
    sys.path.insert(0, str(ROOT))
    from fronde.runtime.models import load_profile

    target = load_profile(work, "cpu-gemma-270m").target
    with (work / target.file).open("wb") as fh:
        fh.truncate(target.size or 1)
    exe = work / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)


def main() -> None:
    """Parse the arguments, run the rounds, print one line per arm."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arm_help = f"fronde[-iter][+held|+whole]:DIR, asgi, tcp, {', '.join(UP_ARMS)}"
    ap.add_argument("--arm", action="append", required=True, help=arm_help)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20, help="requests of each length a round")
    ap.add_argument("--long", type=int, default=128, help="tokens of a long answer")
    ap.add_argument("--short", type=int, default=4, help="tokens of a short answer")
    ap.add_argument("--tps", type=float, default=400.0, help="the fake's decode speed")
    ap.add_argument("--stop", action="store_true", help="every request carries a stop string")
    ap.add_argument("--whole", action="store_true", help="every request is non-streamed")
    ap.add_argument(
        "--profile", type=Path, default=None,
        help="after the rounds, a py-spy profile of each fronde arm into this folder",
    )  # fmt: skip
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="relay-cost-"))
    fake_dir(work)
    fport = free_port()
    fake = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", str(fport), "--fake-tps", str(args.tps)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    upstream = f"http://127.0.0.1:{fport}"
    wait_up(upstream + "/health", fake)
    arms = {a: start(a, upstream, args.tps, work) for a in args.arm}
    per_token: dict[str, list[float]] = {a: [] for a in arms}
    per_request: dict[str, list[float]] = {a: [] for a in arms}
    try:
        for k in range(args.rounds):
            for name, (proc, url) in arms.items():
                first = k * 1000
                pid = proc.pid
                shape = {"stop": args.stop, "whole": args.whole}
                long_s, long_n = stream_cpu(url, pid, args.requests, args.long, first, **shape)
                short_s, short_n = stream_cpu(
                    url, pid, args.requests, args.short, first + 500, **shape
                )
                slope = (long_s - short_s) / max(long_n - short_n, 1)
                per_token[name].append(slope * 1000)
                per_request[name].append((short_s - slope * short_n) / args.requests * 1000)
                print(f"round {k}: {name}: {slope * 1000:.3f} ms a token, "
                      f"{per_request[name][-1]:.2f} ms a request", flush=True)  # fmt: skip
        for name, (proc, url) in arms.items():
            if args.profile is not None and name.startswith("fronde"):
                args.profile.mkdir(parents=True, exist_ok=True)
                slug = name.replace(":", "-").replace("/", "_").replace(".", "_")
                profile(proc.pid, url, args.profile / f"{slug}.txt", 50, args.long)
    finally:
        for proc, _ in arms.values():
            proc.terminate()
        fake.terminate()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{os.cpu_count()} CPUs, fake at {args.tps:.0f} tok/s, {args.rounds} rounds:")
    for name in arms:
        t, r = per_token[name], per_request[name]
        print(f"{name}: {statistics.median(t):.3f} ms a token [{min(t):.3f}, {max(t):.3f}], "
              f"{statistics.median(r):.2f} ms a request [{min(r):.2f}, {max(r):.2f}]")  # fmt: skip
    first = next(iter(arms))
    for name in list(arms)[1:]:
        # Paired by round: the arms of one round ran back to back, under the same load.
        t = [a - b for a, b in zip(per_token[first], per_token[name], strict=True)]
        r = [a - b for a, b in zip(per_request[first], per_request[name], strict=True)]
        print(f"{first} − {name}, paired by round: {statistics.median(t):+.3f} ms a token "
              f"[{min(t):+.3f}, {max(t):+.3f}], {statistics.median(r):+.2f} ms a request "
              f"[{min(r):+.2f}, {max(r):+.2f}]")  # fmt: skip


if __name__ == "__main__":
    main()
