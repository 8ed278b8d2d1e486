"""llama.cpp's native endpoints, passed through to one chosen backend.

``POST /completion``, ``/tokenize``, ``/detokenize``, ``/apply-template``, the token
count of the Responses API (``/v1/responses/input_tokens``; Anthropic's, whose body
is checked first, is in :mod:`fronde.api.apis`) and ``GET /props``, ``/slots`` reach
the backend named by the ``x-fronde-mode`` header or the ``mode`` query parameter; without
either, baseline (or, when baseline does not run, the first ready mode). No routing
happens here: these are for tools that speak llama-server's own API, and for checking
a backend (``/slots`` shows whether a slot is still processing).

Bodies go to the backend as sent; the client's headers do not (Fronde's own
client builds each request). A streamed ``/completion`` is relayed byte for
byte and, like the OpenAI routes, ends with an in-band error event if the
backend breaks; ``/completion`` also takes a decode-gate slot.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fronde.api.asgi import render
from fronde.api.deps import RuntimeDep
from fronde.api.schema import read_json_body

__all__ = ["NATIVE_GET", "NATIVE_POST", "native"]

native = APIRouter()

NATIVE_POST = (
    "/completion",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/responses/input_tokens",
)
"""llama-server endpoints passed through on POST."""
NATIVE_GET = ("/props", "/slots")
"""llama-server endpoints passed through on GET."""


def _mode_name(request: Request) -> str | None:
    return request.headers.get("x-fronde-mode") or request.query_params.get("mode")


async def _get(request: Request, rt: RuntimeDep) -> Response:
    return render(await rt.dispatcher.native.get(request.url.path, _mode_name(request)))


async def _post(request: Request, rt: RuntimeDep) -> Response:
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    answer = await rt.dispatcher.native.post(request.url.path, body, _mode_name(request))
    return render(answer)


for _path in NATIVE_POST:
    native.add_api_route(_path, _post, methods=["POST"], include_in_schema=True)
for _path in NATIVE_GET:
    native.add_api_route(_path, _get, methods=["GET"], include_in_schema=True)
