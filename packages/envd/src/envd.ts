/** Wiring: build the shared services and the server. */

import { existsSync } from "node:fs";
import type http from "node:http";
import type { Env } from "./env.js";
import { MemoryMetadata, XattrMetadata } from "./filesystem/metadata.js";
import { WatcherRegistry } from "./filesystem/watchers.js";
import { createEnvdServer } from "./http/server.js";
import { ProcessManager } from "./process/manager.js";
import { Spawner } from "./process/spawner.js";
import { State } from "./state.js";
import { inSandbox, installSudoLinks } from "./sudo/install.js";
import { SudoServer } from "./sudo/server.js";
import { UserDb } from "./users.js";

export interface EnvdOptions {
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  /** Directory holding passwd and group (default /etc). */
  etcDir?: string;
  /** The aenv-xattr helper (default: the sandbox runtime's, else metadata stays in memory). */
  xattrTool?: string;
  /** The aenv-spawn helper (default: the sandbox runtime's; without one, Node's spawn). */
  spawnHelper?: string;
}

const XATTR_TOOL = "/.aenv/bin/aenv-xattr";
const SPAWN_HELPER = "/.aenv/bin/aenv-spawn";

export function createEnvd(opts: EnvdOptions = {}): { env: Env; server: http.Server } {
  const env: Env = {
    state: new State(opts),
    users: new UserDb(opts.etcDir),
    metadata: (() => {
      const tool = opts.xattrTool ?? (existsSync(XATTR_TOOL) ? XATTR_TOOL : undefined);
      return tool ? new XattrMetadata(tool) : new MemoryMetadata();
    })(),
    processes: new ProcessManager(
      (() => {
        const helper = opts.spawnHelper ?? (existsSync(SPAWN_HELPER) ? SPAWN_HELPER : undefined);
        return helper ? Spawner.start(helper) : undefined;
      })(),
    ),
    watchers: new WatcherRegistry(),
  };
  if (inSandbox()) {
    new SudoServer(env.users).start();
    installSudoLinks();
  }
  return { env, server: createEnvdServer(env) };
}
