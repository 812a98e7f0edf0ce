/** Sandbox-wide configuration, set at startup and by POST /init. */
import type { EnvdInitBody } from "@aenv/protocol";

/** POST /init's body, as the server sends it (the contract lives in @aenv/protocol). */
export type InitBody = EnvdInitBody;

export class State {
  /** Access token; undefined = no auth required. */
  accessToken: string | undefined;
  /** Sandbox-wide env vars, applied to every process after PATH/HOME/USER/LOGNAME. */
  readonly envVars = new Map<string, string>();
  /** Explicit default user from /init; undefined = `user` if it exists, else `root`. */
  defaultUser: string | undefined;
  /** Default working directory; undefined = the user's home. */
  defaultWorkdir: string | undefined;

  constructor(opts: { accessToken?: string; defaultUser?: string; defaultWorkdir?: string } = {}) {
    this.accessToken = opts.accessToken || undefined;
    this.defaultUser = opts.defaultUser || undefined;
    this.defaultWorkdir = opts.defaultWorkdir || undefined;
  }

  /** Apply a validated /init body. Env vars are merged (later values win). */
  applyInit(body: InitBody): void {
    if (body.envVars) {
      for (const [k, v] of Object.entries(body.envVars)) this.envVars.set(k, v);
    }
    if (body.accessToken !== undefined && body.accessToken !== "") this.accessToken = body.accessToken;
    if (body.defaultUser) this.defaultUser = body.defaultUser;
    if (body.defaultWorkdir) this.defaultWorkdir = body.defaultWorkdir;
    // body.timestamp: envd never sets the clock; a sandbox clock that is behind is left as is.
  }

  envObject(): Record<string, string> {
    return Object.fromEntries(this.envVars);
  }
}
