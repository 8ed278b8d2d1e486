"""llama-server's own endpoints (``/completion``, ``/tokenize``, ``/props`` ...), passed through.

A native call names its mode (``?mode=`` or ``x-fronde-mode``) or goes to baseline (else
the first ready mode); it is not routed. ``/completion`` takes a decode slot like any
generation and, on a server of every mode, gets the mode's request fields under the
client's own (:func:`~fronde.backends.pool.BackendPool.fields`); streamed, it is
relayed byte for byte and ends with an in-band error event if the backend breaks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.errors import BackendStreamError, BackendUnavailableError
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.admission import Admission
from fronde.request.relay import sse_error_event
from fronde.request.reply import Answer, Streamed, Whole
from fronde.router.choice import parse_mode
from fronde.router.engine import Router

__all__ = ["NativeCalls"]


class NativeCalls:
    """Passes llama-server's own endpoints through to a mode's backend.

    Args:
        pool: the backends.
        client: the HTTP client to them.
        router: its decode gate is taken by ``/completion``.
    """

    def __init__(self, pool: BackendPool, client: BackendClient, router: Router) -> None:
        self.pool = pool
        self.client = client
        self.router = router

    def _target(self, name: str | None) -> tuple[Mode, str]:
        """The backend a native call goes to: (mode, base URL).

        Raises:
            UnknownModeError, ModeUnavailableError: the named mode does not exist or
                is not run here.
            BackendUnavailableError: no backend is ready.
        """
        if name:
            mode = parse_mode(name, param="mode")
        else:
            ready = self.pool.ready_modes()
            if not ready:
                raise BackendUnavailableError("no backend is ready yet")
            mode = Mode.BASELINE if Mode.BASELINE in ready else ready[0]
        return mode, self.pool.get(mode).url

    async def get(self, path: str, mode_name: str | None) -> Whole:
        """``GET path`` on the named mode's backend (baseline, or the first ready, if None)."""
        mode, url = self._target(mode_name)
        data = await self.client.get_json(url, path)
        return Whole(data, {"x-fronde-mode": str(mode)})

    async def post(self, path: str, body: JSONObject, mode_name: str | None) -> Answer:
        """``POST path`` on the named mode's backend, body as sent.

        ``/completion`` takes a decode slot; streamed, it is relayed byte for byte and
        ends with an in-band error event if the backend breaks.
        """
        mode, url = self._target(mode_name)
        headers = {"x-fronde-mode": str(mode)}
        if path != "/completion":
            return Whole(await self.client.post_json(url, path, body), headers)
        # On a server of every mode, the mode's fields say which mode runs; the client's
        # own fields win here (a native call is passed as sent).
        body = {**self.pool.fields(mode), **body}
        adm = Admission(self.router)
        await adm.take_slot()
        if not body.get("stream"):
            try:
                return Whole(await self.client.post_json(url, path, body), headers)
            finally:
                adm.release()
        stack = AsyncExitStack()
        stack.callback(adm.release)
        try:
            upstream = await stack.enter_async_context(self.client.stream(url, path, body))
        except BaseException:
            await stack.aclose()
            raise

        async def events() -> AsyncIterator[bytes]:
            try:
                async for part in upstream.raw():
                    yield part
            except BackendStreamError as exc:
                yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {exc.cause}")
            finally:
                with anyio.CancelScope(shield=True):  # see Sender.send
                    await stack.aclose()

        return Streamed(events(), headers, stack.aclose)
