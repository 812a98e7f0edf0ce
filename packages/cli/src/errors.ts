/** An error meant for the user: printed as one line `aenv: <message>`, exits with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = "CliError";
  }
}

/** Exit code 2: the server lacks the API this command needs. */
export function notSupported(what: string): CliError {
  return new CliError(`${what} is not supported by this server yet`, 2);
}

/** One line, no stack, for any thrown value. */
export function errorLine(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  const line =
    msg
      .split("\n")
      .map((l) => l.trim())
      .find((l) => l.length > 0) ?? "unknown error";
  return line;
}
