"""Workloads as data: the JSON files beside this module, and their loader.

``first-encounter.json`` (workload A: prompts in ten domains, each sent to servers that
never saw it), ``agent-sessions.json`` (workload B: scripted agent sessions, every
step's input from a fixed transcript), ``priming.json`` (requests that warm the router
for a "warm" arm) and ``distinct.json`` (:mod:`.distinct`). Every item carries a
``prompt`` for ``/v1/completions`` and ``messages`` for ``/v1/chat/completions``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fronde.errors import FrondeError

__all__ = ["FOLDER", "Item", "Workload", "load_workload"]

FOLDER = Path(__file__).parent
"""Where the shipped workload files are."""

Form = Literal["completion", "chat", "native"]
"""How an item is sent: OpenAI completions (base models), chat (instruct models), or
llama-server's own ``/completion`` with the output's token ids (``return_tokens``)."""


@dataclass(frozen=True)
class Item:
    """One request of a workload.

    ``domain`` is the session in workload B; ``stop`` and ``chat_stop`` the stop strings
    of each form; ``max_tokens`` the item's own budget (None: the run's); ``model`` the
    field to send (``fronde:MODE``); ``fields`` body fields set last (``tools``, ``seed``…).
    """

    id: str
    domain: str
    prompt: str
    messages: tuple[dict[str, str], ...]
    stop: tuple[str, ...] = ()
    chat_stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    model: str | None = None
    fields: dict[str, Any] = field(default_factory=dict[str, Any])

    def body(self, form: Form, max_tokens: int) -> dict[str, Any]:
        """The request body for ``form``: greedy, streamed, with usage (OpenAI forms)."""
        n = self.max_tokens or max_tokens
        body: dict[str, Any] = {
            "max_tokens": n,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if form == "native":
            body = {"prompt": self.prompt, "n_predict": n, "temperature": 0.0, "stream": True}
            body |= {"return_tokens": True}
            stop = self.stop
        elif form == "completion":
            body["prompt"] = self.prompt
            stop = self.stop
        else:
            body["messages"] = list(self.messages)
            stop = self.chat_stop
        if stop:
            body["stop"] = list(stop)
        if self.model:
            body["model"] = self.model
        return body | self.fields


@dataclass(frozen=True)
class Workload:
    """A named, ordered list of items; ``sessions``: each domain is one agent session."""

    name: str
    items: tuple[Item, ...]
    sessions: bool = False

    def first(self, per_group: int | None) -> Workload:
        """The first ``per_group`` items of each domain (session), in file order; None: all."""
        if per_group is None:
            return self
        seen: dict[str, int] = {}
        kept: list[Item] = []
        for item in self.items:
            seen[item.domain] = seen.get(item.domain, 0) + 1
            if seen[item.domain] <= per_group:
                kept.append(item)
        return Workload(self.name, tuple(kept), self.sessions)

    def groups(self, n: int | None) -> Workload:
        """The items of the first ``n`` domains (sessions) in file order; None: all."""
        if n is None:
            return self
        names = list(dict.fromkeys(i.domain for i in self.items))[:n]
        return Workload(self.name, tuple(i for i in self.items if i.domain in names), self.sessions)


def _item(raw: dict[str, Any], domain: str, system: str | None) -> Item:
    messages = [dict(m) for m in raw["messages"]]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return Item(
        id=raw["id"],
        domain=domain,
        prompt=raw["prompt"],
        messages=tuple(messages),
        stop=tuple(raw.get("stop") or ()),
        chat_stop=tuple(raw.get("chat_stop") or ()),
        max_tokens=raw.get("max_tokens"),
    )


def load_workload(name_or_path: str) -> Workload:
    """Load a shipped workload by name (``first-encounter``) or any file of that shape.

    Raises:
        FrondeError: no such file, or it is not a workload (what is wrong, and where).
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = FOLDER / f"{name_or_path}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if "sessions" in raw:
            system = raw.get("system")
            items = [
                _item(s, sess["id"], system) for sess in raw["sessions"] for s in sess["steps"]
            ]
        else:
            items = [_item(i, i["domain"], None) for i in raw["items"]]
    except OSError as exc:
        raise FrondeError(f"cannot read workload {path}: {exc.strerror}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise FrondeError(f"{path} is not a workload: {exc!r}") from exc
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise FrondeError(f"{path}: item ids repeat")
    return Workload(str(raw.get("name") or path.stem), tuple(items), "sessions" in raw)
