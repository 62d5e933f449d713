// Typed errors for the API's error codes ({"error": {"code", "message"}}).

/** PaddockError is an error answered by the API: its code, HTTP status and message. */
export class PaddockError extends Error {
  override name = "PaddockError";
  constructor(
    /** The API's error code, e.g. "not_found" or "limit_exceeded". */
    readonly code: string,
    message: string,
    /** The HTTP status, or 0 when the error did not come from an HTTP answer. */
    readonly status: number,
  ) {
    super(message);
  }
}

/** invalid_argument (400): the request was malformed; the message names what. */
export class InvalidArgumentError extends PaddockError {
  override name = "InvalidArgumentError";
}
/** unauthenticated (401): no credential, or an expired or revoked one. */
export class UnauthenticatedError extends PaddockError {
  override name = "UnauthenticatedError";
}
/** permission_denied (403): a policy rule, a token's scope or a capability refused it. */
export class PermissionDeniedError extends PaddockError {
  override name = "PermissionDeniedError";
}
/** not_found (404): no such sandbox, file or resource (or another user's). */
export class NotFoundError extends PaddockError {
  override name = "NotFoundError";
}
/** already_exists or failed_precondition (409): the state does not allow it now. */
export class ConflictError extends PaddockError {
  override name = "ConflictError";
}
/** payload_too_large (413): a body over its bound. */
export class PayloadTooLargeError extends PaddockError {
  override name = "PayloadTooLargeError";
}
/** limit_exceeded (429): a limit was hit; the message names which. */
export class LimitExceededError extends PaddockError {
  override name = "LimitExceededError";
}
/** unavailable or deadline_exceeded (502, 503, 504): try again later. */
export class UnavailableError extends PaddockError {
  override name = "UnavailableError";
}

const byCode: Record<string, typeof PaddockError> = {
  invalid_argument: InvalidArgumentError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  already_exists: ConflictError,
  failed_precondition: ConflictError,
  payload_too_large: PayloadTooLargeError,
  limit_exceeded: LimitExceededError,
  unavailable: UnavailableError,
  deadline_exceeded: UnavailableError,
};

/** errorOf makes the typed error for an API error code. */
export function errorOf(code: string, message: string, status: number): PaddockError {
  const E = byCode[code] ?? PaddockError;
  return new E(code, message, status);
}

/**
 * errorFromBody makes the typed error for an HTTP answer's status and body. A body that
 * is not the API's error shape (a proxy's page, say) gives a code from the status.
 */
export function errorFromBody(status: number, body: string): PaddockError {
  try {
    const e = JSON.parse(body)?.error;
    if (typeof e?.code === "string" && typeof e?.message === "string") return errorOf(e.code, e.message, status);
  } catch {
    // not JSON: fall through
  }
  const text = body.trim().slice(0, 200) || `HTTP ${status}`;
  return errorOf(codeOfStatus(status), text, status);
}

function codeOfStatus(status: number): string {
  switch (status) {
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 409:
      return "failed_precondition";
    case 413:
      return "payload_too_large";
    case 429:
      return "limit_exceeded";
    case 502:
    case 503:
    case 504:
      return "unavailable";
    default:
      return "internal";
  }
}
