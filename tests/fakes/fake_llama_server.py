"""A fake ``llama-server`` with knobs, for deterministic unit and fault tests.

It takes llama-server's command line (``--host``, ``--port``, ``--spec-type``; the
rest is ignored) plus knobs in the manner of llama-swap's ``cmd/fake-model``:

- ``--fake-tps N``: decode speed in tokens per second (reported and paced);
- ``--fake-accept-rate P``: α reported when a spec type is set;
- ``--fake-load-s S``: answer /health 503 for S seconds first;
- ``--fake-exit-on-start CODE``: exit at once with CODE, after a line on stderr;
- ``--fake-crash-after N``: the process dies (SIGKILL itself) after N streamed tokens;
- ``--fake-ignore-sigterm``: ignore SIGTERM (tests the SIGKILL fallback).

- ``--fake-eos-token T``: native ``/completion`` stops (``stop_type: eos``) before
  emitting token T.

The OpenAI endpoints generate the words of the prompt, cycled. The native
``/completion`` endpoint takes token ids (or text, tokenized as ``/tokenize`` does)
and continues a deterministic chain, ``next = (31·last + 7) mod 997 + 3``, whose
token t reads ``"t<t> "``: a generation split in two requests at any point equals
one request, token for token, as it would on a real greedy backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--spec-type", default="none")
    p.add_argument("-m", "--model", default="/models/fake.gguf")
    p.add_argument("--alias", default=None)
    p.add_argument("--fake-tps", type=float, default=500.0)
    p.add_argument("--fake-accept-rate", type=float, default=0.5)
    p.add_argument("--fake-load-s", type=float, default=0.0)
    p.add_argument("--fake-exit-on-start", type=int, default=None)
    p.add_argument("--fake-crash-after", type=int, default=None)
    p.add_argument("--fake-ignore-sigterm", action="store_true")
    p.add_argument("--fake-eos-token", type=int, default=None)
    p.add_argument("--version", action="store_true")
    args, _unknown = p.parse_known_args(argv)
    return args


def words_of(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        text = " ".join(str(m.get("content", "")) for m in body["messages"])
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
    return text.split() or ["token"]


def next_token(last: int) -> int:
    return (31 * last + 7) % 997 + 3


def tokenize(text: str) -> list[int]:
    return [2] + [ord(c) % 997 + 3 for c in text]  # 2 = BOS


def piece(token: int) -> str:
    return f"t{token} "


def build_app(args: argparse.Namespace) -> FastAPI:
    app = FastAPI()
    started = time.monotonic()
    spec = args.spec_type != "none"

    def timings(n: int) -> dict[str, Any]:
        t: dict[str, Any] = {
            "prompt_n": 10,
            "prompt_per_second": 1000.0,
            "predicted_n": n,
            "predicted_per_second": args.fake_tps,
        }
        if spec and n > 1:
            drafted = 2 * n
            t["draft_n"] = drafted
            t["draft_n_accepted"] = round(drafted * args.fake_accept_rate)
        return t

    @app.get("/health")
    async def health() -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        if time.monotonic() - started < args.fake_load_s:
            return JSONResponse({"error": {"code": 503, "message": "Loading model"}}, 503)
        return JSONResponse({"status": "ok"})

    async def generate(body: dict[str, Any]) -> AsyncIterator[str]:
        words = words_of(body)
        n = int(body.get("max_tokens") or body.get("n_predict") or 16)
        for i in range(n):
            if args.fake_crash_after is not None and i >= args.fake_crash_after:
                os.kill(os.getpid(), signal.SIGKILL)
            await asyncio.sleep(1.0 / args.fake_tps)
            yield words[i % len(words)] + " "

    async def handle(request: Request, chat: bool) -> Any:
        body = await request.json()
        if body.get("temperature", 0) == 99:  # a knob for a backend-side 400
            return JSONResponse(
                {
                    "error": {
                        "code": 400,
                        "message": "bad temperature",
                        "type": "invalid_request_error",
                    }
                },
                400,
            )
        model = args.alias or args.model  # llama-server b11434 answers with its alias
        n_max = int(body.get("max_tokens") or 16)
        if not body.get("stream"):
            text = "".join([w async for w in generate(body)])
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return JSONResponse(
                {
                    "id": "fake-1",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": model,
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": 10,
                        "completion_tokens": n_max,
                        "total_tokens": 10 + n_max,
                    },
                    "timings": timings(n_max),
                }
            )

        async def events() -> AsyncIterator[bytes]:
            obj = "chat.completion.chunk" if chat else "text_completion"
            n = 0
            async for w in generate(body):
                n += 1
                delta: dict[str, Any] = {"index": 0, "finish_reason": None}
                if chat:
                    delta["delta"] = {"content": w}
                else:
                    delta["text"] = w
                chunk = {"id": "fake-1", "object": obj, "model": model, "choices": [delta]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            final: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                final["delta"] = {}
            else:
                final["text"] = ""
            last = {
                "id": "fake-1",
                "object": obj,
                "model": model,
                "choices": [final],
                "timings": timings(n),
            }
            yield f"data: {json.dumps(last)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/apply-template")
    async def apply_template(request: Request) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        body = await request.json()
        turns = [f"<{m['role']}>{m.get('content', '')}</{m['role']}>" for m in body["messages"]]
        return JSONResponse({"prompt": "".join(turns) + "<model>"})

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        body = await request.json()
        ids = tokenize(body["content"])
        return JSONResponse({"tokens": ids if body.get("add_special") else ids[1:]})

    @app.post("/completion")
    async def completion(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        body = await request.json()
        prompt = body["prompt"]
        ids = [int(t) for t in prompt] if isinstance(prompt, list) else tokenize(str(prompt))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        n_predict = int(body.get("n_predict", -1))
        limit = n_predict if n_predict >= 0 else 64
        stops: list[str] = body.get("stop") or []

        async def gen() -> AsyncIterator[tuple[list[int], str, str | None]]:
            """Yield (tokens, text, stop_type or None)."""
            last, text = ids[-1], ""
            for i in range(limit):
                if args.fake_crash_after is not None and i >= args.fake_crash_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                tok = next_token(last)
                if args.fake_eos_token is not None and tok == args.fake_eos_token:
                    yield [], "", "eos"
                    return
                await asyncio.sleep(1.0 / args.fake_tps)
                last, text = tok, text + piece(tok)
                hit = next((w for w in stops if w in text), None)
                if hit is not None:
                    yield [tok], piece(tok).split(hit)[0], "word"
                    return
                yield [tok], piece(tok), None
            yield [], "", "limit"

        def final(
            n: int, stop_type: str, content: str = "", tokens: list[int] | None = None
        ) -> dict[str, Any]:
            return {
                "content": content,
                "tokens": tokens or [],
                "stop": True,
                "stop_type": stop_type,
                "tokens_predicted": n,
                "tokens_evaluated": len(ids),
                "timings": timings(n),
            }

        if not body.get("stream"):
            toks: list[int] = []
            text = ""
            stop_type = "limit"
            async for t, p, st in gen():
                toks += t
                text += p
                if st:
                    stop_type = st
            return JSONResponse(final(len(toks), stop_type, text, toks))

        async def events() -> AsyncIterator[bytes]:
            n = 0
            async for t, p, st in gen():
                n += len(t)
                if t or p:
                    event = {"content": p, "tokens": t, "stop": False}
                    yield f"data: {json.dumps(event)}\n\n".encode()
                if st:
                    yield f"data: {json.dumps(final(n, st))}\n\n".encode()
                    return

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await handle(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await handle(request, chat=False)

    return app


class StubbornServer(uvicorn.Server):
    """A uvicorn server that ignores SIGTERM (only SIGKILL stops it)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM:
            super().handle_exit(sig, frame)


def main() -> None:
    args = parse_args(sys.argv[1:])
    if args.version:
        print("version: 11434 (fake)", file=sys.stderr)
        return
    if args.fake_exit_on_start is not None:
        print(f"fake: refusing to start (exit {args.fake_exit_on_start})", file=sys.stderr)
        sys.exit(args.fake_exit_on_start)
    print(
        f"fake llama-server ({args.spec_type}) on {args.host}:{args.port}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(build_app(args), host=args.host, port=args.port, log_level="warning")
    server = StubbornServer(config) if args.fake_ignore_sigterm else uvicorn.Server(config)
    server.run()


if __name__ == "__main__":
    main()
