import { chmodSync, closeSync, openSync } from "node:fs";
import type { NodePaths } from "../node-paths.js";
import { SqliteStateStore } from "../state/sqlite-store.js";
import type { Component } from "./component.js";

export interface State extends Component {
  store: SqliteStateStore;
}

/** The node's sandbox and snapshot records (SQLite). */
export function openState(paths: NodePaths): State {
  // Records hold envd tokens and env vars; SQLite gives its -wal/-shm files the db's mode.
  closeSync(openSync(paths.stateDb, "a", 0o600));
  chmodSync(paths.stateDb, 0o600);
  const store = new SqliteStateStore(paths.stateDb);
  return { store, stop: () => store.close() };
}
