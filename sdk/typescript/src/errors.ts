// Typed errors, all under one root, `HoldfastError`: an answer from the API
// is an `APIError` of the class for its `type` (`{"error": {"type",
// "message", "field"?}}`), so callers catch what they mean (`instanceof
// ConflictError`) instead of comparing strings; no answer at all is an
// `APIConnectionError` (`APITimeoutError` when a try ran out of time). The
// Python SDK has the same classes by the same names.

/** The error body every non-2xx answer carries, plus any context member. */
export interface ErrorBody {
  error: { type: string; message: string; field?: string };
  [context: string]: unknown;
}

/**
 * Every error this SDK throws. `idempotencyKey`: the key of the send that
 * failed (retry with it and the input is still recorded once).
 */
export class HoldfastError extends Error {
  idempotencyKey?: string;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** Mark this as the error of the send with `key` (named in the message too). */
  withIdempotencyKey(key: string): this {
    this.idempotencyKey = key;
    this.message = `${this.message} (Idempotency-Key ${key})`;
    return this;
  }
}

/** Any error the API answered with. */
export class APIError extends HoldfastError {
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
    this.status = status;
    this.type = body.error.type;
    this.field = body.error.field;
    this.body = body;
  }
}

/**
 * The request never got an HTTP answer (refused, reset, unreachable), after
 * every retry; the message ends with the cause, which is also `cause`.
 */
export class APIConnectionError extends HoldfastError {}

/** A try got no answer in time, after every retry. */
export class APITimeoutError extends APIConnectionError {}

/**
 * A tool handler's mistake, posted to the model as an error result (and
 * logged): it threw, returned something that is not JSON, or no handler
 * serves the tool.
 */
export class ToolHandlerError extends HoldfastError {}

/** `run` ended without an answer: the turn failed or was cancelled (`event`). */
export class TurnFailedError extends HoldfastError {
  constructor(
    message: string,
    readonly event: { type: string; data: Record<string, unknown> },
  ) {
    super(message);
  }
}

export class InvalidRequestError extends APIError {}
export class InvalidJsonError extends APIError {}
export class InvalidBodyError extends APIError {}
export class InvalidPathError extends APIError {}
export class InvalidQueryError extends APIError {}
export class BadRequestError extends APIError {}
export class UnsupportedMediaTypeError extends APIError {}
/** A content block the agent's model cannot take (e.g. a document for a model without document input). */
export class UnsupportedContentError extends APIError {}
export class UnauthorizedError extends APIError {}
export class NotFoundError extends APIError {}
export class MethodNotAllowedError extends APIError {}
export class IdempotencyKeyReusedError extends APIError {}
export class ModelNotPermittedError extends APIError {}
export class PayloadTooLargeError extends APIError {}
export class OutputTooLargeError extends APIError {}
export class InternalError extends APIError {}
export class UnavailableError extends APIError {}
/** The server gave up on the request (its request timeout). */
export class RequestTimeoutError extends APIError {}

/** 429: over the API key's rate limit. */
export class RateLimitedError extends APIError {
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
export class ConflictError extends APIError {
  readonly current?: Record<string, unknown>;
  constructor(status: number, body: ErrorBody) {
    super(status, body);
    const context = body.tool_call ?? body.approval ?? body.question;
    this.current = isObject(context) ? context : undefined;
  }
}

const BY_TYPE: Record<string, new (status: number, body: ErrorBody) => APIError> = {
  invalid_request: InvalidRequestError,
  invalid_json: InvalidJsonError,
  invalid_body: InvalidBodyError,
  invalid_path: InvalidPathError,
  invalid_query: InvalidQueryError,
  bad_request: BadRequestError,
  unsupported_media_type: UnsupportedMediaTypeError,
  unsupported_content: UnsupportedContentError,
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
  timeout: RequestTimeoutError,
};

/** The typed error for an error answer (an `APIError` for a type this SDK does not know). */
export function errorFor(status: number, body: unknown, retryAfter?: number): APIError {
  const parsed: ErrorBody =
    isObject(body) && isObject(body.error) && typeof body.error.type === "string"
      ? (body as unknown as ErrorBody)
      : { error: { type: status >= 500 ? "internal" : "bad_request", message: `HTTP ${status}` } };
  if (parsed.error.type === "rate_limited") {
    return new RateLimitedError(status, parsed, retryAfter);
  }
  const Class = BY_TYPE[parsed.error.type] ?? APIError;
  return new Class(status, parsed);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
