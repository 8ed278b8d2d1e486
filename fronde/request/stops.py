"""Stop strings matched by Fronde, over a whole answer, as llama-server matches them.

llama-server matches the request's ``stop`` strings against the text one request
generates (``tools/server/server-context.cpp``, ``process_token`` and
``find_stopping_strings``): after each token, the earliest full match in the text not
yet sent ends the generation and cuts the text at the match (the stop string is not
returned); otherwise text that ends with a prefix of a stop string is held back until
the next token decides (``string_find_partial_stop`` in ``common/common.cpp``).

Fronde needs the same rule over text that is *not* one request: a probe hands a
generation over between backends, so a stop string can begin in one segment and end
in the next, and in streams llama-server b11434 drops the text it held back when the
budget runs out (the final event carries no content). :class:`StopMatcher` is the
rule, fed piece by piece; :meth:`StopMatcher.flush` releases held-back text at the
end, which is what llama-server's non-streamed answer keeps. Pure, no I/O.

Known limit: llama-server checks after each token, so of two strings completed by
different tokens the one completed first wins; :meth:`StopMatcher.feed` takes the
earliest start within a piece, which is the same rule while a piece is one token. A
stream event can carry two tokens' text (a token that ends inside a multi-byte character
gets no event of its own), and if two strings complete in it, one in each token, the one
that starts first wins here: the answer ends a few characters earlier than one
backend's. Where the first token's text ends inside such an event is not sent. The
property test in ``tests/unit/test_splice.py`` found this (2026-12-04) and accepts
exactly this difference on its lossy fakes.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher", "partial_stop_at"]


def partial_stop_at(text: str, word: str) -> int | None:
    """Where the longest suffix of ``text`` that is a proper prefix of ``word`` starts.

    The same rule as llama.cpp's ``string_find_partial_stop``: the text could still
    turn into ``word`` with more tokens.

    Args:
        text: the text so far.
        word: one stop string.

    Returns:
        The index in ``text`` where the partial match begins, or None.
    """
    for k in range(min(len(word) - 1, len(text)), 0, -1):
        if text.endswith(word[:k]):
            return len(text) - k
    return None


class StopMatcher:
    """Applies ``stop`` strings to an answer fed in pieces, holding back partial matches.

    Feed each piece of generated text with :meth:`feed`; it returns the text that is
    safe to release now. Once a stop string is complete, :attr:`stopped` is True, the
    text up to (not including) the earliest match has been released, and nothing
    more is accepted. At the end of a generation that did not stop on a string,
    :meth:`flush` returns what was held back.

    Args:
        stops: the request's stop strings; empty strings are ignored.

    Attributes:
        stopped: a stop string matched.
        word: the stop string that matched, or None.
        released: all text released so far (the answer, once finished).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.stopped = False
        self.word: str | None = None
        self.released = ""
        self._held = ""

    @property
    def held(self) -> str:
        """Text kept back because it may be the start of a stop string."""
        return self._held

    def feed(self, piece: str) -> str:
        """Take the next ``piece`` of generated text; return the text to release now.

        Raises:
            RuntimeError: called after a stop string matched.
        """
        if self.stopped:
            raise RuntimeError("the answer already ended on a stop string")
        text = self._held + piece
        if not self.stops:
            self.released += text
            self._held = ""
            return text
        # The earliest full match among all stop strings ends the answer. Held text
        # had no full match, so any match involves the new piece.
        hits = [(i, w) for w in self.stops if (i := text.find(w)) >= 0]
        if hits:
            at, word = min(hits)
            self.stopped, self.word, self._held = True, word, ""
            out = text[:at]
            self.released += out
            return out
        starts = [p for w in self.stops if (p := partial_stop_at(text, w)) is not None]
        cut = min(starts) if starts else len(text)
        out, self._held = text[:cut], text[cut:]
        self.released += out
        return out

    def flush(self) -> str:
        """Release whatever was held back (the generation ended without a stop string)."""
        out, self._held = self._held, ""
        self.released += out
        return out
