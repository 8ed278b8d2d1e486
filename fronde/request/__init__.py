"""A request's life, from admission to its last byte.

The part of Fronde that does a request's I/O: between the API and the router's pure
policy and state (:mod:`fronde.router`, which reads :mod:`fronde.evidence`) and the
backends. The probe-and-continue splice, the SSE relay, stop strings and the native
``/completion`` shapes live here.

The API layer parses and checks a request, then calls the :class:`Dispatcher`; it
gets back an :data:`Answer` (a :class:`Whole` JSON body or a :class:`Streamed` SSE
answer) to render. :mod:`fronde.compose` is the composition root that builds it.
"""

from fronde.request.batch import MAX_BATCH, BatchItem, run_batch
from fronde.request.dispatcher import Dispatcher
from fronde.request.reply import Answer, Streamed, Whole
from fronde.request.sender import PATHS

__all__ = [
    "MAX_BATCH",
    "PATHS",
    "Answer",
    "BatchItem",
    "Dispatcher",
    "Streamed",
    "Whole",
    "run_batch",
]
