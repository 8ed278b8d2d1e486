"""What the routes depend on: the :class:`Runtime` the lifespan builds, and its getter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.backends.swap import SwapScheduler
from fronde.config import Settings
from fronde.metrics import Metrics
from fronde.modes import Mode
from fronde.router.engine import Router

__all__ = ["Runtime", "RuntimeDep", "get_runtime"]


@dataclass
class Runtime:
    """What the routes need, built once by the app's lifespan.

    Attributes:
        settings: the settings tree.
        pool: the llama-server backends.
        client: the HTTP client to them.
        router: routing state.
        started_at: when the app started, epoch seconds.
        metrics: the Prometheus instruments.
        swap: the swap scheduler with ``residency = "swap"``, else None (all resident).
        tool_template: whether baseline's chat template describes tools (its ``/props``),
            read on the first request that needs it; None until then.
    """

    settings: Settings
    pool: BackendPool
    client: BackendClient
    router: Router
    started_at: float
    metrics: Metrics
    swap: SwapScheduler | None = None
    tool_template: bool | None = None

    def routable(self) -> list[Mode]:
        """Modes a request may be routed to now.

        The ready ones; with swap residency, every swappable mode (a request for a
        non-resident one waits for its epoch).
        """
        return self.swap.available() if self.swap is not None else self.pool.ready_modes()


async def get_runtime(request: Request) -> Runtime:
    """Return the app's :class:`Runtime` (set by the lifespan in ``create_app``).

    ``async`` on purpose: FastAPI runs a plain ``def`` dependency in its thread
    pool, a thread hop on every request (seen by py-spy in issue 9).
    """
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
