/** Wiring: build the shared services and the server. */

import { existsSync } from "node:fs";
import type http from "node:http";
import type net from "node:net";
import type { Env } from "./env.js";
import { MemoryMetadata, XattrMetadata } from "./filesystem/metadata.js";
import { WatcherRegistry } from "./filesystem/watchers.js";
import { largeReadListener } from "./http/large-reads.js";
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
  /**
   * An aenv-init binary to run as `--spawner` for starting commands (tests). Under aenv-init
   * (every sandbox) its own spawn service is used; otherwise Node's spawn.
   */
  spawnHelper?: string;
}

const XATTR_TOOL = "/.aenv/bin/aenv-xattr";

/** aenv-init's spawn service, once: the variable must not reach commands started by Node. */
function spawner(opts: EnvdOptions): Spawner | undefined {
  const socket = process.env.AENV_SPAWN_SOCKET;
  delete process.env.AENV_SPAWN_SOCKET;
  if (opts.spawnHelper) return Spawner.start(opts.spawnHelper);
  return socket ? Spawner.connect(socket) : undefined;
}

/** envd's state, its HTTP server, and the listener to listen on (which feeds the server). */
export function createEnvd(opts: EnvdOptions = {}): { env: Env; server: http.Server; listener: net.Server } {
  const env: Env = {
    state: new State(opts),
    users: new UserDb(opts.etcDir),
    metadata: (() => {
      const tool = opts.xattrTool ?? (existsSync(XATTR_TOOL) ? XATTR_TOOL : undefined);
      return tool ? new XattrMetadata(tool) : new MemoryMetadata();
    })(),
    processes: new ProcessManager(spawner(opts)),
    watchers: new WatcherRegistry(),
  };
  if (inSandbox()) {
    new SudoServer(env.users).start();
    installSudoLinks();
  }
  const server = createEnvdServer(env);
  return { env, server, listener: largeReadListener(server) };
}
