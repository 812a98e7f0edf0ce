import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ServerConfig } from "../config.js";
import { NodePaths } from "../node-paths.js";

/** The data and templates directories, made private to root; the paths under them. */
export function prepareHostDirs(cfg: ServerConfig): NodePaths {
  // Only root reads the data dir: it holds tokens, env vars, sandbox memory images.
  mkdirSync(cfg.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(cfg.dataDir, 0o700);
  // Template trees hold images' setuid binaries: host users must not reach them.
  mkdirSync(cfg.templatesDir, { recursive: true, mode: 0o700 });
  chmodSync(cfg.templatesDir, 0o700);
  const paths = new NodePaths(cfg.dataDir, cfg.templatesDir);
  // What a commit cut short by a crash left: this node's, and old servers' in the templates
  // folder (they staged there, under `.commit-*`; a day old is no commit still running).
  rmSync(paths.commitStaging, { recursive: true, force: true });
  // Pause images offered to peers are served by the process that offered them only.
  rmSync(paths.peerPauses, { recursive: true, force: true });
  for (const name of readdirSync(cfg.templatesDir)) {
    if (!name.startsWith(".commit-")) continue;
    const dir = join(cfg.templatesDir, name);
    if (Date.now() - statSync(dir).mtimeMs > 24 * 3600_000) rmSync(dir, { recursive: true, force: true });
  }
  return paths;
}

/** Nameservers for sandboxes: the host's, minus loopback ones a sandbox cannot reach. */
export function writeResolvConf(file: string): { file: string; servers: string[] } {
  let servers: string[] = [];
  try {
    servers = [...readFileSync("/etc/resolv.conf", "utf8").matchAll(/^nameserver\s+(\S+)/gm)]
      .map((m) => m[1] as string)
      .filter((s) => !s.startsWith("127.") && s !== "::1");
  } catch {
    servers = [];
  }
  writeFileSync(file, servers.map((s) => `nameserver ${s}\n`).join("") || "# no reachable host resolver\n");
  return { file, servers };
}
