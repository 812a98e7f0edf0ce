import { ERROR_CODES, type ErrorBody, type ErrorCode } from "@aenv/protocol";
import type { ZodError } from "zod";
import {
  AenvError,
  AtCapacityError,
  ChildFailedError,
  ConflictError,
  FencedError,
  ForbiddenError,
  InvalidRequestError,
  KeyLimitError,
  NotFoundError,
  NotImplementedError,
  PausedError,
  RuntimeMismatchError,
  ShuttingDownError,
  StartFailedError,
  TooLargeError,
  UnauthorizedError,
  UpstreamError,
} from "./errors.js";

/** The one table from domain errors to HTTP statuses (API routes, the proxy and the gateway). */
const STATUS = new Map<abstract new (...args: never[]) => AenvError, number>([
  [InvalidRequestError, 400],
  [UnauthorizedError, 401],
  [ForbiddenError, 403],
  [NotFoundError, 404],
  [ConflictError, 409],
  [PausedError, 409],
  [RuntimeMismatchError, 409],
  [TooLargeError, 413],
  [KeyLimitError, 429],
  [AtCapacityError, 503],
  [StartFailedError, 500],
  [NotImplementedError, 501],
  [UpstreamError, 502],
  [ChildFailedError, 503],
  [ShuttingDownError, 503],
  [FencedError, 503],
]);

/** HTTP status of a domain error; undefined for anything else (a bug: 500). */
export function statusOf(err: unknown): number | undefined {
  if (!(err instanceof AenvError)) return undefined;
  for (const [type, status] of STATUS) if (err instanceof type) return status;
  return 500;
}

/** The E2B error body, {code, message} and error_code where one applies, for a status the caller chose. */
export function errorBodyOf(code: number, message: string, errorCode?: ErrorCode): ErrorBody {
  return errorCode ? { code, message, error_code: errorCode } : { code, message };
}

/** E2B's machine-readable reason for a domain error, where E2B has one. */
export function errorCodeOf(err: unknown): ErrorCode | undefined {
  if (err instanceof AtCapacityError) return ERROR_CODES.capacityUnavailable;
  if (err instanceof StartFailedError || err instanceof ChildFailedError) return ERROR_CODES.createFailed;
  if (err instanceof KeyLimitError) {
    return err.limit === "sandboxes" ? ERROR_CODES.keySandboxLimit : ERROR_CODES.keyRateLimit;
  }
  return undefined;
}

/**
 * Seconds a client should wait before retrying, for errors that are worth a retry as they
 * are (no room now, a node stopping or fenced): the `Retry-After` header.
 */
export function retryAfterOf(err: unknown): number | undefined {
  if (err instanceof AtCapacityError || err instanceof KeyLimitError) return err.retryAfterS;
  if (err instanceof ShuttingDownError || err instanceof FencedError) return 1;
  return undefined;
}

/** The E2B error body of a thrown error: its message only for a domain error. */
export function errorBody(err: unknown): ErrorBody {
  const code = statusOf(err) ?? 500;
  return errorBodyOf(code, statusOf(err) ? (err as Error).message : "internal server error", errorCodeOf(err));
}

/** The answer to a request without the API key, from a node and the gateway alike. */
export const NO_API_KEY = "invalid or missing API key (X-API-Key)";

/** The answer to a path no route matches. */
export function noRouteBody(method: string, url: string): ErrorBody {
  return errorBodyOf(404, `no route ${method} ${url.split("?")[0]}`);
}

/** A request that failed its schema, in words: each field and what is wrong with it. */
export function zodMessage(err: ZodError): string {
  return `invalid request: ${err.issues.map((i) => `${i.path.join(".") || "body"}: ${i.message}`).join("; ")}`;
}
