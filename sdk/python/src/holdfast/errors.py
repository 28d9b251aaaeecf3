"""Typed errors, all under one root, :class:`HoldfastError`: an answer
from the API is an :class:`APIError` of the class for its ``type``
(``{"error": {"type", "message", "field"?}}``), so callers catch what they
mean (``except ConflictError``) instead of comparing strings; no answer at
all is an :class:`APIConnectionError` (:class:`APITimeoutError` when a try
ran out of time). The TypeScript SDK has the same classes by the same names."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "HoldfastError",
    "APIError",
    "APIConnectionError",
    "APITimeoutError",
    "ToolHandlerError",
    "TurnFailedError",
    "InvalidRequestError",
    "InvalidJsonError",
    "InvalidBodyError",
    "InvalidPathError",
    "InvalidQueryError",
    "BadRequestError",
    "UnsupportedMediaTypeError",
    "UnsupportedContentError",
    "UnauthorizedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "IdempotencyKeyReusedError",
    "ModelNotPermittedError",
    "PayloadTooLargeError",
    "OutputTooLargeError",
    "InternalError",
    "UnavailableError",
    "RequestTimeoutError",
    "RateLimitedError",
    "ConflictError",
    "error_for",
]


class HoldfastError(Exception):
    """Every error this SDK raises. ``idempotency_key``: the key of the send
    that failed (retry with it and the input is still recorded once)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._text = message
        self.message = message
        self.idempotency_key: Optional[str] = None

    def __str__(self) -> str:
        if self.idempotency_key is None:
            return self._text
        return f"{self._text} (Idempotency-Key {self.idempotency_key})"


class APIError(HoldfastError):
    """Any error the API answered with."""

    def __init__(self, status: int, body: Dict[str, Any]) -> None:
        error = body["error"]
        super().__init__(f"{status} {error['type']}: {error['message']}")
        #: The HTTP status.
        self.status = status
        #: The machine-readable ``error.type``.
        self.type: str = error["type"]
        self.message = error["message"]
        #: The offending field, for invalid requests.
        self.field: Optional[str] = error.get("field")
        #: The whole body, context members (``tool_call``, ``approval``, ``question``) included.
        self.body = body


class APIConnectionError(HoldfastError):
    """The request never got an HTTP answer (refused, reset, unreachable),
    after every retry; the message ends with the cause, which is also
    ``__cause__``."""


class APITimeoutError(APIConnectionError):
    """A try got no answer in time, after every retry."""


class ToolHandlerError(HoldfastError):
    """A tool handler's mistake, posted to the model as an error result
    (and logged): it raised, returned something that is not JSON, a sync
    handler returned an awaitable, or no handler serves the tool."""


class TurnFailedError(HoldfastError):
    """``run`` ended without an answer: the turn failed or was cancelled.
    ``event`` is the ``turn.failed`` or ``turn.cancelled`` event."""

    def __init__(self, message: str, event: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.event = event


class InvalidRequestError(APIError): ...
class InvalidJsonError(APIError): ...
class InvalidBodyError(APIError): ...
class InvalidPathError(APIError): ...
class InvalidQueryError(APIError): ...
class BadRequestError(APIError): ...
class UnsupportedMediaTypeError(APIError): ...
class UnsupportedContentError(APIError):
    """A content block the agent's model cannot take (e.g. a document for a model without document input)."""


class UnauthorizedError(APIError): ...
class NotFoundError(APIError): ...
class MethodNotAllowedError(APIError): ...
class IdempotencyKeyReusedError(APIError): ...
class ModelNotPermittedError(APIError): ...
class PayloadTooLargeError(APIError): ...
class OutputTooLargeError(APIError): ...
class InternalError(APIError): ...
class UnavailableError(APIError): ...
class RequestTimeoutError(APIError):
    """The server gave up on the request (its request timeout)."""


class RateLimitedError(APIError):
    """429: over the API key's rate limit."""

    def __init__(self, status: int, body: Dict[str, Any], retry_after: Optional[float] = None) -> None:
        super().__init__(status, body)
        #: Seconds the server asked to wait (``Retry-After``), if it said.
        self.retry_after = retry_after


class ConflictError(APIError):
    """409: someone else answered first, the turn was cancelled, or the object
    is not in a state that takes this request. ``current`` is the object as it
    stands (``tool_call``, ``approval`` or ``question`` in the body) when the
    server sent it: look at it, and do not redo the side effect."""

    def __init__(self, status: int, body: Dict[str, Any]) -> None:
        super().__init__(status, body)
        context = body.get("tool_call") or body.get("approval") or body.get("question")
        self.current: Optional[Dict[str, Any]] = context if isinstance(context, dict) else None


_BY_TYPE: Dict[str, Type[APIError]] = {
    "invalid_request": InvalidRequestError,
    "invalid_json": InvalidJsonError,
    "invalid_body": InvalidBodyError,
    "invalid_path": InvalidPathError,
    "invalid_query": InvalidQueryError,
    "bad_request": BadRequestError,
    "unsupported_media_type": UnsupportedMediaTypeError,
    "unsupported_content": UnsupportedContentError,
    "unauthorized": UnauthorizedError,
    "not_found": NotFoundError,
    "method_not_allowed": MethodNotAllowedError,
    "conflict": ConflictError,
    "idempotency_key_reused": IdempotencyKeyReusedError,
    "model_not_permitted": ModelNotPermittedError,
    "payload_too_large": PayloadTooLargeError,
    "output_too_large": OutputTooLargeError,
    "internal": InternalError,
    "unavailable": UnavailableError,
    "timeout": RequestTimeoutError,
}


def error_for(status: int, body: Any, retry_after: Optional[float] = None) -> APIError:
    """The typed error for an error answer (a plain ``APIError`` for a type this SDK does not know)."""
    if not (isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"].get("type"), str)):
        body = {"error": {"type": "internal" if status >= 500 else "bad_request", "message": f"HTTP {status}"}}
    kind = body["error"]["type"]
    if kind == "rate_limited":
        return RateLimitedError(status, body, retry_after)
    return _BY_TYPE.get(kind, APIError)(status, body)
