import type { Socket } from "node:net";
/** The shared services every handler gets. */
import type { MetadataStore } from "./filesystem/metadata.js";
import type { WatcherRegistry } from "./filesystem/watchers.js";
import type { ProcessManager } from "./process/manager.js";
import type { State } from "./state.js";
import type { User, UserDb } from "./users.js";

export interface Env {
  state: State;
  users: UserDb;
  metadata: MetadataStore;
  processes: ProcessManager;
  watchers: WatcherRegistry;
  /** Closes every open client connection but `except` (set by the HTTP server). */
  closeConnections?: (except?: Socket) => void;
}

/** Resolve a username ('' / undefined → the default user). Returns undefined for unknown users. */
export async function resolveUser(env: Env, name: string | undefined): Promise<User | undefined> {
  const n = name || (await env.users.defaultUserName(env.state.defaultUser));
  return env.users.lookup(n);
}
