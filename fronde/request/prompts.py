"""A text completion's ``prompt``: one prompt or several, read as llama-server reads it.

OpenAI's ``/v1/completions`` takes ``prompt`` as a string, a list of strings, a list of
token ids (one prompt) or a list of such lists (several prompts), and answers each
prompt with a choice of its own, ``index`` 0, 1, … in the list's order. llama-server
b11434 reads it the same way (``tokenize_input_prompts`` in
``tools/server/server-common.cpp``): a list that holds an integer at its top level is
one prompt (token ids, or ids mixed with strings); any other list is one prompt per
element, each a task of its own whose results carry the element's position as their
index (``server_response_reader::post_tasks`` in ``server-queue.cpp``); an empty list
is refused (``"prompt" must not be empty``). Several prompts go to one backend as one
request: the whole list is routed to one mode.
"""

from __future__ import annotations

from fronde.errors import InvalidRequestError
from fronde.json_types import JSON, JSONObject

__all__ = ["check_prompt", "prompt_count"]


def _is_token_id(value: object) -> bool:
    # JSON true/false are no integers to llama-server (nlohmann's is_number_integer).
    return isinstance(value, int) and not isinstance(value, bool)


def _is_prompt_item(value: JSON) -> bool:
    # b11434's tokenize_input_prompts: a string, a token id, a list of them (one prompt),
    # or a multimodal object; anything else (null, a number with a fraction) it cannot read.
    if isinstance(value, list):
        return all(isinstance(v, str) or _is_token_id(v) for v in value)
    return isinstance(value, str | dict) or _is_token_id(value)


def prompt_count(prompt: JSON) -> int:
    """How many prompts, hence choices, a ``prompt`` field holds (llama-server's rule).

    Args:
        prompt: the body's ``prompt`` (any JSON value; chat bodies have none).

    Returns:
        The list's length for a list with no integer at its top level, else 1.
    """
    if isinstance(prompt, list) and not any(_is_token_id(p) for p in prompt):
        return len(prompt)
    return 1


def check_prompt(body: JSONObject) -> None:
    """Refuse an empty prompt list; a list of one string becomes that string (in place).

    A one-string list is the same request as the string to llama-server; as a string
    it is routed as one (the probe path and the counterfactual book take string
    prompts only).

    Args:
        body: a ``/v1/completions`` body whose ``prompt`` is a string or a list.

    Raises:
        InvalidRequestError: ``prompt`` is an empty list, or holds an item that is not a
            string, a token id, a list of them or an object (HTTP 400, ``param: prompt``).
    """
    items = body.get("prompt")
    if not isinstance(items, list):
        return
    if not items:
        raise InvalidRequestError("'prompt' must not be an empty list", param="prompt")
    if not all(_is_prompt_item(p) for p in items):
        raise InvalidRequestError(
            "'prompt' items must be strings, token ids or lists of them", param="prompt"
        )
    if len(items) == 1 and isinstance(items[0], str):
        body["prompt"] = items[0]
