"""A client's request as a typed value: the fields Fronde reads, typed; every other kept.

vLLM's pattern (``entrypoints/openai/protocol.py``): each request is a pydantic model
with ``extra="allow"``, so the fields Fronde acts on are typed once at the API's edge
and every field it does not know (llama.cpp's samplers, ``chat_template_kwargs``, a
field a newer client sends) reaches llama-server untouched. The API checks a body
first, in its own words (:mod:`fronde.api.schema`: each refusal a 400 naming the
field); the model then holds what was checked, and :meth:`ClientRequest.wire` gives
back the JSON object to send: every field the client sent, with its value as sent
(an integer ``temperature`` stays an integer), and the rewrites the checks made (the
token budget, ``developer`` → ``system``), never a default the client did not send.

Nested values are free-form JSON (:mod:`fronde.json_types`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from fronde.errors import InvalidRequestError
from fronde.json_types import JSON, JSONObject

__all__ = ["ChatRequest", "ClientRequest", "CompletionRequest", "PassedRequest"]


class ClientRequest(BaseModel):
    """A checked request body; fields it does not declare pass through (``extra``).

    Attributes:
        model: the model the client named (``fronde`` or ``fronde:MODE``), if any.
        stream: whether the answer is streamed (False when absent).
    """

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    stream: bool = False

    @classmethod
    def parse(cls, body: JSONObject) -> ClientRequest:
        """The typed request of a body the API has checked.

        Raises:
            InvalidRequestError: a declared field of the wrong type that the API's checks
                let through (HTTP 400 naming it; the checks answer first, in their words).
        """
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise InvalidRequestError(f"'{where}': {first['msg']}", param=where) from exc

    def wire(self) -> JSONObject:
        """The body to send on: every field the client sent (a fresh copy), as sent.

        Declared fields come first, then the others in the client's order; JSON keeps no
        order of keys, and no server here reads one.
        """
        return self.model_dump(exclude_unset=True)

    def get(self, name: str) -> JSON:
        """The value of the field ``name``, declared or passed through; None when absent."""
        if name in type(self).model_fields:
            return getattr(self, name) if name in self.model_fields_set else None
        return (self.model_extra or {}).get(name)

    def set(self, name: str, value: JSON) -> None:
        """Set the field ``name``, declared or passed through; it is sent from now on."""
        setattr(self, name, value)


class _OpenAIRequest(ClientRequest):
    """The fields chat and text completions share (checked by ``check_common``)."""

    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    stream_options: JSONObject | None = None

    @property
    def include_usage(self) -> bool:
        """Whether the client asked for a usage chunk (``stream_options.include_usage``)."""
        return bool((self.stream_options or {}).get("include_usage"))


class ChatRequest(_OpenAIRequest):
    """An OpenAI ``/v1/chat/completions`` body (checked by ``check_chat``).

    Attributes:
        messages: the conversation; each message a JSON object with a known role.
        tools: the tools the model may call, if any.
        tool_choice: ``auto``, ``none``, ``required`` or a named function, if any.
    """

    messages: list[JSONObject]
    tools: list[JSON] | None = None
    tool_choice: JSON = None


class CompletionRequest(_OpenAIRequest):
    """An OpenAI ``/v1/completions`` body (checked by ``check_completion``).

    Attributes:
        prompt: a string, or an array of prompts (strings or token ids).
    """

    prompt: JSON


class PassedRequest(ClientRequest):
    """A body of another API, passed through as sent: Responses, Messages, infill.

    Attributes:
        tools: the tools the model may call, if any.
        tool_choice: the API's own forms of a tool choice, if any.
    """

    tools: list[JSON] | None = None
    tool_choice: JSON = None
