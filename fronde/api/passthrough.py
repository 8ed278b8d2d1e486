"""llama.cpp's native endpoints, passed through to one chosen backend.

``POST /completion``, ``/tokenize``, ``/detokenize``, ``/apply-template`` and
``GET /props``, ``/slots`` reach the backend named by the ``x-fronde-mode``
header or the ``mode`` query parameter; without either, baseline (or, when
baseline does not run, the first ready mode). No routing happens here: these
are for tools that speak llama-server's own API, and for checking a backend
(``/slots`` shows whether a slot is still processing).

Bodies go to the backend as sent; the client's headers do not (Fronde's own
client builds each request). A streamed ``/completion`` is relayed byte for
byte and, like the OpenAI routes, ends with an in-band error event if the
backend breaks; ``/completion`` also takes a decode-gate slot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fronde.api.deps import RuntimeDep
from fronde.api.relay import RelayResponse, sse_error_event
from fronde.api.schema import read_json_body
from fronde.backends.client import TRANSPORT_ERRORS
from fronde.errors import BackendUnavailableError
from fronde.modes import Mode
from fronde.router.choice import parse_mode
from fronde.router.engine import GateHold

__all__ = ["NATIVE_GET", "NATIVE_POST", "native"]

native = APIRouter()

NATIVE_POST = ("/completion", "/tokenize", "/detokenize", "/apply-template")
"""llama-server endpoints passed through on POST."""
NATIVE_GET = ("/props", "/slots")
"""llama-server endpoints passed through on GET."""


def _target(request: Request, rt: RuntimeDep) -> tuple[Mode, str]:
    """The backend a native call goes to: (mode, base URL).

    Raises:
        UnknownModeError, ModeUnavailableError: the named mode does not exist or
            is not run here.
        BackendUnavailableError: no backend is ready.
    """
    name = request.headers.get("x-fronde-mode") or request.query_params.get("mode")
    if name:
        mode = parse_mode(name, param="mode")
    else:
        ready = rt.pool.ready_modes()
        if not ready:
            raise BackendUnavailableError("no backend is ready yet")
        mode = Mode.BASELINE if Mode.BASELINE in ready else ready[0]
    return mode, rt.pool.get(mode).url


async def _get(request: Request, rt: RuntimeDep) -> Response:
    mode, url = _target(request, rt)
    data = await rt.client.get_json(url, request.url.path)
    return JSONResponse(data, headers={"x-fronde-mode": str(mode)})


async def _post(request: Request, rt: RuntimeDep) -> Response:
    path = request.url.path
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    mode, url = _target(request, rt)
    headers = {"x-fronde-mode": str(mode)}
    if path != "/completion":
        return JSONResponse(await rt.client.post_json(url, path, body), headers=headers)
    hold = GateHold(rt.router.gate)
    await hold.acquire()
    if not body.get("stream"):
        try:
            return JSONResponse(await rt.client.post_json(url, path, body), headers=headers)
        finally:
            hold.release()
    stack = AsyncExitStack()
    stack.callback(hold.release)
    try:
        resp = await stack.enter_async_context(rt.client.stream(url, path, body))
    except BaseException:
        await stack.aclose()
        raise

    async def events() -> AsyncIterator[bytes]:
        try:
            async for part in resp.aiter_raw():
                yield part
        except TRANSPORT_ERRORS as exc:
            yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {type(exc).__name__}")
        finally:
            with anyio.CancelScope(shield=True):  # see routes._send
                await stack.aclose()

    return RelayResponse(events(), media_type="text/event-stream", headers=headers)


for _path in NATIVE_POST:
    native.add_api_route(_path, _post, methods=["POST"], include_in_schema=True)
for _path in NATIVE_GET:
    native.add_api_route(_path, _get, methods=["GET"], include_in_schema=True)
