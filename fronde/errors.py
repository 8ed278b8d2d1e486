"""Fronde's exception tree and the OpenAI-shaped error body.

Every error Fronde raises on purpose derives from :class:`FrondeError`::

    FrondeError
    ├── ConfigError                 bad settings file or environment value
    ├── InstallError                `fronde install` could not produce llama-server
    │   ├── ToolMissingError        no C/C++ compiler, no cmake (no git, with patches)
    │   ├── PatchFailedError        a patch of Fronde's llama.cpp patch set does not apply
    │   └── BuildFailedError        cmake or the compiler failed (points at the log)
    ├── ModelError
    │   ├── ManifestError           a manifest in models/ is missing or malformed
    │   ├── ModelMissingError       the GGUF named by a profile is not on disk
    │   ├── ModelFetchError         download failed (no network, pip error)
    │   └── ChecksumMismatchError   sha256 or size differs from the manifest
    ├── BackendError                one llama-server process or its HTTP API
    │   ├── BackendStartError       exited early or never became healthy
    │   ├── BackendUnavailableError no ready backend for the mode (HTTP 503)
    │   ├── BackendConnectionError  connection refused or reset (HTTP 502)
    │   ├── BackendTimeoutError     no answer within the configured timeout (HTTP 504)
    │   └── BackendHTTPError        the backend answered with an error status
    │       └── ContextLengthError  the prompt does not fit the context (HTTP 400)
    └── RequestError                the client's request is wrong (HTTP 4xx)
        ├── InvalidRequestError     malformed JSON, bad field (HTTP 400)
        ├── NotFoundError           an endpoint this Fronde does not serve (HTTP 404)
        ├── UnknownModeError        `x-fronde-mode` or `fronde:MODE` names no mode (HTTP 400)
        ├── ModeUnavailableError    the named mode is not run by this profile (HTTP 400)
        ├── AuthenticationError     missing or wrong API key (HTTP 401)
        ├── PayloadTooLargeError    the body is over ``server.max_body_bytes`` (HTTP 413)
        └── UnsupportedMediaTypeError  the body is not sent as JSON (HTTP 415)

Errors that can reach an HTTP client carry ``status_code``, ``error_type`` and
``code``; the app factory turns them into the body OpenAI clients parse,
``{"error": {"message", "type", "param", "code"}}`` (see OpenAI's API reference,
"Error codes"). The mapping lives in one place: :func:`fronde.api.app.create_app`.
"""

from __future__ import annotations

from fronde.json_types import JSONObject

__all__ = [
    "AuthenticationError",
    "BackendConnectionError",
    "BackendError",
    "BackendHTTPError",
    "BackendStartError",
    "BackendStreamError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "BuildFailedError",
    "ChecksumMismatchError",
    "ConfigError",
    "ContextLengthError",
    "FrondeError",
    "InstallError",
    "InvalidRequestError",
    "ManifestError",
    "ModeUnavailableError",
    "ModelError",
    "ModelFetchError",
    "ModelMissingError",
    "NotFoundError",
    "PatchFailedError",
    "PayloadTooLargeError",
    "RequestError",
    "ToolMissingError",
    "UnknownModeError",
    "UnsupportedMediaTypeError",
    "openai_error_body",
]


class FrondeError(Exception):
    """Root of every error Fronde raises on purpose.

    Attributes:
        status_code: HTTP status used when the error reaches an HTTP client.
        error_type: OpenAI ``error.type`` string.
        code: OpenAI ``error.code`` string, or None.
        param: the request field at fault, or None.
    """

    status_code: int = 500
    error_type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers: dict[str, str] = {}
        """Response headers to send with the error (e.g. the routing decision)."""

    def to_body(self) -> JSONObject:
        """Return the OpenAI-shaped error body for this error."""
        return openai_error_body(self.message, self.error_type, self.param, self.code)


class ConfigError(FrondeError):
    """A settings file or environment variable holds an invalid value."""

    code = "config_error"


class InstallError(FrondeError):
    """`fronde install` could not produce a working llama-server."""

    code = "install_error"


class ToolMissingError(InstallError):
    """A build tool (C/C++ compiler, cmake) is not on PATH."""


class PatchFailedError(InstallError):
    """A patch of Fronde's llama.cpp patch set does not apply; the message names it."""


class BuildFailedError(InstallError):
    """cmake configure or build failed; the message names the build log."""


