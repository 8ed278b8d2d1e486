"""``tool_choice``: honoured by the backend's grammar, or refused in a 400 that says why.

llama-server b11434 reads ``tool_choice`` as a string only (``auto``, ``none``,
``required``; ``tools/server/server-common.cpp``): OpenAI's named form,
``{"type": "function", "function": {"name": ...}}``, is silently read as ``auto``
(its log says "Wrong type supplied for parameter 'tool_choice'"). Fronde sends a named
choice as ``required`` with ``tools`` narrowed to the named function, which is what
it means.

``required`` is forced by a grammar only where llama.cpp understands how the chat
template writes tools. A template that does not describe tools to the model (``/props``
``chat_template_caps.supports_tools`` is false, as for the gemma profile's turn
format) answered plain text with ``finish_reason: "length"`` instead of a call, so such
a request is refused with 400 ``tool_choice_unsupported`` rather than answered wrong.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from fronde.backends.client import BackendClient
from fronde.errors import BackendError, InvalidRequestError

__all__ = ["ToolChoiceUnsupportedError", "ToolTemplate", "honour_tool_choice"]


class ToolChoiceUnsupportedError(InvalidRequestError):
    """The profile's chat template cannot force a tool call (HTTP 400)."""

    code = "tool_choice_unsupported"


def _named(choice: dict[str, Any], tools: list[Any]) -> list[Any]:
    """The tools narrowed to the function ``choice`` names.

    Raises:
        InvalidRequestError: ``choice`` is malformed or names no tool of the request.
    """
    fn = choice.get("function")
    name = cast("dict[str, Any]", fn).get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise InvalidRequestError(
            "'tool_choice' must be 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": NAME}}',
            param="tool_choice",
        )
    picked: list[Any] = [
        t
        for t in tools
        if isinstance(t, dict)
        and isinstance(f := cast("dict[str, Any]", t).get("function"), dict)
        and cast("dict[str, Any]", f).get("name") == name
    ]
    if not picked:
        raise InvalidRequestError(
            f"'tool_choice' names the function {name!r}, which is not in 'tools'",
            param="tool_choice",
        )
    return picked[:1]


class ToolTemplate:
    """Whether baseline's chat template describes tools (its ``/props``), read once.

    Args:
        client: the backend client.
        url: where baseline answers, or a callable giving it (it may move on restart).
    """

    def __init__(self, client: BackendClient, url: Callable[[], str]) -> None:
        self.client = client
        self.url = url
        self.known: bool | None = None

    async def supports_tools(self) -> bool | None:
        """``chat_template_caps.supports_tools`` of baseline's ``/props``; None if unknown."""
        if self.known is None:
            try:
                props = await self.client.get_json(self.url(), "/props")
            except BackendError:
                return None
            props_d = cast("dict[str, Any]", props) if isinstance(props, dict) else {}
            caps = props_d.get("chat_template_caps")
            value = (
                cast("dict[str, Any]", caps).get("supports_tools")
                if isinstance(caps, dict)
                else None
            )
            if not isinstance(value, bool):
                return None
            self.known = value
        return self.known


async def honour_tool_choice(
    body: dict[str, Any], supports_tools: Callable[[], Awaitable[bool | None]]
) -> None:
    """Rewrite a named ``tool_choice`` to ``required``; refuse what the profile cannot force.

    Args:
        body: a checked chat body, changed in place.
        supports_tools: whether the chat template describes tools (None: unknown).

    Raises:
        InvalidRequestError: a malformed ``tool_choice``, one naming no tool, or one
            that forces a call with no ``tools``.
        ToolChoiceUnsupportedError: ``required`` or a named function, and the chat
            template does not describe tools.
    """
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return
    if not tools:
        raise InvalidRequestError(
            "'tool_choice' forces a tool call, but the request has no 'tools'",
            param="tool_choice",
        )
    if isinstance(choice, dict):
        body["tools"] = _named(cast("dict[str, Any]", choice), cast("list[Any]", tools))
        body["tool_choice"] = "required"
    elif choice != "required":
        raise InvalidRequestError(
            f"'tool_choice' is {choice!r}; expected 'auto', 'none', 'required' or a function",
            param="tool_choice",
        )
    if await supports_tools() is False:
        raise ToolChoiceUnsupportedError(
            "this profile's chat template does not describe tools to the model, so the "
            "backend cannot force a tool call (tool_choice 'required' or a named function); "
            "send tool_choice 'auto', or serve a model whose chat template supports tools",
            param="tool_choice",
        )
