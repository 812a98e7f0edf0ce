import type { ErrorBody } from "@aenv/protocol";
import {
  AenvError,
  AtCapacityError,
  ChildFailedError,
  ConflictError,
  FencedError,
  ForbiddenError,
  InvalidRequestError,
  NotFoundError,
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
  [AtCapacityError, 429],
  [StartFailedError, 500],
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

/** The E2B error body, {code, message}, for a status the caller chose. */
export function errorBodyOf(code: number, message: string): ErrorBody {
  return { code, message };
}

/** The E2B error body of a thrown error: its message only for a domain error. */
export function errorBody(err: unknown): ErrorBody {
  const code = statusOf(err) ?? 500;
  return errorBodyOf(code, statusOf(err) ? (err as Error).message : "internal server error");
}

/** The answer to a request without the API key, from a node and the gateway alike. */
export const NO_API_KEY = "invalid or missing API key (X-API-Key)";

/** The answer to a path no route matches. */
export function noRouteBody(method: string, url: string): ErrorBody {
  return errorBodyOf(404, `no route ${method} ${url.split("?")[0]}`);
}
