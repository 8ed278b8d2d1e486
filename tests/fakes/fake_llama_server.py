"""A fake ``llama-server`` with knobs, for deterministic unit and fault tests.

It takes llama-server's command line (``--host``, ``--port``, ``--spec-type``; the
rest is ignored) plus knobs in the manner of llama-swap's ``cmd/fake-model``:

- ``--fake-tps N``: decode speed in tokens per second (reported and paced);
- ``--fake-accept-rate P``: α reported when a spec type is set;
- ``--fake-load-s S``: for S seconds first, answer every request with llama-server's
  503 ``Loading model`` (``/health`` included), as b11434 does while it loads;
- ``--fake-prefill-s S``: a generation waits S seconds before its first token (a
  stream's headers come at once, as b11434 sends them once the request has a slot);
- ``--fake-exit-on-start CODE``: exit at once with CODE, after a line on stderr;
- ``--fake-crash-after N``: the process dies (SIGKILL itself) after N streamed tokens;
- ``--fake-ignore-sigterm``: ignore SIGTERM (tests the SIGKILL fallback).

- ``--fake-eos-token T``: native ``/completion`` stops (``stop_type: eos``) before
  emitting token T.
- ``--fake-ctx N``: a prompt of more than N words gets llama-server's
  ``exceed_context_size_error`` (HTTP 400 with ``n_prompt_tokens`` and ``n_ctx``), and a
  native ``/completion`` stops with ``truncated`` when prompt plus output reach N;
- ``--fake-hang``: completions never answer, OpenAI's and the native one (a hung backend);
- ``--fake-garbage``: streams send a line that is not JSON, then close without ``[DONE]``;
- ``--fake-early-close N``: streams end cleanly after N tokens, without ``[DONE]``;
- ``--fake-always-usage``: streams carry a usage chunk even when not asked (other builds);
- ``--fake-split-utf8``: each streamed event is written in two pieces, cut inside a
  multi-byte character when it has one;
- ``--fake-no-tool-template``: ``/props`` says the chat template does not describe
  tools (``chat_template_caps.supports_tools`` false), as gemma's turn format;
- ``--fake-lose-every N``: a native stream sends no event for every N-th token (not
  the last): its text comes with the next event and its id never arrives, as
  llama-server does for a token that ends inside a multi-byte character.
- ``--fake-record PATH``: append every POST as a JSON line ``{"path", "body"}`` to PATH,
  so a test can see which fields reached the backend on each route (streams included).
- ``--fake-calls PATH``: append every call's ``METHOD /path`` to PATH, GETs too
  (``tests/fakes/call_log.py``), so a test can count Fronde's calls around a generation.
- ``--fake-token-log FILE``: append each generated token's wall-clock time (``time.time()``,
  s) to FILE, one a line: what the server sent, and when, for a client's count to be
  checked against.
- ``--fake-per-request-spec``: a llama-server with Fronde's patch set, which honours the
  per-request ``speculative.*`` fields, refuses bad ones with a 400 and says so in
  ``/props`` (see ``tests/fakes/per_request_spec.py``); without it they are ignored.
- ``--fake-per-request``: behave as a llama-server built with Fronde's patch set
  (``/work/notes/spec-contract.md``): ``/props`` says ``speculative_per_request`` (and shows
  its ``--spec-type`` list, as patch 0004 does, under ``default_generation_settings``); a body's
  ``speculative.n_max`` (0: no draft) and ``speculative.types`` (a subset of
  ``--spec-type``, else HTTP 400) decide whether it drafts; ``timings`` carry
  ``draft_n_max``. Without it the fields are ignored, as a stock b11434 does.
- ``--fake-props-only``: ``/props`` says ``speculative_per_request`` but the fields are
  ignored (a binary whose word its behaviour belies).
- ``--fake-held-stop-text``: as patch 0009, a stream that ends at its budget sends the text
  held back for a partial stop match, and ``/props`` says ``stream_sends_held_stop_text``.
- ``--fake-whole-stops``: ``/props`` says ``whole_answer_stops_for_gone_client`` (patch
  0010). A non-streamed answer stops for a gone client either way here, as b11434's does
  when no other slot decodes.
- ``--fake-slot N``: the slot a native ``/completion`` without ``id_slot`` runs on, and each
  slot keeps the ids of its last request as its cache: ``prompt_n`` counts only the ids
  past the cached prefix (``cache_prompt``); without it ``prompt_n`` is 10 and the slot 0.
  The final event names the slot (``id_slot``; the others -1, as b11434's).

A body field ``fake_backend_error: true`` gets a llama-server-style HTTP 400.
``/v1/completions`` with ``prompt`` a list of prompts answers as b11434 does with one
slot: one choice per prompt, streamed with ``data: null`` between the prompts (see
``several_answer``); an empty list gets b11434's HTTP 400.
Non-streamed answers carry ``fake_received``: the body and headers that arrived. A
request with ``tools`` and ``tool_choice: "required"`` answers with a tool call
(streamed as OpenAI tool-call deltas). ``/v1/responses``, ``/v1/messages`` and
``/infill`` answer in llama-server's shapes (the knobs for streams apply, except to a
Messages request with ``stop_sequences``, which end it as b11434 does: ``stop_reason``
``end_turn``, the string in ``stop_sequence``); a Responses input item b11434 cannot
type (an assistant item without ``"type": "message"``) gets its 400. ``/slots``
reports ``is_processing`` while any generation runs, so a test can see a slot freed
after a client disconnects.

The OpenAI endpoints generate the words of the prompt, cycled. The native
``/completion`` endpoint takes token ids (or text, tokenized as ``/tokenize`` does)
and continues a deterministic chain, ``next = (31·last + 7) mod 997 + 3``, whose
token t reads ``"t<t> "``: a generation split in two requests at any point equals
one request, token for token, as it would on a real greedy backend.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator
from types import FrameType
from typing import Any, cast

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

if __package__:
    from .call_log import CallLog
    from .per_request_spec import DRAFT_CAP, PerRequestSpec
else:  # run as the fake llama-server binary: this file's folder is on sys.path
    from call_log import CallLog
    from per_request_spec import DRAFT_CAP, PerRequestSpec

GARBAGE = b"data: {this is not json\n\n"
"""What ``--fake-garbage`` sends in place of the second event."""


class ClosingStream(StreamingResponse):
    """Closes its generator when the client leaves, as llama-server stops a slot whose
    connection closed (Starlette alone leaves the generator suspended until GC)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()


