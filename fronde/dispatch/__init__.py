"""A request's life, from admission to its last byte.

The layer between the API and the router and backends.

The API layer parses and checks a request, then calls the :class:`Dispatcher`; it
gets back an :data:`Answer` (a :class:`Whole` JSON body or a :class:`Streamed` SSE
answer) to render. :func:`build_runtime` is the composition root.
"""

from fronde.dispatch.answer import Answer, Streamed, Whole
from fronde.dispatch.batch import MAX_BATCH, BatchItem, run_batch
from fronde.dispatch.compose import Runtime, build_pool, build_runtime
from fronde.dispatch.dispatcher import PATHS, Dispatcher

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
