"""What slot placement gives and what routing gives, told apart per c (the load page).

On an H100 (gemma, the agent mix, c = 8) the plain server read 468–621 tok/s and the
same server with each client naming its own slot (``pinned``) 1,002–1,193: placement
alone was 1.89–2.14×, and the router's own share over the pinned server 1.07–1.21×
(an outside client's check, docs/slot-placement.md). A ratio of a router arm to
``plain`` alone mixes the two. Every ratio here is taken within one measuring session
(:func:`~fronde.bench.load_sessions.session_ratios`), of medians over repetitions:

- **placement**: ``pinned ÷ plain`` (the same server, client k on slot k) and
  ``fr-plain ÷ plain`` (Fronde with one mode forced: its slot placement and its hop);
- **routing**: ``<router arm> ÷ fr-plain`` and ``<router arm> ÷ pinned`` (what the
  choice of mode and server adds over one-mode placement);
- **together**: ``<router arm> ÷ plain``;
- **topology**: ``single-b ÷ router-b`` (one llama-server for every mode against one per
  mode, both routing) and ``fr-sbase ÷ fr-plain`` (a plain request on the one server
  beside its speculators against the plain server alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fronde.bench.load import PINNED, PROXY, ROUTED, ROUTERS, SINGLE, SINGLE_PLAIN
from fronde.bench.load_sessions import session_ratios

__all__ = ["Ratios", "ratio_lines", "ratio_sets"]

Ratios = dict[str, dict[str, dict[int, float]]]
"""Kind (``placement``, ``routing``, ``together``) → ``"num ÷ den"`` → c → ratio."""

ABOUT = {
    "placement": "What slot placement gives (the plain server's requests on adjacent "
    "slots; no routing)",
    "routing": "What routing adds (the choice of mode and server, over one-mode placement)",
    "together": "Both together (a router arm against the plain server)",
    "topology": "One llama-server for every mode against one per mode (the router; "
    "a request forced to plain decoding)",
}


def ratio_sets(
    samples: Sequence[dict[str, Any]], loops: Sequence[str], arms: Sequence[str]
) -> Ratios:
    """The placement, routing and combined ratios of the ``arms`` a run measured.

    Args:
        samples: the run's samples, each with its ``session``.
        loops: the looping items (:func:`~fronde.bench.load_rows.looping_items`).
        arms: the arms with rows.

    Returns:
        Only the ratios both of whose arms were measured in one session.
    """
    routers = [r for r in ROUTED if r in arms]
    pairs = {
        "placement": [(PINNED.name, "plain"), (PROXY.name, "plain")],
        "routing": [(r, d) for r in routers for d in (PROXY.name, PINNED.name)],
        "together": [(r, "plain") for r in routers],
        "topology": [(SINGLE, ROUTERS["best"]), (SINGLE_PLAIN.name, PROXY.name)],
    }
    out: Ratios = {}
    for kind, wanted in pairs.items():
        got = {
            f"{num} ÷ {den}": ratios
            for num, den in wanted
            if (ratios := session_ratios(samples, loops, num, den))
        }
        if got:
            out[kind] = got
    return out


def ratio_lines(ratios: Mapping[str, Mapping[str, Mapping[int, float]]]) -> list[str]:
    """The page's section for :func:`ratio_sets`; [] when there is no ratio."""
    if not ratios:
        return []
    lines = [
        "",
        "## Placement and routing (tok/s ratios, same session)",
        "",
        "`pinned` is the plain server with client k sending `id_slot` = k; `fr-plain` is "
        "Fronde with baseline forced, in front of the same server (its slot placement "
        "and its hop). A router arm's ratio to them is what routing adds; to `plain`, "
        "both together.",
    ]
    for kind, about in ABOUT.items():
        if kind not in ratios:
            continue
        lines += ["", f"{about}:", ""]
        lines += [
            f"- {label}: " + ", ".join(f"c={c} {v:.2f}×" for c, v in sorted(by_c.items()))
            for label, by_c in ratios[kind].items()
        ]
    return lines