class Recorder:
    """ASGI wrapper of ``--fake-record``: writes each POST body to a JSON-lines file, then
    hands the same bytes to the app."""

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body"))
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with open(self.path, "a", encoding="utf-8") as f:  # noqa: ASYNC230 (a test fake)
            f.write(json.dumps({"path": scope["path"], "body": body}) + "\n")
        replayed = [False]

        async def replay() -> Any:
            if replayed[0]:
                return await receive()
            replayed[0] = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


class Loading:
    """ASGI wrapper of ``--fake-load-s``: every request gets b11434's 503 while it loads
    (``middleware_server_state``, ``tools/server/server-http.cpp``)."""

    def __init__(self, app: Any, load_s: float) -> None:
        self.app, self.until = app, time.monotonic() + load_s
        error = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        self.body = {"error": error}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or time.monotonic() >= self.until:
            await self.app(scope, receive, send)
            return
        await JSONResponse(self.body, 503)(scope, receive, send)


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
    p.add_argument("--fake-prefill-s", type=float, default=0.0)
    p.add_argument("--fake-exit-on-start", type=int, default=None)
    p.add_argument("--fake-crash-after", type=int, default=None)
    p.add_argument("--fake-ignore-sigterm", action="store_true")
    p.add_argument("--fake-eos-token", type=int, default=None)
    p.add_argument("--fake-ctx", type=int, default=None)
    p.add_argument("--fake-hang", action="store_true")
    p.add_argument("--fake-garbage", action="store_true")
    p.add_argument("--fake-early-close", type=int, default=None)
    p.add_argument("--fake-always-usage", action="store_true")
    p.add_argument("--fake-split-utf8", action="store_true")
    p.add_argument("--fake-no-tool-template", action="store_true")
    p.add_argument("--fake-lose-every", type=int, default=None)
    p.add_argument("--fake-record", default=None)
    p.add_argument("--fake-calls", default=None)
    p.add_argument("--fake-token-log", default=None)
    p.add_argument("--fake-per-request-spec", action="store_true")
    p.add_argument("--fake-per-request", action="store_true")
    p.add_argument("--fake-props-only", action="store_true")
    p.add_argument("--fake-slot", type=int, default=None)
    p.add_argument("--fake-held-stop-text", action="store_true")
    p.add_argument("--fake-whole-stops", action="store_true")
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


def several_prompts(body: dict[str, Any]) -> list[Any] | None:
    """A text completion's prompts when ``prompt`` is a list of prompts, else None.

    llama-server's rule (``tokenize_input_prompts``): a list with an integer at its top
    level is one prompt (token ids); any other list holds one prompt per element.
    """
    prompt = body.get("prompt")
    if "messages" in body or not isinstance(prompt, list):
        return None
    if any(isinstance(p, int) and not isinstance(p, bool) for p in prompt):  # pyright: ignore[reportUnknownVariableType]
        return None
    return cast("list[Any]", prompt)


def next_token(last: int) -> int:
    return (31 * last + 7) % 997 + 3


def tokenize(text: str) -> list[int]:
    """BOS, then one id per character; text made of pieces ("t12 t7 ") reads back as
    those ids, as a real tokenizer encodes its own output again."""
    pieces = text.split(" ")
    if (
        len(pieces) > 1
        and pieces[-1] == ""
        and all(len(w) > 1 and w[0] == "t" and w[1:].isdigit() for w in pieces[:-1])
    ):
        return [2] + [int(w[1:]) for w in pieces[:-1]]
    return [2] + [ord(c) % 997 + 3 for c in text]  # 2 = BOS


