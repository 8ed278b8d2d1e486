"""What the routes depend on: the app's :class:`~fronde.compose.Runtime`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fronde.compose import Runtime

__all__ = ["RuntimeDep", "get_runtime", "runtime_of"]


def runtime_of(request: Request) -> Runtime:
    """Return the app's :class:`~fronde.compose.Runtime` (set by ``create_app``).

    A plain call for the routes most requests take (chat and text completions, the
    other APIs): solving :data:`RuntimeDep` as a FastAPI dependency cost those routes
    about a fifth of the framework's CPU a request (docs/overhead.md).
    """
    runtime: Runtime = request.app.state.runtime
    return runtime


async def get_runtime(request: Request) -> Runtime:
    """:func:`runtime_of` as a FastAPI dependency, for the other routes.

    ``async`` on purpose: FastAPI runs a plain ``def`` dependency in its thread
    pool, a thread hop on every request (seen by py-spy in issue 9).
    """
    return runtime_of(request)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
