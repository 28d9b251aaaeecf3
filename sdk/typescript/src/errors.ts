// Typed errors: one class per error `type` the API answers with
// (`{"error": {"type", "message", "field"?}}`), so callers catch what they
// mean (`instanceof ConflictError`) instead of comparing strings.

/** The error body every non-2xx answer carries, plus any context member. */
export interface ErrorBody {
  error: { type: string; message: string; field?: string };
  [context: string]: unknown;
}

/** Any error the API answered with. */
export class HoldfastError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The machine-readable `error.type`. */
  readonly type: string;
  /** The offending field, for invalid requests. */
  readonly field?: string;
  /** The whole body, context members (`tool_call`, `approval`, `question`) included. */
  readonly body: ErrorBody;

  constructor(status: number, body: ErrorBody) {
    super(`${status} ${body.error.type}: ${body.error.message}`);
    this.name = new.target.name;
    this.status = status;
    this.type = body.error.type;
    this.field = body.error.field;
    this.body = body;
  }
}

/** The request never got an HTTP answer (refused, reset, timed out), after every retry. */
export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ConnectionError";
  }
}

export class InvalidRequestError extends HoldfastError {}
export class InvalidJsonError extends HoldfastError {}
export class InvalidBodyError extends HoldfastError {}
export class InvalidPathError extends HoldfastError {}
export class InvalidQueryError extends HoldfastError {}
export class BadRequestError extends HoldfastError {}
export class UnsupportedMediaTypeError extends HoldfastError {}
export class UnauthorizedError extends HoldfastError {}
export class NotFoundError extends HoldfastError {}
export class MethodNotAllowedError extends HoldfastError {}
export class IdempotencyKeyReusedError extends HoldfastError {}
export class ModelNotPermittedError extends HoldfastError {}
export class PayloadTooLargeError extends HoldfastError {}
export class OutputTooLargeError extends HoldfastError {}
export class InternalError extends HoldfastError {}
export class UnavailableError extends HoldfastError {}
export class TimeoutError extends HoldfastError {}

/** 429: over the API key's rate limit. */
export class RateLimitedError extends HoldfastError {
  /** Seconds the server asked to wait (`Retry-After`), if it said. */
  readonly retryAfter?: number;
  constructor(status: number, body: ErrorBody, retryAfter?: number) {
    super(status, body);
    this.retryAfter = retryAfter;
  }
}

/**
 * 409: someone else answered first, the turn was cancelled, or the object is
 * not in a state that takes this request. `current` is the object as it
 * stands (`tool_call`, `approval` or `question` in the body), when the server
 * sent it: look at it, and do not redo the side effect.
 */
export class ConflictError extends HoldfastError {
  readonly current?: Record<string, unknown>;
  constructor(status: number, body: ErrorBody) {
    super(status, body);
    const context = body.tool_call ?? body.approval ?? body.question;
    this.current = isObject(context) ? context : undefined;
  }
}

const BY_TYPE: Record<string, new (status: number, body: ErrorBody) => HoldfastError> = {
  invalid_request: InvalidRequestError,
  invalid_json: InvalidJsonError,
  invalid_body: InvalidBodyError,
  invalid_path: InvalidPathError,
  invalid_query: InvalidQueryError,
  bad_request: BadRequestError,
  unsupported_media_type: UnsupportedMediaTypeError,
  unauthorized: UnauthorizedError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  idempotency_key_reused: IdempotencyKeyReusedError,
  model_not_permitted: ModelNotPermittedError,
  payload_too_large: PayloadTooLargeError,
  output_too_large: OutputTooLargeError,
  internal: InternalError,
  unavailable: UnavailableError,
  timeout: TimeoutError,
};

/** The typed error for an error answer (a `HoldfastError` for a type this SDK does not know). */
export function errorFor(status: number, body: unknown, retryAfter?: number): HoldfastError {
  const parsed: ErrorBody =
    isObject(body) && isObject(body.error) && typeof body.error.type === "string"
      ? (body as unknown as ErrorBody)
      : { error: { type: status >= 500 ? "internal" : "bad_request", message: `HTTP ${status}` } };
  if (parsed.error.type === "rate_limited") {
    return new RateLimitedError(status, parsed, retryAfter);
  }
  const Class = BY_TYPE[parsed.error.type] ?? HoldfastError;
  return new Class(status, parsed);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