def piece(token: int) -> str:
    return f"t{token} "


async def with_stops(
    pieces: AsyncIterator[tuple[list[int], str]],
    stops: list[str],
    found: list[str] | None = None,
    flush: bool = False,
) -> AsyncGenerator[tuple[list[int], str, str | None]]:
    """Apply ``stop`` as llama-server's ``process_token`` does; yield (tokens, text, stop).

    After each token the earliest full match in the text not yet sent cuts the text and
    ends the generation (``word``); text ending in a partial match is held back (the
    token comes with no text) until a later token decides. At the end ``limit``, then
    ``held`` with the held-back text: a non-streamed answer keeps it, a stream drops it
    (llama-server b11434 sends no content in its final event). The matched stop string
    is appended to ``found``. With ``flush`` (patch 0009, ``--fake-held-stop-text``) the
    held-back text comes before ``limit`` as text sent, so a stream keeps it too.
    """
    generated, sent = "", 0
    async for toks, text in pieces:
        generated += text
        unsent = generated[sent:]
        window = [(unsent.find(w, max(0, len(unsent) - len(w) - len(text))), w) for w in stops]
        full = [(at, w) for at, w in window if at >= 0]
        if full:
            at, word = min(full)
            if found is not None:
                found.append(word)
            generated = generated[: sent + at]
            yield toks, generated[sent:], "word"
            return
        if any(unsent.endswith(w[:k]) for w in stops for k in range(1, len(w))):
            yield toks, "", None
        else:
            yield toks, unsent, None
            sent = len(generated)
    if flush and generated[sent:]:
        yield [], generated[sent:], None
        sent = len(generated)
    yield [], "", "limit"
    yield [], generated[sent:], "held"


def responses_item_known(item: Any) -> bool:
    """Whether b11434 can convert a Responses input item (else its 400 "Cannot determine
    type of 'item'", ``server_chat_convert_responses_to_chatcmpl``): a typeless item only
    with the role user, system or developer; an assistant message only with ``type``."""
    if not isinstance(item, dict):
        return False
    entry = cast("dict[str, Any]", item)
    role, kind = entry.get("role"), entry.get("type")
    if role in ("user", "system", "developer"):
        return isinstance(entry.get("content"), str | list)
    if role == "assistant":
        return kind == "message"
    return kind in ("function_call", "function_call_output", "reasoning")