class ModelError(FrondeError):
    """Problems with model manifests and GGUF files."""

    code = "model_error"


class ManifestError(ModelError):
    """A profile manifest in ``models/`` is missing or malformed."""


class ModelMissingError(ModelError):
    """A GGUF named by the profile is not on disk; `fronde models fetch` gets it."""


class ModelFetchError(ModelError):
    """Downloading a model failed (no network, pip could not download)."""


class ChecksumMismatchError(ModelError):
    """A downloaded file's sha256 or size differs from its manifest entry."""


class BackendError(FrondeError):
    """A llama-server backend failed to start or to answer."""

    status_code = 502
    error_type = "server_error"
    code = "backend_error"


class BackendStartError(BackendError):
    """A llama-server process exited early or missed its health deadline."""


class BackendUnavailableError(BackendError):
    """No ready backend can serve the request right now (HTTP 503, retry later)."""

    status_code = 503
    code = "backend_unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 5, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.retry_after_s = retry_after_s


class BackendConnectionError(BackendError):
    """The backend refused or dropped the connection (HTTP 502)."""

    code = "backend_connection_error"


class BackendStreamError(BackendConnectionError):
    """A backend's streamed body broke after its headers arrived.

    HTTP 502 before the client's answer started; an in-band error event after.

    Attributes:
        cause: the transport failure's class name (``ReadError``, ``RemoteProtocolError``).
    """

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class BackendTimeoutError(BackendError):
    """The backend did not answer within the configured timeout (HTTP 504)."""

    status_code = 504
    code = "backend_timeout"


class BackendHTTPError(BackendError):
    """The backend answered with an error status; its status is passed through.

    A 4xx from llama-server is the client's fault (e.g. an invalid parameter), so
    it keeps its status and becomes an ``invalid_request_error``; a 5xx stays a
    ``server_error``.
    """

    def __init__(self, message: str, *, status_code: int, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status_code = status_code
        if 400 <= status_code < 500:
            self.error_type = "invalid_request_error"
            self.code = "backend_rejected_request"


class ContextLengthError(BackendHTTPError):
    """The prompt (plus what must be generated) does not fit the backend's context.

    OpenAI's code ``context_length_exceeded``; the token counts come from
    llama-server's ``exceed_context_size_error``.

    Attributes:
        prompt_tokens: tokens in the prompt, if known.
        context_tokens: the backend's context size in tokens, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        context_tokens: int | None = None,
        param: str | None = "messages",
    ) -> None:
        super().__init__(message, status_code=400, param=param)
        self.code = "context_length_exceeded"
        self.prompt_tokens = prompt_tokens
        self.context_tokens = context_tokens


class RequestError(FrondeError):
    """The client's request is wrong; HTTP 400 unless a subclass says otherwise."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class InvalidRequestError(RequestError):
    """Malformed JSON, a missing field, or a field of the wrong type."""


class NotFoundError(RequestError):
    """An endpoint this Fronde does not serve (HTTP 404), with what to do instead."""

    status_code = 404
    code = "not_found"


class UnknownModeError(RequestError):
    """The header ``x-fronde-mode`` or the model ``fronde:MODE`` names no available mode."""

    code = "unknown_mode"


class ModeUnavailableError(RequestError):
    """The request forces a mode that exists but is left out of this pool (e.g. draft)."""

    code = "mode_unavailable"


class AuthenticationError(RequestError):
    """No API key, or a key that is not configured (HTTP 401)."""

    status_code = 401
    code = "invalid_api_key"


class PayloadTooLargeError(RequestError):
    """The request body is larger than ``server.max_body_bytes`` (HTTP 413)."""

    status_code = 413
    code = "request_too_large"


class UnsupportedMediaTypeError(RequestError):
    """The body's ``Content-Type`` is not JSON (a form, plain text): HTTP 415."""

    status_code = 415
    code = "unsupported_media_type"


def openai_error_body(
    message: str,
    error_type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> JSONObject:
    """Build ``{"error": {"message", "type", "param", "code"}}`` as OpenAI returns it.

    Args:
        message: human-readable explanation, one line.
        error_type: OpenAI error type, e.g. ``invalid_request_error``, ``server_error``.
        param: the offending request field, if any.
        code: machine-readable code, if any.

    Returns:
        The JSON-ready body.
    """
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
