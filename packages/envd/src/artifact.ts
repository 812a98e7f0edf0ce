/**
 * Host-side helper for the server: where the built envd and its tools are, so they can be
 * copied into a sandbox's runtime folder (`<runtime>/bin/{envd,aenv-init,aenv-sudo,aenv-xattr}`).
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export interface EnvdArtifacts {
  /** The envd (Go, static: dist/envd-native); undefined where it was not built (no Go). */
  envd?: string;
  /** Static PID 1 that starts envd and reaps orphans (dist/aenv-init). */
  init: string;
  /** Static `sudo`/`su` client of envd's root service (dist/aenv-sudo). */
  sudo: string;
  /** Static xattr reader/writer for file metadata (dist/aenv-xattr). */
  xattr: string;
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
  const dist = path.join(packageRoot(), "dist");
  const envd = path.join(dist, "envd-native");
  return {
    envd: existsSync(envd) ? envd : undefined,
    init: path.join(dist, "aenv-init"),
    sudo: path.join(dist, "aenv-sudo"),
    xattr: path.join(dist, "aenv-xattr"),
  };
}
