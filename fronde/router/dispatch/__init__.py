"""A request's life, from admission to its last byte.

The part of ``router/`` that does I/O: between the API and the router's pure policy and
state (``fronde.router.engine`` and its neighbours) and the backends.

The API layer parses and checks a request, then calls the :class:`Dispatcher`; it
gets back an :data:`Answer` (a :class:`Whole` JSON body or a :class:`Streamed` SSE
answer) to render. :func:`build_runtime` is the composition root.
"""

from fronde.router.dispatch.answer import Answer, Streamed, Whole
from fronde.router.dispatch.batch import MAX_BATCH, BatchItem, run_batch
from fronde.router.dispatch.compose import Runtime, build_pool, build_runtime
from fronde.router.dispatch.dispatcher import PATHS, Dispatcher

__all__ = [
    "MAX_BATCH",
    "PATHS",
    "Answer",
    "BatchItem",
    "Dispatcher",
    "Runtime",
    "Streamed",
    "Whole",
    "build_pool",
    "build_runtime",
    "run_batch",
]
