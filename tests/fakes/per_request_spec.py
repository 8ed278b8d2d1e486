"""The fake llama-server's ``--fake-per-request-spec`` knob: a patched server's fields.

With the knob the fake behaves as llama-server b11434 with Fronde's patch set
(``fronde/runtime/patches/b11434``, ``docs/llama-patches.md``):

- ``GET /props`` carries ``"speculative_per_request": true``;
- a completion body's ``speculative.n_max`` (0 ≤ n ≤ :data:`FAKE_SPEC_N_MAX`, or 0 on a
  server without ``--spec-type``), ``speculative.types`` (a subset of the server's
  ``--spec-type`` list), ``speculative.n_min`` (at most the draft length) and
  ``speculative.p_min`` (0..1) are checked as the patched schema checks them; a bad one
  gets llama-server's HTTP 400 (``invalid_request_error``, ``Field '…': …``);
- the answer's ``timings`` carry ``draft_n_max``, the cap the request ran with, and no
  ``draft_n`` when that cap is 0 (a request that drafts nothing, as the patched server
  reports it).

Without the knob the fake is stock b11434: it ignores the fields. :class:`PerRequestSpec`
is an ASGI wrapper, as ``Recorder`` is: it reads the body, answers the 400 itself, and
leaves the cap in :data:`DRAFT_CAP` for the fake's ``timings`` to read.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any, cast

__all__ = ["DRAFT_CAP", "FAKE_SPEC_N_MAX", "PerRequestSpec", "resolve_cap"]

FAKE_SPEC_N_MAX = 16
"""The fake's own maximum draft length when it speculates (the patched server's is
``common_speculative_n_max`` of its configuration)."""

DRAFT_CAP: ContextVar[int | None] = ContextVar("DRAFT_CAP", default=None)
"""The per-request draft cap of the request being answered; None on a stock fake."""

COMPLETION_PATHS = frozenset(
    {"/completion", "/v1/completions", "/v1/chat/completions", "/infill", "/v1/responses"}
)
"""Routes whose body goes through llama-server's completion schema."""


class FieldError(ValueError):
    """A per-request field llama-server's patched schema refuses."""


def _num(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(f"Field '{name}': type must be number, but is {type(value).__name__}")
    return float(value)


def resolve_cap(body: dict[str, Any], spec_types: list[str]) -> int:
    """The draft cap a request runs with on the patched server; raises :class:`FieldError`.

    ``spec_types``: the server's ``--spec-type`` list (empty: no speculation).
    """
    server_max = FAKE_SPEC_N_MAX if spec_types else 0
    n_max = _num(body, "speculative.n_max")
    if n_max is not None and not 0 <= n_max <= server_max:
        raise FieldError(
            f"Field 'speculative.n_max': Value must be between 0 <= value <= {server_max}, "
            f"but got {int(n_max)}"
        )
    allowed = spec_types
    names: Any = body.get("speculative.types")
    if names is not None:
        if not isinstance(names, list):
            raise FieldError("Field 'speculative.types': must be an array of type names")
        for name in cast("list[Any]", names):
            if name not in spec_types:
                raise FieldError(
                    f"Field 'speculative.types': the server was not started with speculative "
                    f"type '{name}' (server types: [{','.join(spec_types)}])"
                )
        allowed = [t for t in spec_types if t in names]
    cap = min(server_max if n_max is None else int(n_max), server_max if allowed else 0)
    n_min = _num(body, "speculative.n_min")
    if n_min is not None and not 0 <= n_min <= cap:
        raise FieldError(
            f"Field 'speculative.n_min': Value must be between 0 <= value <= {cap} "
            f"(the draft length), but got {int(n_min)}"
        )
    p_min = _num(body, "speculative.p_min")
    if p_min is not None and not 0.0 <= p_min <= 1.0:
        raise FieldError(
            f"Field 'speculative.p_min': Value must be between 0.000000 <= value <= "
            f"1.000000, but got {p_min:.6f}"
        )
    return cap


class PerRequestSpec:
    """ASGI wrapper of ``--fake-per-request-spec``: checks the fields, sets :data:`DRAFT_CAP`.

    Args:
        app: the fake's app.
        spec_types: the server's ``--spec-type`` list (empty: no speculation).
    """

    def __init__(self, app: Any, spec_types: list[str]) -> None:
        self.app, self.spec_types = app, spec_types

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in COMPLETION_PATHS:
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
            body: Any = json.loads(raw) if raw else {}
            cap = resolve_cap(body if isinstance(body, dict) else {}, self.spec_types)  # pyright: ignore[reportUnknownArgumentType]
        except FieldError as exc:
            await _send_400(send, str(exc))
            return
        except ValueError:
            cap = None  # not JSON: the app answers as it does
        DRAFT_CAP.set(cap)
        replayed = [False]

        async def replay() -> Any:
            if replayed[0]:
                return await receive()
            replayed[0] = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


async def _send_400(send: Any, message: str) -> None:
    """llama-server's answer to a field its schema refuses (``format_error_response``)."""
    error = {"code": 400, "message": message, "type": "invalid_request_error"}
    data = json.dumps({"error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": data})
