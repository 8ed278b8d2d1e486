"""What the routes depend on: the app's :class:`~fronde.compose.Runtime`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fronde.compose import Runtime

__all__ = ["RuntimeDep", "get_runtime"]


async def get_runtime(request: Request) -> Runtime:
    """Return the app's :class:`~fronde.compose.Runtime` (set by ``create_app``).

    ``async`` on purpose: FastAPI runs a plain ``def`` dependency in its thread
    pool, a thread hop on every request (seen by py-spy in issue 9).
    """
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