def build_app(args: argparse.Namespace) -> FastAPI:
    app = FastAPI()
    started = time.monotonic()
    configured = [t for t in args.spec_type.split(",") if t != "none"]

    def drafts(body: dict[str, Any] | None) -> bool:
        """Whether a request drafts: per the contract's fields with --fake-per-request."""
        if not configured:
            return False
        if not args.fake_per_request or body is None:
            return True
        types = body.get("speculative.types", configured)
        return bool(types) and body.get("speculative.n_max") != 0

    def refusal(body: dict[str, Any]) -> JSONResponse | None:
        """The patched server's 400 for a field it cannot honour (--fake-per-request)."""
        if not args.fake_per_request:
            return None
        types: list[str] = body.get("speculative.types") or []
        n_max = body.get("speculative.n_max")
        bad = [t for t in types if t not in configured]
        if not bad and (n_max is None or (isinstance(n_max, int) and n_max >= 0)):
            return None
        message = f"speculative type {bad} not configured" if bad else "bad speculative.n_max"
        error = {"code": 400, "message": message, "type": "invalid_request_error"}
        return JSONResponse({"error": error}, 400)

    def timings(n: int, body: dict[str, Any] | None = None, prompt_n: int = 10) -> dict[str, Any]:
        t: dict[str, Any] = {
            "prompt_n": prompt_n,
            "prompt_ms": 10.0,
            "prompt_per_second": 1000.0,
            "predicted_n": n,
            "predicted_ms": n / args.fake_tps * 1000,
            "predicted_per_second": args.fake_tps,
        }
        cap = DRAFT_CAP.get()  # a request's speculative.n_max (--fake-per-request-spec)
        if cap is not None:
            t["draft_n_max"] = cap
        if drafts(body) and n > 1 and cap != 0:
            drafted = 2 * n
            t["draft_n"] = drafted
            t["draft_n_accepted"] = round(drafted * args.fake_accept_rate)
        if args.fake_per_request:
            t["draft_n_max"] = 16 if drafts(body) else 0
        return t

    @app.get("/health")
    async def health() -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        if time.monotonic() - started < args.fake_load_s:
            return JSONResponse({"error": {"code": 503, "message": "Loading model"}}, 503)
        return JSONResponse({"status": "ok"})

    busy = [0]  # generations running now, for /slots
    cached: dict[int, list[int]] = {}  # slot → the ids its cache holds (--fake-slot)
    predicted = [0]  # tokens generated so far, for /metrics

    async def generate(body: dict[str, Any], request: Request) -> AsyncGenerator[str]:
        """The prompt's words, cycled; stops when the client's connection closes, as
        llama-server stops a task whose connection closed (streamed or not)."""
        words = words_of(body)
        n = int(body.get("max_tokens") or body.get("n_predict") or 16)
        busy[0] += 1
        try:
            if args.fake_prefill_s > 0:
                await asyncio.sleep(args.fake_prefill_s)
            for i in range(n):
                if args.fake_crash_after is not None and i >= args.fake_crash_after:
                    os.kill(os.getpid(), signal.SIGKILL)
                if await request.is_disconnected():
                    return
                await asyncio.sleep(1.0 / args.fake_tps)
                predicted[0] += 1
                if args.fake_token_log:
                    with open(args.fake_token_log, "a") as log:  # noqa: ASYNC230 - a test knob
                        log.write(f"{time.time():.6f}\n")
                yield words[i % len(words)] + " "
        finally:
            busy[0] -= 1

    async def knobbed(body: dict[str, Any], request: Request) -> AsyncGenerator[str | bytes]:
        """``generate``'s words under the stream knobs, then bytes that end the stream where a
        knob cuts it: ``GARBAGE`` for ``--fake-garbage``, ``b""`` past
        ``--fake-early-close`` words (the stream then closes as it is)."""
        # aclosing: a client that leaves closes the generation at once (frees /slots).
        async with contextlib.aclosing(generate(body, request)) as words:
            n = 0
            async for w in words:
                n += 1
                if args.fake_garbage and n == 2:
                    yield GARBAGE
                    return
                if args.fake_early_close is not None and n > args.fake_early_close:
                    yield b""
                    return
                yield w

    def split_write(data: bytes) -> list[bytes]:
        """Cut inside the first multi-byte character, if any (--fake-split-utf8)."""
        if not args.fake_split_utf8:
            return [data]
        at = next((i for i, b in enumerate(data) if b >= 0xC0), None)
        return [data] if at is None else [data[: at + 1], data[at + 1 :]]

    def tool_call_answer(body: dict[str, Any], model: str) -> Any:
        name = body["tools"][0]["function"]["name"]
        args_json = json.dumps({"city": "Paris"})
        if not body.get("stream"):
            call: dict[str, Any] = {"id": "call_1", "type": "function"}
            call["function"] = {"name": name, "arguments": args_json}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            return JSONResponse(
                {
                    "id": "fake-t",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                }
            )

        async def events() -> AsyncIterator[bytes]:
            head: dict[str, Any] = {"index": 0, "id": "call_1", "type": "function"}
            head["function"] = {"name": name, "arguments": ""}
            pieces = [head] + [
                {"index": 0, "function": {"arguments": args_json[i : i + 5]}}
                for i in range(0, len(args_json), 5)
            ]
            for tc in pieces:
                choice = {"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}
                chunk: dict[str, Any] = {"id": "fake-t", "object": "chat.completion.chunk"}
                chunk |= {"model": model, "choices": [choice]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            last: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
            end: dict[str, Any] = {"id": "fake-t", "object": "chat.completion.chunk"}
            end |= {"model": model, "choices": [last], "fake_received": {"body": body}}
            yield f"data: {json.dumps(end)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return ClosingStream(events(), media_type="text/event-stream")

    async def stop_answer(
        request: Request, body: dict[str, Any], chat: bool, model: str, stops: list[str]
    ) -> Any:
        """An OpenAI answer with ``stop`` applied as llama-server does (:func:`with_stops`)."""
        obj = "chat.completion.chunk" if chat else "text_completion"

        async def pieces() -> AsyncIterator[tuple[list[int], str]]:
            async for w in generate(body, request):
                yield [0], w

        def choice(text: str, finish: str | None, stream: bool) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if not chat:
                c["text"] = text
            elif stream:
                c["delta"] = {"content": text} if text else {}
            else:
                c["message"] = {"role": "assistant", "content": text}
            return c

        async def whole() -> JSONResponse:
            text, finish, n = "", "length", 0
            async for toks, t, st in with_stops(pieces(), stops, flush=args.fake_held_stop_text):
                n, text = n + len(toks), text + t
                finish = "stop" if st == "word" else finish
            usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
            kind = "chat.completion" if chat else "text_completion"
            out = {"id": "fake-1", "object": kind, "model": model, "usage": usage}
            out |= {"choices": [choice(text, finish, False)], "timings": timings(n, body)}
            received = {"body": body, "headers": dict(request.headers)}
            return JSONResponse(out | {"fake_received": received})

        async def events() -> AsyncIterator[bytes]:
            n = 0
            per_token = bool(body.get("timings_per_token"))
            async with contextlib.aclosing(
                with_stops(pieces(), stops, flush=args.fake_held_stop_text)
            ) as steps:
                async for toks, t, st in steps:
                    if st == "held":
                        break  # a stream never sends what it held back at the budget
                    n += len(toks)
                    finish = {"word": "stop", "limit": "length"}.get(st or "")
                    if t or finish:
                        chunk: dict[str, Any] = {"id": "fake-1", "object": obj, "model": model}
                        chunk["choices"] = [choice(t, finish, True)]
                        if per_token or finish:
                            chunk["timings"] = timings(n, body)
                        if finish:
                            received = {"body": body, "headers": dict(request.headers)}
                            chunk["fake_received"] = received
                        yield f"data: {json.dumps(chunk)}\n\n".encode()
                    if st == "word":
                        break
            yield b"data: [DONE]\n\n"

        if not body.get("stream"):
            return await whole()
        return ClosingStream(events(), media_type="text/event-stream")

    async def several_answer(
        request: Request, body: dict[str, Any], prompts: list[Any], model: str
    ) -> Any:
        """A text completion with several prompts, as b11434 answers it with one slot.

        Each prompt is a task of its own (``stop`` applied as :func:`with_stops`), run one
        after the other. Whole: one choice per prompt (``index`` its position) and the
        first prompt's ``usage`` and ``timings`` only (llama-server appends the other
        results' choices to the first result). Streamed: each prompt's chunks carry its
        index, its last chunk its ``usage`` and ``timings``; every prompt but the first
        is announced by ``data: null`` (its "begin" result); one ``[DONE]`` at the end.
        """
        listed: Any = body.get("stop") or []
        stops: list[str] = [listed] if isinstance(listed, str) else list(listed)
        received = {"body": body, "headers": dict(request.headers)}
        head: dict[str, Any] = {"id": "fake-1", "object": "text_completion", "model": model}

        async def steps(prompt: Any) -> AsyncGenerator[tuple[int, str, str | None]]:
            async def pieces() -> AsyncIterator[tuple[list[int], str]]:
                async for w in generate({**body, "prompt": prompt}, request):
                    yield [0], w

            async for toks, text, st in with_stops(pieces(), stops, flush=args.fake_held_stop_text):
                yield len(toks), text, st

        def usage(n: int) -> dict[str, Any]:
            return {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}

        def choice(i: int, text: str, finish: str | None) -> dict[str, Any]:
            return {"text": text, "index": i, "logprobs": None, "finish_reason": finish}

        if not body.get("stream"):
            choices: list[dict[str, Any]] = []
            counts: list[int] = []
            for i, prompt in enumerate(prompts):
                text, finish, n = "", "length", 0
                async for k, t, st in steps(prompt):
                    n, text = n + k, text + t
                    finish = "stop" if st == "word" else finish
                choices.append(choice(i, text, finish))
                counts.append(n)
            out = head | {"choices": choices, "usage": usage(counts[0])}
            return JSONResponse(out | {"timings": timings(counts[0]), "fake_received": received})

        async def events() -> AsyncIterator[bytes]:
            per_token = bool(body.get("timings_per_token"))
            for i, prompt in enumerate(prompts):
                if i:
                    yield b"data: null\n\n"
                n = 0
                async with contextlib.aclosing(steps(prompt)) as each:
                    async for k, t, st in each:
                        n += k
                        if t and st != "held":
                            chunk = head | {"choices": [choice(i, t, None)]}
                            if per_token:
                                chunk["timings"] = timings(n)
                            yield f"data: {json.dumps(chunk)}\n\n".encode()
                        if st in ("word", "limit"):
                            end = choice(i, "", "stop" if st == "word" else "length")
                            last = head | {"choices": [end], "usage": usage(n)}
                            last |= {"timings": timings(n), "fake_received": received}
                            yield f"data: {json.dumps(last)}\n\n".encode()
                            break
            yield b"data: [DONE]\n\n"

        return ClosingStream(events(), media_type="text/event-stream")

    async def handle(request: Request, chat: bool) -> Any:
        body = await request.json()
        if (refused := refusal(body)) is not None:
            return refused
        if body.get("fake_backend_error"):  # a knob for a backend-side 400
            return JSONResponse(
                {
                    "error": {
                        "code": 400,
                        "message": "bad fake_backend_error",
                        "type": "invalid_request_error",
                    }
                },
                400,
            )
        if args.fake_ctx is not None and len(words_of(body)) > args.fake_ctx:
            n_prompt = len(words_of(body))
            return JSONResponse(
                {
                    "error": {
                        "code": 400,
                        "message": f"request ({n_prompt} tokens) exceeds the available "
                        f"context size ({args.fake_ctx} tokens), try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": n_prompt,
                        "n_ctx": args.fake_ctx,
                    }
                },
                400,
            )
        if args.fake_hang:
            await asyncio.sleep(3600)
        model = args.alias or args.model  # llama-server b11434 answers with its alias
        prompts = several_prompts(body)
        if prompts == []:
            return JSONResponse(
                {
                    "error": {
                        "code": 400,
                        "message": '"prompt" must not be empty',
                        "type": "invalid_request_error",
                    }
                },
                400,
            )
        if prompts is not None and len(prompts) > 1:
            return await several_answer(request, body, prompts, model)
        if chat and body.get("tools") and body.get("tool_choice") == "required":
            return tool_call_answer(body, model)
        stops = body.get("stop")
        if stops:
            listed = [stops] if isinstance(stops, str) else stops
            return await stop_answer(request, body, chat, model, listed)
        n_max = int(body.get("max_tokens") or 16)
        if not body.get("stream"):
            text = "".join([w async for w in generate(body, request)])
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
                    "timings": timings(n_max, body),
                    # What reached the backend, for pass-through tests.
                    "fake_received": {"body": body, "headers": dict(request.headers)},
                }
            )

        async def events() -> AsyncIterator[bytes]:
            obj = "chat.completion.chunk" if chat else "text_completion"
            n = 0
            async with contextlib.aclosing(knobbed(body, request)) as words:
                async for w in words:
                    n += 1
                    if isinstance(w, bytes):  # a knob cut the stream here
                        if w:
                            yield w
                        return
                    delta: dict[str, Any] = {"index": 0, "finish_reason": None}
                    if chat:
                        delta["delta"] = {"content": w}
                    else:
                        delta["text"] = w
                    chunk: dict[str, Any] = {"id": "fake-1", "object": obj, "model": model}
                    chunk["choices"] = [delta]
                    if body.get("timings_per_token"):
                        chunk["timings"] = timings(n, body)
                    parts = split_write(json.dumps(chunk, ensure_ascii=False).encode())
                    for k, part in enumerate(parts):
                        yield b"data: " + part if part.startswith(b"{") else part
                        if k + 1 < len(parts):  # split: the halves arrive as two reads
                            await asyncio.sleep(0.002)
                    yield b"\n\n"
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
                "timings": timings(n, body),
                "fake_received": {"body": body, "headers": dict(request.headers)},
            }
            yield f"data: {json.dumps(last)}\n\n".encode()
            options: dict[str, Any] = body.get("stream_options") or {}
            if options.get("include_usage") or args.fake_always_usage:
                usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
                tail: dict[str, Any] = {"id": "fake-1", "object": obj, "model": model}
                tail |= {"choices": [], "usage": usage}
                yield f"data: {json.dumps(tail)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return ClosingStream(events(), media_type="text/event-stream")

    @app.get("/slots")
    async def slots() -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        return JSONResponse([{"id": 0, "is_processing": busy[0] > 0}])

    @app.get("/metrics")
    async def metrics() -> Response:  # pyright: ignore[reportUnusedFunction]
        # llama-server's own format (``--metrics``): names prefixed ``llamacpp:``.
        text = (
            "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
            "# TYPE llamacpp:tokens_predicted_total counter\n"
            f"llamacpp:tokens_predicted_total {predicted[0]}\n"
            "# HELP llamacpp:requests_processing Number of requests processing.\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {busy[0]}\n"
        )
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.get("/props")
    async def props() -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        caps = {"supports_tools": not args.fake_no_tool_template, "supports_tool_calls": True}
        props: dict[str, Any] = {
            "model_alias": args.alias,
            "spec_type": args.spec_type,
            "chat_template_caps": caps,
        }
        # Patch 0004 shows the server's own speculators here; stock b11434 shows the
        # defaults of an empty task_params ("none").
        shown = "none"
        if args.fake_per_request_spec or args.fake_per_request or args.fake_props_only:
            props["speculative_per_request"] = True
            shown = ",".join(configured) or "none"
        if args.fake_held_stop_text:
            props["stream_sends_held_stop_text"] = True
        if args.fake_whole_stops:
            props["whole_answer_stops_for_gone_client"] = True
        props["default_generation_settings"] = {"params": {"speculative.types": shown}}
        return JSONResponse(props)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        body = await request.json()
        return JSONResponse({"content": "".join(piece(int(t)) for t in body["tokens"])})

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
        # llama-server refuses a prompt that leaves no room for one token (n_tokens >= n_ctx).
        if args.fake_ctx is not None and len(ids) >= args.fake_ctx:
            return JSONResponse(
                {
                    "error": {
                        "code": 400,
                        "message": "request exceeds the available context size",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": len(ids),
                        "n_ctx": args.fake_ctx,
                    }
                },
                400,
            )
        if args.fake_hang:
            await asyncio.sleep(3600)
        if (refused := refusal(body)) is not None:
            return refused
        slot = int(body.get("id_slot", -1))
        slot = slot if slot >= 0 else (args.fake_slot or 0)
        held = cached.get(slot, []) if body.get("cache_prompt", True) else []
        reused = next((i for i, (a, b) in enumerate(zip(held, ids, strict=False)) if a != b), None)
        reused = min(len(held), len(ids)) if reused is None else reused
        prompt_n = max(1, len(ids) - reused)  # llama-server evaluates at least one
        prompt_n = prompt_n if args.fake_slot is not None else 10
        seen = cached[slot] = list(ids)  # the slot's cache: the prompt, then each token
        n_predict = int(body.get("n_predict", -1))
        limit = n_predict if n_predict >= 0 else 64
        # A full context stops the generation as llama-server does (``truncated``).
        room = None if args.fake_ctx is None else args.fake_ctx - len(ids)
        truncated = room is not None and room < limit
        if room is not None:
            limit = min(limit, room)
        stops: list[str] = body.get("stop") or []

        hit_eos = [False]
        stopping_word: list[str] = []

        async def tokens() -> AsyncIterator[tuple[list[int], str]]:
            last = ids[-1]
            busy[0] += 1
            try:
                for i in range(limit):
                    if args.fake_crash_after is not None and i >= args.fake_crash_after:
                        os.kill(os.getpid(), signal.SIGKILL)
                    tok = next_token(last)
                    if args.fake_eos_token is not None and tok == args.fake_eos_token:
                        hit_eos[0] = True
                        return
                    if await request.is_disconnected():
                        return
                    await asyncio.sleep(1.0 / args.fake_tps)
                    last = tok
                    seen.append(tok)
                    yield [tok], piece(tok)
            finally:
                busy[0] -= 1

        async def gen() -> AsyncIterator[tuple[list[int], str, str | None]]:
            """Yield (tokens, text to send, stop_type or None); EOS releases held text."""
            async for toks, text, st in with_stops(
                tokens(), stops, stopping_word, args.fake_held_stop_text
            ):
                if st == "limit" and hit_eos[0]:
                    continue
                if st == "held" and hit_eos[0]:
                    yield [], text, "eos"
                    return
                yield toks, text, st

        def final(
            n: int, stop_type: str, content: str = "", tokens: list[int] | None = None
        ) -> dict[str, Any]:
            return {
                "content": content,
                "tokens": tokens or [],
                "stop": True,
                "stop_type": stop_type,
                "truncated": truncated and stop_type == "limit",
                "stopping_word": stopping_word[0] if stopping_word else "",
                "tokens_predicted": n,
                "tokens_evaluated": len(ids),
                "id_slot": slot,
                "timings": timings(n, body, prompt_n),
            }

        if not body.get("stream"):
            toks: list[int] = []
            text = ""
            stop_type = "limit"
            async for t, p, st in gen():
                toks += t
                text += p
                if st and st != "held":
                    stop_type = st
            return JSONResponse(final(len(toks), stop_type, text, toks))

        async def events() -> AsyncIterator[bytes]:
            n, carried = 0, ""
            lose = args.fake_lose_every
            async for t, p, st in gen():
                if st == "held":
                    return  # a stream drops the held-back text (llama-server b11434)
                n += len(t)
                if lose and t and st is None and n % lose == 0 and n < limit:
                    carried += p  # no event: the id is lost, the text comes later
                    continue
                if t or p:
                    event: dict[str, Any] = {"content": carried + p, "tokens": t, "stop": False}
                    event["id_slot"] = -1  # b11434 names the slot in the final event only
                    if body.get("timings_per_token"):
                        event["timings"] = timings(n, body, prompt_n)
                    carried = ""
                    yield f"data: {json.dumps(event)}\n\n".encode()
                if st:
                    yield f"data: {json.dumps(final(n, st))}\n\n".encode()
                    if st != "limit":
                        return

        return ClosingStream(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await handle(request, chat=True)

    def sse(event: str | None, data: dict[str, Any]) -> bytes:
        head = f"event: {event}\n" if event else ""
        return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    async def other_api(request: Request, api: str) -> Any:
        """/v1/responses, /v1/messages and /infill in llama-server b11434's shapes (only
        Responses' last streamed event and infill's answer carry timings)."""
        body = await request.json()
        if api == "messages" and "messages" not in body:  # b11434 answers a 500 here
            error = {"code": 500, "message": "'messages' is required", "type": "server_error"}
            return JSONResponse({"error": error}, 500)
        items = body.get("input") if api == "responses" else None
        if isinstance(items, list) and not all(map(responses_item_known, cast("list[Any]", items))):
            message = "Cannot determine type of 'item'"
            error = {"code": 400, "message": message, "type": "invalid_request_error"}
            return JSONResponse({"error": error}, 400)
        # Anthropic's stop_sequences, applied as b11434 does: a match ends the answer with
        # stop_reason "end_turn" and the string in stop_sequence (to_json_anthropic).
        stops: list[str] = (body.get("stop_sequences") or []) if api == "messages" else []
        found: list[str] = []

        async def stopped(words: AsyncGenerator[str | bytes], stream: bool) -> AsyncGenerator[str]:
            """The words under ``stops`` (the stream knobs do not apply then)."""

            async def pieces() -> AsyncIterator[tuple[list[int], str]]:
                async with contextlib.aclosing(words):
                    async for w in words:
                        if isinstance(w, str):
                            yield [0], w

            async with contextlib.aclosing(
                with_stops(pieces(), stops, found, args.fake_held_stop_text)
            ) as steps:
                async for _, t, st in steps:
                    if t and not (stream and st == "held"):
                        yield t

        def ending(n: int) -> dict[str, Any]:
            if found:
                return {"stop_reason": "end_turn", "stop_sequence": found[0]}
            return {"stop_reason": "max_tokens", "stop_sequence": None}

        def text_in(value: Any) -> str:  # the words of a string, or of the texts in blocks
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return " ".join(text_in(v) for v in cast("list[Any]", value))
            if isinstance(value, dict):
                block = cast("dict[str, Any]", value)
                return " ".join(text_in(block.get(k)) for k in ("text", "content"))
            return ""

        if api == "responses":
            view = {
                "prompt": text_in(body.get("input")),
                "max_tokens": body.get("max_output_tokens"),
            }
        elif api == "messages":
            view = {"prompt": text_in(body["messages"]), "max_tokens": body.get("max_tokens")}
        else:
            view = {"prompt": body.get("input_prefix", ""), "max_tokens": body.get("n_predict")}
        received = {"body": body, "headers": dict(request.headers)}
        if not body.get("stream"):
            text = "".join([w async for w in stopped(generate(view, request), False)])
            n = int(view["max_tokens"] or 16)
            if api == "responses":
                item: dict[str, Any] = {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
                out: dict[str, Any] = {
                    "object": "response",
                    "status": "completed",
                    "output": [item],
                }
                out["usage"] = {"input_tokens": 10, "output_tokens": n, "total_tokens": 10 + n}
            elif api == "messages":
                out = {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": text}],
                }
                out |= ending(n) | {"usage": {"input_tokens": 10, "output_tokens": n}}
            else:
                out = {"content": text, "stop": True, "timings": timings(n)}
            return JSONResponse(out | {"fake_received": received})

        async def events() -> AsyncIterator[bytes]:
            item: dict[str, Any] = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
            }
            if api == "responses":
                resp: dict[str, Any] = {
                    "id": "resp_1",
                    "object": "response",
                    "status": "in_progress",
                }
                for kind in ("response.created", "response.in_progress"):
                    yield sse(kind, {"type": kind, "response": resp})
                added: dict[str, Any] = {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": item,
                }
                yield sse(added["type"], added)
                part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
                started: dict[str, Any] = {
                    "type": "response.content_part.added",
                    "item_id": "msg_1",
                }
                started |= {"output_index": 0, "content_index": 0, "part": part}
                yield sse(started["type"], started)
            elif api == "messages":
                message = item | {"model": "fake", "stop_reason": None, "stop_sequence": None}
                message["usage"] = {"input_tokens": 10, "output_tokens": 0}
                yield sse("message_start", {"type": "message_start", "message": message})
                block: dict[str, Any] = {"type": "text", "text": ""}
                start: dict[str, Any] = {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": block,
                }
                yield sse(start["type"], start)
            n = 0
            produced = knobbed(view, request)
            async with contextlib.aclosing(stopped(produced, True) if stops else produced) as words:
                async for w in words:
                    n += 1
                    if isinstance(w, bytes):  # a knob cut the stream here
                        if w:
                            yield w
                        return
                    if api == "responses":
                        delta: dict[str, Any] = {
                            "type": "response.output_text.delta",
                            "item_id": "msg_1",
                        }
                        delta |= {"output_index": 0, "content_index": 0, "delta": w}
                        yield sse(delta["type"], delta)
                    elif api == "messages":
                        delta: dict[str, Any] = {"type": "text_delta", "text": w}
                        yield sse(
                            "content_block_delta",
                            {"type": "content_block_delta", "index": 0, "delta": delta},
                        )
                    else:
                        yield sse(None, {"content": w, "stop": False})
            if api == "responses":
                resp: dict[str, Any] = {
                    "id": "resp_1",
                    "object": "response",
                    "status": "completed",
                    "output": [],
                }
                done: dict[str, Any] = {
                    "type": "response.completed",
                    "response": resp,
                    "timings": timings(n),
                }
                yield sse(done["type"], done | {"fake_received": received})
            elif api == "messages":
                yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
                delta = ending(n)
                end: dict[str, Any] = {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": {"output_tokens": n},
                }
                yield sse(end["type"], end)
                yield sse("message_stop", {"type": "message_stop"})
            else:
                yield sse(None, {"content": "", "stop": True, "timings": timings(n)})

        return ClosingStream(events(), media_type="text/event-stream")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await other_api(request, "responses")

    @app.post("/v1/messages")
    async def messages(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await other_api(request, "messages")

    @app.post("/infill")
    async def infill(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
        return await other_api(request, "infill")

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
    app: Any = build_app(args)
    if args.fake_per_request_spec:
        types = [t for t in args.spec_type.split(",") if t != "none"]
        app = PerRequestSpec(app, types)
    if args.fake_load_s > 0:
        app = Loading(app, args.fake_load_s)
    if args.fake_record:
        app = Recorder(app, args.fake_record)
    if args.fake_calls:
        app = CallLog(app, args.fake_calls)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
    server = StubbornServer(config) if args.fake_ignore_sigterm else uvicorn.Server(config)
    server.run()


if __name__ == "__main__":
    main()
