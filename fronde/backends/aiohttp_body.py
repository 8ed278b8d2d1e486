"""The aiohttp reader under an httpx-aiohttp response, for a streamed body read raw.

Over the aiohttp transport httpx puts four async generators between a relayed stream and
aiohttp's reader, each resumed once a network read: its bound stream, ``aiter_raw`` (a
chunker and a request context), httpx-aiohttp's stream (``iter_chunked`` under an
exception-mapping block). Reading aiohttp's own reader instead costs 0.019 ms a streamed
token less on the 2-core CPU, [0.012, 0.039] over 5 paired rounds of
``scripts/relay_cost.py``: a tenth of what the whole relay costs. The response stays
httpx's, closed by it; aiohttp's errors while reading are among
:data:`~fronde.backends.client.TRANSPORT_ERRORS`.

httpx-aiohttp 0.2 keeps the aiohttp response in a private attribute of its stream, and
httpx its stream in a private attribute of the bound one. Should a release move either,
nothing is found and the body is read through httpx as before (slower, not wrong);
``tests/unit/test_client.py`` notices.
"""

from __future__ import annotations

import aiohttp
import httpx

__all__ = ["aiohttp_reader"]


def aiohttp_reader(resp: httpx.Response) -> aiohttp.StreamReader | None:
    """The body reader of the aiohttp response under ``resp``, else None (another transport)."""
    stream = getattr(resp.stream, "_stream", None)  # httpx's BoundAsyncStream
    native = getattr(stream, "_aiohttp_response", None)  # httpx-aiohttp's stream
    return native.content if isinstance(native, aiohttp.ClientResponse) else None
