/**
 * Host-side helper for the server: where the envd bundle and the node-pty package are,
 * so they can be copied into a sandbox's runtime folder as
 *   <runtime>/envd.js  and  <runtime>/node_modules/node-pty/{package.json,lib/**,build/Release/pty.node}
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

export interface EnvdArtifacts {
  /** Absolute path of the bundled daemon (dist/envd.js). */
  bundle: string;
  /** Absolute path of the node-pty package directory (contains lib/ and build/Release/pty.node). */
  nodePtyDir: string;
  /** Static PID 1 that starts envd and reaps orphans (dist/aenv-init). */
  init: string;
  /** Static `sudo`/`su` client of envd's root service (dist/aenv-sudo). */
  sudo: string;
  /** Static xattr reader/writer for file metadata (dist/aenv-xattr). */
  xattr: string;
  /** The native (Go) envd (dist/envd-native); undefined where it was not built (no Go). */
  native?: string;
  /** envd's malloc_trim module (dist/aenv-trim.node); undefined where node's headers were missing. */
  trim?: string;
}

function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = path.join(dir, "package.json");
    if (existsSync(pj)) {
      try {
        if (JSON.parse(readFileSync(pj, "utf8")).name === "@aenv/envd") return dir;
      } catch {
        // keep walking
      }
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error("cannot locate the @aenv/envd package root");
    dir = up;
  }
}

export function envdArtifacts(): EnvdArtifacts {
  const root = packageRoot();
  const require = createRequire(path.join(root, "package.json"));
  const trim = path.join(root, "dist", "aenv-trim.node");
  const native = path.join(root, "dist", "envd-native");
  return {
    bundle: path.join(root, "dist", "envd.js"),
    init: path.join(root, "dist", "aenv-init"),
    sudo: path.join(root, "dist", "aenv-sudo"),
    xattr: path.join(root, "dist", "aenv-xattr"),
    trim: existsSync(trim) ? trim : undefined,
    native: existsSync(native) ? native : undefined,
    nodePtyDir: path.dirname(require.resolve("node-pty/package.json")),
  };
}
