"""Typed errors: one class per error ``type`` the API answers with
(``{"error": {"type", "message", "field"?}}``), so callers catch what they
mean (``except ConflictError``) instead of comparing strings."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "HoldfastError",
    "APIConnectionError",
    "InvalidRequestError",
    "InvalidJsonError",
    "InvalidBodyError",
    "InvalidPathError",
    "InvalidQueryError",
    "BadRequestError",
    "UnsupportedMediaTypeError",
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
    """Any error the API answered with."""

    def __init__(self, status: int, body: Dict[str, Any]) -> None:
        error = body["error"]
        super().__init__(f"{status} {error['type']}: {error['message']}")
        #: The HTTP status.
        self.status = status
        #: The machine-readable ``error.type``.
        self.type: str = error["type"]
        self.message: str = error["message"]
        #: The offending field, for invalid requests.
        self.field: Optional[str] = error.get("field")
        #: The whole body, context members (``tool_call``, ``approval``, ``question``) included.
        self.body = body


class APIConnectionError(Exception):
    """The request never got an HTTP answer (refused, reset, timed out), after every retry."""


class InvalidRequestError(HoldfastError): ...
class InvalidJsonError(HoldfastError): ...
class InvalidBodyError(HoldfastError): ...
class InvalidPathError(HoldfastError): ...
class InvalidQueryError(HoldfastError): ...
class BadRequestError(HoldfastError): ...
class UnsupportedMediaTypeError(HoldfastError): ...
class UnauthorizedError(HoldfastError): ...
class NotFoundError(HoldfastError): ...
class MethodNotAllowedError(HoldfastError): ...
class IdempotencyKeyReusedError(HoldfastError): ...
class ModelNotPermittedError(HoldfastError): ...
class PayloadTooLargeError(HoldfastError): ...
class OutputTooLargeError(HoldfastError): ...
class InternalError(HoldfastError): ...
class UnavailableError(HoldfastError): ...
class RequestTimeoutError(HoldfastError):
    """The server gave up on the request (its request timeout)."""


class RateLimitedError(HoldfastError):
    """429: over the API key's rate limit."""

    def __init__(self, status: int, body: Dict[str, Any], retry_after: Optional[float] = None) -> None:
        super().__init__(status, body)
        #: Seconds the server asked to wait (``Retry-After``), if it said.
        self.retry_after = retry_after


class ConflictError(HoldfastError):
    """409: someone else answered first, the turn was cancelled, or the object
    is not in a state that takes this request. ``current`` is the object as it
    stands (``tool_call``, ``approval`` or ``question`` in the body) when the
    server sent it: look at it, and do not redo the side effect."""

    def __init__(self, status: int, body: Dict[str, Any]) -> None:
        super().__init__(status, body)
        context = body.get("tool_call") or body.get("approval") or body.get("question")
        self.current: Optional[Dict[str, Any]] = context if isinstance(context, dict) else None


_BY_TYPE: Dict[str, Type[HoldfastError]] = {
    "invalid_request": InvalidRequestError,
    "invalid_json": InvalidJsonError,
    "invalid_body": InvalidBodyError,
    "invalid_path": InvalidPathError,
    "invalid_query": InvalidQueryError,
    "bad_request": BadRequestError,
    "unsupported_media_type": UnsupportedMediaTypeError,
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


def error_for(status: int, body: Any, retry_after: Optional[float] = None) -> HoldfastError:
    """The typed error for an error answer (a plain ``HoldfastError`` for a type this SDK does not know)."""
    if not (isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"].get("type"), str)):
        body = {"error": {"type": "internal" if status >= 500 else "bad_request", "message": f"HTTP {status}"}}
    kind = body["error"]["type"]
    if kind == "rate_limited":
        return RateLimitedError(status, body, retry_after)
    return _BY_TYPE.get(kind, HoldfastError)(status, body)
