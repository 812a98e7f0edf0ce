/**
 * What can go wrong, as types the domain throws. They carry no HTTP status: http-errors.ts
 * maps them to statuses in one place (for the API, the proxy and the gateway alike).
 */
export abstract class AenvError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The request itself is wrong (a value out of range, a conflicting option). */
export class InvalidRequestError extends AenvError {}
/** No or wrong credentials (API key, signed link). */
export class UnauthorizedError extends AenvError {}
/** Credentials were presented but do not allow this (a private sandbox's traffic token). */
export class ForbiddenError extends AenvError {}
/** The sandbox, snapshot, template or build does not exist (here or in the repository). */
export class NotFoundError extends AenvError {}
/** It exists, but its state does not allow this now (paused, being built, name taken). */
export class ConflictError extends AenvError {}
/** A sandbox that was paused and cannot be reached until it is resumed. */
export class PausedError extends AenvError {}
/** An upload or body over a configured limit. */
export class TooLargeError extends AenvError {}
/**
 * No room now, here: the sandbox limit, memory or CPU budget, network slots, or a start queue
 * too long to wait in. Nothing was started or changed; the same call may be retried after
 * `retryAfterS` (through a gateway, another node is tried first).
 */
export class AtCapacityError extends AenvError {
  constructor(
    message: string,
    readonly retryAfterS = 1,
  ) {
    super(message);
  }
}
/**
 * The calling API key is at one of its limits: its concurrent sandboxes (`sandboxes`), or its
 * creates a second or calls a window (`rate`). Nothing was started or changed; the same call
 * may be retried after `retryAfterS`. A quota, not a lack of room: another node would not help.
 */
export class KeyLimitError extends AenvError {
  constructor(
    message: string,
    readonly limit: "sandboxes" | "rate",
    readonly retryAfterS: number,
  ) {
    super(message);
  }
}
/** The server is stopping and takes no new work. */
export class ShuttingDownError extends AenvError {}
/**
 * A cluster node whose lease lapsed (its heartbeat has not reached the cluster's state in
 * time): until it is renewed another node may have taken a paused sandbox over, so this one
 * resumes and takes over nothing. Retry: through a gateway, another node serves it.
 */
export class FencedError extends AenvError {}
/**
 * A paused sandbox or snapshot whose checkpoint was written by another runtime build (its
 * checkpoint key): only a node with that key restores it. A gateway reads the key from the
 * answer's NEEDS_CHECKPOINT_KEY_HEADER and tries such a node.
 */
export class RuntimeMismatchError extends AenvError {
  constructor(
    message: string,
    readonly checkpointKey: string,
  ) {
    super(message);
  }
}
export const NEEDS_CHECKPOINT_KEY_HEADER = "x-aenv-needs-checkpoint-key";
/** A sandbox could not be started, resumed or loaded; the message says why. */
export class StartFailedError extends AenvError {}
/** A fork child did not come up; its siblings are unaffected. */
export class ChildFailedError extends AenvError {}
/** A part of E2B's API this server deliberately does not implement; the message says why. */
export class NotImplementedError extends AenvError {}
/** A sandbox port could not be reached or answered something that is not HTTP. */
export class UpstreamError extends AenvError {}

export const notFound = (msg: string) => new NotFoundError(msg);
export const badRequest = (msg: string) => new InvalidRequestError(msg);
export const conflict = (msg: string) => new ConflictError(msg);
