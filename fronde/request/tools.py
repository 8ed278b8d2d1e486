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

The same rule holds on the other APIs that carry tools, in their own words (b11434
converts both to a chat request, ``tools/server/server-chat.cpp``). OpenAI Responses:
``required`` forces, and ``{"type": "function", "name": ...}`` is narrowed and sent as
``required`` (b11434 passes ``tool_choice`` on to chat, where an object reads as
``auto``). Anthropic Messages: ``{"type": "any"}`` forces, and ``{"type": "tool",
"name": ...}`` is narrowed and sent as it came (b11434 reads both as ``required``);
``{"type": "auto"}`` and ``{"type": "none"}`` do not force.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from fronde.backends.props import PropsCache
from fronde.client_request import ClientRequest
from fronde.errors import BackendError, InvalidRequestError
from fronde.json_types import JSON, JSONObject
from fronde.request.agent_apis import Api

__all__ = ["ToolChoiceUnsupportedError", "ToolTemplate", "honour_tool_choice"]


class ToolChoiceUnsupportedError(InvalidRequestError):
    """The profile's chat template cannot force a tool call (HTTP 400)."""

    code = "tool_choice_unsupported"


@dataclass(frozen=True)
class _Words:
    """How one API spells ``tool_choice``, for its error messages."""

    forms: str  # every value it defines
    forcing: str  # the values that force a call
    auto: str  # the value that leaves the call to the model


_WORDS = {
    "chat": _Words(
        '\'auto\', \'none\', \'required\' or {"type": "function", "function": {"name": NAME}}',
        "'required' or a named function",
        "'auto'",
    ),
    "responses": _Words(
        "'auto', 'none', 'required' or {\"type\": \"function\", \"name\": NAME}",
        "'required' or a named function",
        "'auto'",
    ),
    "messages": _Words(
        '{"type": "auto"}, {"type": "none"}, {"type": "any"} or {"type": "tool", "name": NAME}',
        '{"type": "any"} or a named tool',
        '{"type": "auto"}',
    ),
}


def _chat_words(api: str, choice: JSON) -> JSON:
    """``choice`` of ``api`` as chat's ``tool_choice`` (a named one: chat's object).

    Raises:
        InvalidRequestError: a Messages ``tool_choice`` of no type Anthropic defines.
    """
    if api == "chat" or choice is None:
        return choice
    if not isinstance(choice, dict):
        if api == "responses":  # a string, as chat's
            return choice
        raise InvalidRequestError(f"'tool_choice' must be {_WORDS[api].forms}", param="tool_choice")
    kind = choice.get("type")
    if kind == {"responses": "function", "messages": "tool"}[api]:
        return {"type": "function", "function": {"name": choice.get("name")}}
    if api == "responses":
        return choice
    plain = {"auto": "auto", "none": "none", "any": "required"}.get(str(kind))
    if plain is None:
        raise InvalidRequestError(f"'tool_choice' must be {_WORDS[api].forms}", param="tool_choice")
    return plain


def _tool_name(tool: JSON) -> JSON:
    """A tool's name: chat's ``function.name``, or the ``name`` of Responses and Messages."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, dict) else tool.get("name")


def _named(choice: JSONObject, tools: list[JSON], api: str) -> list[JSON]:
    """The tools narrowed to the function ``choice`` (chat's words) names.

    Raises:
        InvalidRequestError: ``choice`` is malformed or names no tool of the request.
    """
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise InvalidRequestError(f"'tool_choice' must be {_WORDS[api].forms}", param="tool_choice")
    picked: list[JSON] = [t for t in tools if _tool_name(t) == name]
    if not picked:
        raise InvalidRequestError(
            f"'tool_choice' names the function {name!r}, which is not in 'tools'",
            param="tool_choice",
        )
    return picked[:1]


class ToolTemplate:
    """Whether baseline's chat template describes tools (its ``/props``, read once).

    Args:
        props: the pool's ``/props`` cache.
        url: where baseline answers, or a callable giving it (it may move on restart).
    """

    def __init__(self, props: PropsCache, url: Callable[[], str]) -> None:
        self.props = props
        self.url = url

    async def supports_tools(self) -> bool | None:
        """``chat_template_caps.supports_tools`` of baseline's ``/props``; None if unknown.

        Unknown: no backend is ready, its ``/props`` could not be read, or it does not say.
        """
        try:
            url = self.url()
        except BackendError:  # no backend ready: the request meets that error later
            return None
        props = await self.props.get(url)
        return None if props is None else props.supports_tools


async def honour_tool_choice(
    req: ClientRequest,
    supports_tools: Callable[[], Awaitable[bool | None]],
    api: Api | None = None,
) -> None:
    """Narrow a named ``tool_choice`` to its tool; refuse what the profile cannot force.

    Args:
        req: a checked request, changed in place: a named choice keeps only the named
            tool, and is sent as ``required`` (Messages: as it came; module docstring).
        supports_tools: whether the chat template describes tools (None: unknown).
        api: the other API the body speaks (Responses or Messages); None: chat.

    Raises:
        InvalidRequestError: a malformed ``tool_choice``, one naming no tool, or one
            that forces a call with no ``tools``.
        ToolChoiceUnsupportedError: a choice that forces a call (``required``, a named
            function; Messages: ``any``, a named tool), and the chat template does not
            describe tools.
    """
    name = "chat" if api is None else api.name
    tools = req.get("tools")
    choice = _chat_words(name, req.get("tool_choice"))
    if choice is None or choice in ("auto", "none"):
        return
    if not tools:
        raise InvalidRequestError(
            "'tool_choice' forces a tool call, but the request has no 'tools'",
            param="tool_choice",
        )
    if isinstance(choice, dict):
        req.set("tools", _named(choice, cast("list[JSON]", tools), name))
        if name != "messages":
            req.set("tool_choice", "required")
    elif choice != "required":
        raise InvalidRequestError(
            f"'tool_choice' is {choice!r}; expected {_WORDS[name].forms}", param="tool_choice"
        )
    if await supports_tools() is False:
        words = _WORDS[name]
        raise ToolChoiceUnsupportedError(
            "this profile's chat template does not describe tools to the model, so the "
            f"backend cannot force a tool call (tool_choice {words.forcing}); send "
            f"tool_choice {words.auto}, or serve a model whose chat template supports tools",
            param="tool_choice",
        )
