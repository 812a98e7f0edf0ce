import { chmodSync } from "node:fs";
import { writeFileDurableSync } from "./durable-write.js";

/**
 * Writes a file only root can read (0600, folder 0700), atomically and durably. For tokens
 * and secret values.
 */
export function writePrivateFile(path: string, data: string): void {
  writeFileDurableSync(path, data, { mode: 0o600, dirMode: 0o700 });
  // The umask may have narrowed nothing here, but an older file's mode must not survive.
  chmodSync(path, 0o600);
}
