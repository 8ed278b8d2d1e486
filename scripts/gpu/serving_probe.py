"""How one GPU serves many requests: one llama-server against several, and server flags.

A diagnostic for the load benchmark (``fronde bench load``), run on the GPU machine
before it: the first H200 load run found one llama-server's aggregate decode tok/s
nearly flat from c = 1 to 32 (630 → 818 tok/s for a 135 M model, each request's decode
falling from 698 to 58 tok/s), far below what the GPU computes. This measures, per
configuration, the steady aggregate decode tok/s of ``c`` closed-loop clients spread
evenly over ``k`` servers of the same argv (Fronde's baseline argv, or a mode's, plus
extra flags), each request a fixed ``n_predict`` with ``ignore_eos`` so that every
configuration decodes the same number of tokens whatever the model writes.

Figures: tok/s = tokens decoded inside the window ÷ the window, a request's tokens
spread evenly over its life (the window starts after ``--warm-s``); step_ms = c ÷ tok/s
× 1000 per server, the time one decode step of a batch takes.

    python scripts/gpu/serving_probe.py --config plain:1:1 --config plain:1:32
    python scripts/gpu/serving_probe.py --config plain:4:32 --config plain-bs:1:32

A config is ``NAME:K:C`` where NAME is ``plain``, ``cascade`` or ``mod`` (Fronde's
argv for baseline, the cascade or ngram-mod) with ``-bs`` (``--backend-sampling``)
and/or ``-kvu`` (``--kv-unified``), ``-noidle`` (``--no-cache-idle-slots``),
``-nocache`` (``--cache-ram 0``), ``-t1``/``-t2``/``-t4`` (``--threads``, the CPU threads of
a decode step), ``-poll0`` (``--poll 0``: those threads sleep instead of spinning) appended.
``--kind`` picks the request: ``completion`` (non-streamed ``/completion`` without the
prompt cache, the default), ``completion-stream`` (the same streamed), ``chat`` (a
non-streamed chat completion) or ``chat-stream`` (streamed chat with the server's default
prompt cache, as the load benchmark sends; ``--chat`` is the same). The prompts repeat
across requests: a speculative configuration's figure includes ngram-mod's memory
(read it for scaling, not for speculation's worth).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from fronde.backends.process import LaunchSpec, LlamaServerProcess
from fronde.bench.arms import Arm, static_argv
from fronde.bench.workloads import load_workload
from fronde.config import load_settings
from fronde.errors import FrondeError
from fronde.modes import Mode

MODES = {"plain": None, "cascade": Mode.CASCADE, "mod": Mode.NGRAM_MOD}
FLAGS = {
    "bs": ["--backend-sampling"],
    "kvu": ["--kv-unified"],
    "noidle": ["--no-cache-idle-slots"],
    "nocache": ["--cache-ram", "0"],
    "t1": ["--threads", "1"],
    "t2": ["--threads", "2"],
    "t4": ["--threads", "4"],
    "poll0": ["--poll", "0"],
}
KINDS = ("completion", "completion-stream", "chat", "chat-stream")


def _argv(name: str, slots: int) -> tuple[Path, list[str], str]:
    base, *extras = name.split("-")
    settings = load_settings()
    backend = settings.backend.model_copy(
        update={"parallel": slots, "ctx_size": max(settings.backend.ctx_size, slots * 2048)}
    )
    run = settings.model_copy(update={"backend": backend})
    flags = [f for e in extras for f in FLAGS[e]]
    binary, args = static_argv(Arm(name, "static", force=MODES[base]), run)
    return binary, [*args, *flags], base


async def _client(
    http: httpx.AsyncClient,
    url: str,
    prompts: list[str],
    args: argparse.Namespace,
    stop_at: float,
    spans: list[tuple[float, float, int]],
    k: int,
) -> None:
    i = k
    chat = args.kind.startswith("chat")
    stream = args.kind.endswith("-stream")
    while time.monotonic() < stop_at:
        prompt = f"[{i}] {prompts[i % len(prompts)]}"
        i += 97
        t0 = time.monotonic()
        if chat:
            # As the load benchmark sends: chat with the server's default prompt cache.
            body: dict[str, object] = {
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": args.n_predict,
            }
            path = "/v1/chat/completions"
        else:
            body = {"prompt": prompt, "n_predict": args.n_predict, "cache_prompt": False}
            path = "/completion"
        body |= {"ignore_eos": True, "temperature": 0.0, "stream": stream}
        if args.pin:
            # client k always on one slot: k (adjacent ids) or 2k (every other id)
            body["id_slot"] = k * (2 if args.pin == "spread" else 1)
        if not stream:
            r = await http.post(f"{url}{path}", json=body)
            r.raise_for_status()
            data = r.json()
            n = int(data["usage"]["completion_tokens"] if chat else data["tokens_predicted"])
            spans.append((t0, time.monotonic(), n))
            continue
        n = 0
        async with http.stream("POST", f"{url}{path}", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                if not chat and '"stop":true' in line:  # the native stream's last event
                    n = int(json.loads(line[6:])["tokens_predicted"])
                elif '"content"' in line:
                    n += 1
        spans.append((t0, time.monotonic(), n))


async def measure(name: str, k: int, c: int, args: argparse.Namespace) -> dict[str, object]:
    """One configuration: start ``k`` servers, run ``c`` clients, stop them; the figures."""
    binary, argv, _ = _argv(name, args.slots)
    prompts = [i.prompt for i in load_workload("first-encounter").items]
    procs = [
        LlamaServerProcess(
            LaunchSpec(f"{name}{j}", binary, argv, Path(tempfile.gettempdir()) / f"probe-{j}.log")
        )
        for j in range(k)
    ]
    async with contextlib.AsyncExitStack() as stack:
        for p in procs:
            await p.start()
            stack.push_async_callback(p.stop)
        spans: list[tuple[float, float, int]] = []
        start = time.monotonic()
        lo, hi = start + args.warm_s, start + args.warm_s + args.window_s
        # A streamed chat's connection is closed by llama-server b11434 after a while
        # idle, and one reused then fails before any answer (Fronde's own client retries
        # those, fronde/backends/client.py): a fresh connection for each chat request.
        keep = 0 if args.kind == "chat-stream" else None
        limits = httpx.Limits(max_connections=c + 8, max_keepalive_connections=keep)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            await asyncio.gather(
                *[_client(http, procs[j % k].url, prompts, args, hi, spans, j) for j in range(c)]
            )
    tokens = 0.0
    for t0, t1, n in spans:
        overlap = max(0.0, min(t1, hi) - max(t0, lo))
        tokens += n * overlap / (t1 - t0) if t1 > t0 else 0.0
    tok_s = tokens / args.window_s
    return {
        "config": name,
        "kind": args.kind,
        "pin": args.pin,
        "servers": k,
        "c": c,
        "tok_s": round(tok_s, 1),
        "per_request_tok_s": round(tok_s / c, 1),
        "step_ms": round(c / k / tok_s * 1000, 2) if tok_s else None,
        "requests": len(spans),
    }


def main() -> int:
    """Measure each ``--config`` in turn; one JSON line each, to stdout and ``--out``."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--config", action="append", required=True, help="NAME:K:C (see above)")
    ap.add_argument("--slots", type=int, default=32, help="-np of every server")
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--warm-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=6.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--pin",
        choices=("adjacent", "spread"),
        default=None,
        help="client k always to slot k (adjacent) or 2k (spread); default: the server picks",
    )
    ap.add_argument("--kind", choices=KINDS, default="completion", help="the request sent")
    ap.add_argument(
        "--chat",
        action="store_const",
        const="chat-stream",
        dest="kind",
        help="the same as --kind chat-stream (as bench load sends)",
    )
    args = ap.parse_args()
    if args.out is not None:
        args.out.write_text("")
    for spec in args.config:
        name, k, c = spec.split(":")
        row: dict[str, object]
        try:
            row = asyncio.run(measure(name, int(k), int(c), args))
        except (httpx.HTTPError, FrondeError, KeyError, ValueError) as e:
            # a server that crashed or never started is a finding, not the end
            row = {"config": name, "servers": int(k), "c": int(c), "error": repr(e)}
        print(json.dumps(row), flush=True)
        if args.out is not None:  # a line at a time: what was measured survives a cut
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
