"""What a :class:`~fronde.request.splice.Splice` asks of a pool: a backend's URL, its fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from fronde.backends.pool import BackendPool
from fronde.modes import Mode


@dataclass
class _At:
    url: str


class _Urls:
    def __init__(self, urls: dict[Mode, str]) -> None:
        self.urls = urls

    def get(self, mode: Mode) -> _At:
        return _At(self.urls[mode])

    def fields(self, mode: Mode) -> dict[str, object]:
        return {}  # a server per mode: no request fields


def static_pool(urls: dict[Mode, str]) -> BackendPool:
    """A stand-in pool whose ``get(mode).url`` is ``urls[mode]`` (backends started elsewhere)."""
    return cast("BackendPool", _Urls(urls))
