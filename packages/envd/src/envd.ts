/** Wiring: build the shared services and the server. */
import type http from "node:http";
import type { Env } from "./env.js";
import { MetadataStore } from "./filesystem/metadata.js";
import { WatcherRegistry } from "./filesystem/watchers.js";
import { createEnvdServer } from "./http/server.js";
import { ProcessManager } from "./process/manager.js";
import { State } from "./state.js";
import { UserDb } from "./users.js";

export interface EnvdOptions {
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  /** Directory holding passwd and group (default /etc). */
  etcDir?: string;
}

export function createEnvd(opts: EnvdOptions = {}): { env: Env; server: http.Server } {
  const env: Env = {
    state: new State(opts),
    users: new UserDb(opts.etcDir),
    metadata: new MetadataStore(),
    processes: new ProcessManager(),
    watchers: new WatcherRegistry(),
  };
  return { env, server: createEnvdServer(env) };
}
