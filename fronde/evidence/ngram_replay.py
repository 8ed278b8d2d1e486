"""Shadow acceptance: what ngram-simple and ngram-mod would have drafted and accepted.

Given the token ids of a generation (prompt ids plus generated ids), replay the
decode loop of llama-server b11434 with a model-free drafter and count how many
drafted tokens the target would have accepted. At temperature 0 the target accepts
a drafted token exactly when it equals the token the target produced, so the
generated ids are all the replay needs: no model runs.

The drafters follow llama.cpp b11434 line for line:

- **ngram-simple** (``common/ngram-map.cpp``, ``common_ngram_simple_draft``): the
  last ``size_n`` tokens (the context's last ``size_n - 1`` plus the token just
  sampled) are searched backwards in the context; the ``size_m`` tokens after the
  most recent earlier occurrence are the draft, if at least ``size_n`` of them exist.
  Stateless. Defaults ``size_n=12``, ``size_m=48`` (``common/common.h``).
- **ngram-mod** (``common/speculative.cpp``, ``common_speculative_impl_ngram_mod``;
  ``common/ngram-mod.cpp``): a table from an ``n_match``-gram to the token that
  followed it. The prompt's n-grams are added when the request begins, the
  generation's in chunks of more than 32 tokens. A draft chains lookups up to
  ``n_max`` tokens and is dropped if the chain breaks before ``n_min``. Five
  consecutive drafts with less than a quarter accepted reset the table. Defaults
  ``n_max=64``, ``n_min=48`` (``common/common.h``); Fronde runs ``n_match=12``.
  llama.cpp hashes into 4 Mi slots where a collision overwrites; this replay keys a
  dict by the n-gram's Python hash, so it differs only on hash collisions. The real
  table is shared by every request a server has seen; :class:`NgramModTable` can be
  kept across calls to mirror that, and :meth:`NgramModTable.fork` asks "what if this
  request had gone there" without changing the mirror.
- **cascade** (``--spec-type ngram-simple,ngram-mod``; ``common_speculative_draft``):
  each speculator is asked in turn and the first non-empty draft is used; only the
  speculator that drafted counts the pass's acceptance (``common_speculative_accept``).

The server side (``tools/server/server-context.cpp``): a draft is cut to
``n_remaining - 1`` tokens; each target pass yields the accepted prefix plus one
sampled token.

α = accepted ÷ drafted; τ = generated tokens ÷ target passes, as
:mod:`fronde.evidence.measure` defines them from ``timings``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "CascadeDrafter",
    "NgramModTable",
    "ShadowStats",
    "ngram_simple_drafter",
    "replay",
    "shadow_cascade",
    "shadow_ngram_mod",
    "shadow_ngram_simple",
]

NGRAM_SIMPLE_SIZE_N = 12
"""Lookup n-gram length in tokens (llama.cpp ``common_params_speculative_ngram_map``)."""
NGRAM_SIMPLE_SIZE_M = 48
"""Most tokens ngram-simple drafts (llama.cpp ``common_params_speculative_ngram_map``)."""
NGRAM_MOD_N_MAX = 64
"""Most tokens ngram-mod drafts (llama.cpp ``common_params_speculative_ngram_mod``)."""
NGRAM_MOD_N_MIN = 48
"""A shorter ngram-mod chain is dropped (llama.cpp ``common_params_speculative_ngram_mod``)."""
_MOD_ADD_CHUNK = 32
"""New n-grams are added once more than this many tokens are pending (speculative.cpp)."""
_MOD_LOW_ACCEPT = 0.25
_MOD_LOW_STREAK = 5
MIRROR_MAX_ENTRIES = 1 << 22
"""A mirror holding more entries than llama.cpp's table has slots (4 Mi) starts over:
the real table overwrites on collision by then, so the mirror is an approximation
either way, and this bounds its memory (about 100 bytes an entry)."""

Drafter = Callable[[Sequence[int], int], list[int]]
"""(context ids, last sampled id) → draft ids; the context excludes the sampled id."""


@dataclass(frozen=True)
class ShadowStats:
    """What a replay counted.

    Attributes:
        generated: tokens generated (the replayed ids).
        drafted: draft tokens proposed (``draft_n`` in llama-server ``timings``).
        accepted: draft tokens accepted (``draft_n_accepted``).
        passes: target forward passes, each yielding one sampled token plus the
            accepted prefix of its draft.
    """

    generated: int
    drafted: int
    accepted: int
    passes: int

    @property
    def alpha(self) -> float | None:
        """α = accepted ÷ drafted, or None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tau(self) -> float:
        """τ = generated tokens ÷ target passes (1.0: no gain)."""
        return self.generated / self.passes if self.generated else 1.0


