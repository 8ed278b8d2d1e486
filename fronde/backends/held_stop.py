"""Whether a llama-server's stream keeps the text it held back for a stop string.

llama-server holds back text that may be the start of a stop string until the next
token decides. b11434 never sends that text when a stream ends at its token budget
(``process_token`` in ``tools/server/server-context.cpp`` tests ``has_next_token``
before the budget clears it; ``send_final_response`` sends no content in a stream),
while the same request not streamed returns it. So on a stock server Fronde takes the
stop strings of what it streams from llama-server (a relayed stream, and a whole answer,
which it asks for as a stream too) for itself (:class:`~fronde.request.choices.OwnedStops`):
it parses every event and asks for ``timings_per_token``, 0.37 against 0.20 ms of its CPU
a streamed token on the 2-core CPU (``scripts/relay_cost.py --stop``). Fronde's patch
0009 sends the held text and says so in ``GET /props``
(``"stream_sends_held_stop_text": true``); on such a server both leave their stop strings
to llama-server (:func:`~fronde.request.choices.take_stops`, the one rule), and a relayed
stream's events pass through untouched.

The flag is the pool's ``/props`` entry (:mod:`fronde.backends.props`): read once per
backend URL and kept; a ``/props`` that fails is not kept (asked again next time) and
reads as False.
"""

from __future__ import annotations

from fronde.backends.props import HELD_STOP_FLAG, WHOLE_STOPS_FLAG, PropsCache

__all__ = ["HELD_STOP_FLAG", "WHOLE_STOPS_FLAG", "HeldStopText"]


class HeldStopText:
    """Per backend URL, two facts of its answers that Fronde's relay acts on.

    Whether its streams send the text held back for a stop string (patch 0009), and
    whether it stops a whole answer for a gone client (patch 0010: Fronde asks it whole).

    Args:
        props: the pool's ``/props`` cache.
    """

    def __init__(self, props: PropsCache) -> None:
        self.props = props

    async def sent(self, base_url: str) -> bool:
        """Whether the llama-server at ``base_url`` says :data:`HELD_STOP_FLAG`.

        Never raises: a failed ``GET /props`` reads as False and is asked again later.
        """
        props = await self.props.get(base_url)
        return props is not None and props.held_stop_text

    async def whole_stops(self, base_url: str) -> bool:
        """Whether the llama-server at ``base_url`` says :data:`WHOLE_STOPS_FLAG`.

        Never raises: a failed ``GET /props`` reads as False and is asked again later.
        """
        props = await self.props.get(base_url)
        return props is not None and props.whole_stops
