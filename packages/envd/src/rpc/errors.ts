/** Mapping of fs / user errors onto Connect errors (string codes on the wire). */
import { Code, ConnectError } from "@connectrpc/connect";

export function errnoOf(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err && typeof err.code === "string"
    ? err.code
    : undefined;
}

export function fsConnectError(err: unknown, p: string): ConnectError {
  if (err instanceof ConnectError) return err;
  const msg = err instanceof Error ? err.message : String(err);
  switch (errnoOf(err)) {
    case "ENOENT":
      return new ConnectError(`path '${p}' does not exist`, Code.NotFound);
    case "ENOTDIR":
      return new ConnectError(`path '${p}' is not a directory: ${msg}`, Code.InvalidArgument);
    case "EISDIR":
      return new ConnectError(`path '${p}' is a directory`, Code.InvalidArgument);
    case "EEXIST":
      return new ConnectError(`path '${p}' already exists`, Code.AlreadyExists);
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return new ConnectError(`permission denied for '${p}': ${msg}`, Code.PermissionDenied);
    case "ENOSPC":
    case "EDQUOT":
      return new ConnectError(`not enough disk space: ${msg}`, Code.ResourceExhausted);
    case "ENAMETOOLONG":
    case "EINVAL":
    case "ELOOP":
      return new ConnectError(`invalid path '${p}': ${msg}`, Code.InvalidArgument);
    default:
      return new ConnectError(`error on '${p}': ${msg}`, Code.Internal);
  }
}

export function invalidUser(name: string): ConnectError {
  return new ConnectError(`invalid username: '${name}'`, Code.Unauthenticated);
}