def replay(
    prompt: Sequence[int],
    generated: Sequence[int],
    drafter: Drafter,
    *,
    n_predict: int | None = None,
    on_accept: Callable[[int, int], None] | None = None,
) -> ShadowStats:
    """Replay llama-server's speculative decode loop over known ids at temperature 0.

    Args:
        prompt: the prompt's token ids.
        generated: the generated token ids, in order (the target's greedy choices).
        drafter: proposes a draft from (context, last sampled id).
        n_predict: the request's token budget; drafts are cut to ``n_remaining - 1``
            as in ``server_slot::get_n_draft_max``. Defaults to ``len(generated)``.
        on_accept: called with (draft length, accepted) after each drafted pass.

    Returns:
        The counts; α and τ are properties of the result.
    """
    budget = len(generated) if n_predict is None else n_predict
    context = list(prompt)
    drafted = accepted = 0
    passes = 1  # the prompt's pass samples the first token
    i = 0  # generated[i] is the token just sampled (id_last)
    while i + 1 < len(generated):
        n_remaining = budget - (i + 1)
        draft = drafter(context, generated[i]) if n_remaining - 1 > 0 else []
        draft = draft[: max(0, n_remaining - 1)]
        k = 0
        while k < len(draft) and i + 1 + k < len(generated) and draft[k] == generated[i + 1 + k]:
            k += 1
        if draft:
            drafted += len(draft)
            accepted += k
            if on_accept is not None:
                on_accept(len(draft), k)
        passes += 1
        context.extend(generated[i : i + k + 1])
        i += k + 1
    return ShadowStats(len(generated), drafted, accepted, passes)


def ngram_simple_drafter(
    size_n: int = NGRAM_SIMPLE_SIZE_N, size_m: int = NGRAM_SIMPLE_SIZE_M
) -> Drafter:
    """ngram-simple's drafter (``common_ngram_simple_draft``), with an incremental index.

    llama.cpp scans backwards from position ``len - size_n - 1`` down to 1 for the
    pattern; the index below keeps, for each ``size_n``-gram, its most recent start in
    that range, which is the same answer without the scan.

    Raises:
        ValueError: ``size_n`` or ``size_m`` below 1.
    """
    if size_n < 1 or size_m < 1:
        raise ValueError("size_n and size_m must be at least 1")
    last_start: dict[tuple[int, ...], int] = {}
    indexed = [1]  # next start position to index; position 0 is never a match

    def draft(context: Sequence[int], sampled: int) -> list[int]:
        cur = len(context)
        if cur <= size_n + size_m + 1:
            return []
        for j in range(indexed[0], cur - size_n):  # starts 1 .. cur - size_n - 1
            last_start[tuple(context[j : j + size_n])] = j
        indexed[0] = max(indexed[0], cur - size_n)
        pattern = (*context[cur - size_n + 1 :], sampled)
        pos = last_start.get(pattern)
        if pos is None:
            return []
        copy = min(size_m, cur - (pos + size_n))
        if copy < size_n:
            return []
        return list(context[pos + size_n : pos + size_n + copy])

    return draft


class NgramModTable:
    """ngram-mod's n-gram → next-token table, one per llama-server process.

    Keep one instance across calls to mirror a server that has served earlier
    requests (llama.cpp shares the table across requests and slots); :meth:`fork`
    gives a copy-on-write view to replay a request the server did not see.

    Raises:
        ValueError: on construction, ``n_match`` below 1 or ``n_min`` above ``n_max``.
    """

    def __init__(
        self, n_match: int = 12, n_max: int = NGRAM_MOD_N_MAX, n_min: int = NGRAM_MOD_N_MIN
    ) -> None:
        """Create an empty table for ``n_match``-grams, drafting ``n_min..n_max`` tokens."""
        if n_match < 1 or n_min > n_max:
            raise ValueError("need n_match >= 1 and n_min <= n_max")
        self.n = n_match
        self.n_max = n_max
        self.n_min = n_min
        self._next: dict[int, int] = {}
        self._base: dict[int, int] | None = None  # a fork reads through to its parent
        self._i_last = 0
        self._n_low = 0
        self._n_draft_last = 0

    def __len__(self) -> int:
        """Entries in the table (a fork's own plus its parent's, counted once each)."""
        if self._base is None:
            return len(self._next)
        return len(self._base) + sum(1 for k in self._next if k not in self._base)

    def fork(self) -> NgramModTable:
        """A view that reads this table and writes only to itself (this one is unchanged).

        Its low-acceptance state starts as this table's; a reset empties only the fork.
        """
        out = NgramModTable(self.n, self.n_max, self.n_min)
        out._base = self._next
        out._n_low = self._n_low
        return out

    def _get(self, key: int) -> int | None:
        got = self._next.get(key)
        if got is None and self._base is not None:
            got = self._base.get(key)
        return got

    def _add(self, tokens: Sequence[int], start: int, stop: int) -> None:
        if self._base is None and len(self._next) > MIRROR_MAX_ENTRIES:
            self._next.clear()
        n, table = self.n, self._next
        for i in range(start, stop):
            table[hash(tuple(tokens[i : i + n]))] = tokens[i + n]

    def begin(self, prompt: Sequence[int]) -> None:
        """A request starts: add the prompt's n-grams (``begin`` in speculative.cpp)."""
        self._i_last = 0
        self._n_draft_last = 0
        if len(prompt) < self.n:
            return
        self._add(prompt, 0, len(prompt) - self.n)
        self._i_last = len(prompt) - self.n

    def draft(self, context: Sequence[int], sampled: int) -> list[int]:
        """Propose a draft (``draft_one`` in speculative.cpp)."""
        self._n_draft_last = 0
        cur = len(context)
        n = self.n
        if cur < n:
            return []
        if self._i_last + _MOD_ADD_CHUNK < cur:
            self._add(context, self._i_last, cur - n)
            self._i_last = cur - n
        window = [*context[cur - n + 1 :], sampled]
        out: list[int] = []
        for i in range(self.n_max):
            token = self._get(hash(tuple(window[i : i + n])))
            if token is None:
                if i < self.n_min:
                    return []
                break
            out.append(token)
            window.append(token)
        self._n_draft_last = len(out)
        return out

    def passed_over(self) -> None:
        """Another speculator drafted this pass: its acceptance is not this table's."""
        self._n_draft_last = 0

    def accept(self, n_drafted: int, n_accepted: int) -> None:
        """Record a pass's acceptance; a low streak resets the table (``accept``)."""
        del n_drafted  # llama.cpp divides by the untruncated length it stored
        if self._n_draft_last <= 0:
            return
        if n_accepted / self._n_draft_last < _MOD_LOW_ACCEPT:
            self._n_low += 1
            if self._n_low >= _MOD_LOW_STREAK:
                self._next.clear()
                self._base = None
                self._n_low = 0
                self._i_last = 0
        else:
            self._n_low = 0


