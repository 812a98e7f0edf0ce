import {
  AenvError,
  AtCapacityError,
  ChildFailedError,
  ConflictError,
  ForbiddenError,
  InvalidRequestError,
  NotFoundError,
  PausedError,
  ShuttingDownError,
  StartFailedError,
  TooLargeError,
  UnauthorizedError,
  UpstreamError,
} from "../errors.js";

/** The one table from domain errors to HTTP statuses (API routes and the proxy). */
const STATUS = new Map<abstract new (...args: never[]) => AenvError, number>([
  [InvalidRequestError, 400],
  [UnauthorizedError, 401],
  [ForbiddenError, 403],
  [NotFoundError, 404],
  [ConflictError, 409],
  [PausedError, 409],
  [TooLargeError, 413],
  [AtCapacityError, 429],
  [StartFailedError, 500],
  [UpstreamError, 502],
  [ChildFailedError, 503],
  [ShuttingDownError, 503],
]);

/** HTTP status of a domain error; undefined for anything else (a bug: 500). */
export function statusOf(err: unknown): number | undefined {
  if (!(err instanceof AenvError)) return undefined;
  for (const [type, status] of STATUS) if (err instanceof type) return status;
  return 500;
}

/** The E2B error body: {code, message}. */
export function errorBody(err: unknown): { code: number; message: string } {
  const code = statusOf(err) ?? 500;
  return { code, message: statusOf(err) ? (err as Error).message : "internal server error" };
}