class CascadeDrafter:
    """``--spec-type ngram-simple,ngram-mod``: ngram-simple's draft, else ngram-mod's.

    Args:
        table: the cascade server's ngram-mod table (a mirror, or a fork of one);
            :meth:`begin` must have been called with the request's prompt.
        size_n: ngram-simple's lookup length.
        size_m: ngram-simple's longest draft.
    """

    def __init__(
        self,
        table: NgramModTable,
        size_n: int = NGRAM_SIMPLE_SIZE_N,
        size_m: int = NGRAM_SIMPLE_SIZE_M,
    ) -> None:
        self.table = table
        self._simple = ngram_simple_drafter(size_n, size_m)

    def draft(self, context: Sequence[int], sampled: int) -> list[int]:
        """The first non-empty draft of ngram-simple, then ngram-mod."""
        out = self._simple(context, sampled)
        if out:
            self.table.passed_over()
            return out
        return self.table.draft(context, sampled)

    def accept(self, n_drafted: int, n_accepted: int) -> None:
        """Only the speculator that drafted counts the acceptance."""
        self.table.accept(n_drafted, n_accepted)


def shadow_ngram_simple(
    prompt: Sequence[int],
    generated: Sequence[int],
    *,
    size_n: int = NGRAM_SIMPLE_SIZE_N,
    size_m: int = NGRAM_SIMPLE_SIZE_M,
    n_predict: int | None = None,
) -> ShadowStats:
    """What ngram-simple would have drafted and accepted on this generation."""
    return replay(prompt, generated, ngram_simple_drafter(size_n, size_m), n_predict=n_predict)


def shadow_ngram_mod(
    prompt: Sequence[int],
    generated: Sequence[int],
    *,
    table: NgramModTable | None = None,
    n_match: int = 12,
    n_predict: int | None = None,
) -> ShadowStats:
    """What ngram-mod would have drafted and accepted on this generation.

    Args:
        prompt: the prompt's token ids.
        generated: the generated token ids.
        table: a table to continue from (a warm server); a fresh one when None.
        n_match: n-gram length for a fresh table (Fronde's ``--spec-ngram-mod-n-match``).
        n_predict: the request's token budget (see :func:`replay`).
    """
    tab = table if table is not None else NgramModTable(n_match)
    tab.begin(prompt)
    return replay(prompt, generated, tab.draft, n_predict=n_predict, on_accept=tab.accept)


def shadow_cascade(
    prompt: Sequence[int],
    generated: Sequence[int],
    *,
    table: NgramModTable,
    size_n: int = NGRAM_SIMPLE_SIZE_N,
    size_m: int = NGRAM_SIMPLE_SIZE_M,
    n_predict: int | None = None,
) -> ShadowStats:
    """What the ngram-simple, ngram-mod cascade would have drafted and accepted.

    Args:
        prompt: the prompt's token ids.
        generated: the generated token ids.
        table: the cascade server's ngram-mod table (a mirror or a fork; it learns).
        size_n: ngram-simple's lookup length.
        size_m: ngram-simple's longest draft.
        n_predict: the request's token budget (see :func:`replay`).
    """
    table.begin(prompt)
    cascade = CascadeDrafter(table, size_n, size_m)
    return replay(prompt, generated, cascade.draft, n_predict=n_predict, on_accept=cascade.accept)
