import { createHash } from "node:crypto";
import {
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join, relative } from "node:path";
import { envdArtifacts } from "@aenv/envd";
import { ENVD_PORT, SANDBOX_LOWER_DIR } from "@aenv/protocol";
import { publishTreeSync } from "../util/durable-write.js";
import { fileIdentity, readMemo, writeMemo } from "../util/memo-file.js";

/**
 * PID 1 of a sandbox: aenv-init, which starts envd (Go, static: no libraries, so it runs in
 * any rootfs, glibc or musl or none) and reaps orphaned processes. Part of the folder's
 * identity: checkpoints taken with other arguments must not be restored under these.
 */
export const ENVD_ARGS = ["/.aenv/bin/aenv-init", "/.aenv/bin/envd", "--port", String(ENVD_PORT)];

/** What goes into the runtime folder, by the name each file has in its bin/. */
function runtimeInputs(): Array<readonly [src: string, name: string]> {
  const art = envdArtifacts();
  if (!art.envd) {
    throw new Error(
      "envd is not built (packages/envd/dist/envd-native needs Go: scripts/install-deps.sh, then npm run build)",
    );
  }
  return [
    [art.envd, "envd"],
    [art.init, "aenv-init"],
    [art.sudo, "aenv-sudo"],
    [art.xattr, "aenv-xattr"],
  ];
}

/**
 * Part of what a restore needs identical besides the files: mounts and envd's arguments. Its
 * text is part of every folder's ID, and so of every image's key: changing it orphans them.
 */
const IDENTITY_PREFIX = `mounts:${SANDBOX_LOWER_DIR}args:${JSON.stringify(ENVD_ARGS)}`;

/**
 * The folder's content ID: a hash of every input's path and bytes. Nodes of a cluster that run
 * the same builds get the same ID, so they restore each other's images.
 */
export function runtimeContentId(files: string[]): string {
  const h = createHash("sha256");
  h.update(IDENTITY_PREFIX);
  const buf = Buffer.allocUnsafe(1 << 20);
  for (const f of files) {
    h.update(f);
    const fd = openSync(f, "r");
    try {
      for (let n: number; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) h.update(buf.subarray(0, n));
    } finally {
      closeSync(fd);
    }
  }
  return h.digest("hex").slice(0, 16);
}

/** The inputs' identities (memo-file.ts): lets a restart skip reading them. */
function statKey(files: string[]): string {
  const h = createHash("sha256");
  h.update(IDENTITY_PREFIX);
  for (const f of files) h.update(`${f}\0${fileIdentity(f)}\n`);
  return h.digest("hex");
}

/**
 * Builds the folder mounted read-only at /.aenv in every sandbox: envd and its tools.
 * Content-addressed by what went in, so a running sandbox's folder never changes under it
 * (restored images expect identical files). The content ID is remembered by the inputs'
 * stat key, so a start with unchanged inputs reads none of them.
 */
export function prepareEnvdRuntime(root: string, opts: { simulated?: boolean } = {}): string {
  // Simulated sandboxes run nothing: their folder holds the arguments alone, so the sim
  // runtime needs no Go build (the fast tier runs it from a bare checkout).
  if (opts.simulated) {
    const dir = join(root, "sim");
    if (!existsSync(join(dir, ".complete"))) buildRuntimeFolder(dir, []);
    return dir;
  }
  const inputs = runtimeInputs();
  const files = inputs.map(([src]) => src);
  const key = statKey(files);
  const memo = join(root, ".ids-native.json");
  const known = readMemo(memo, key);
  if (known && /^[0-9a-f]{16}$/.test(known) && existsSync(join(root, known, ".complete"))) return join(root, known);
  const id = runtimeContentId(files);
  const dir = join(root, id);
  if (!existsSync(join(dir, ".complete"))) buildRuntimeFolder(dir, inputs);
  writeMemo(memo, key, id);
  return dir;
}

const ARGS_FILE = "args.json";
const argsMemo = new Map<string, string[]>();

/**
 * What PID 1 of a sandbox on this runtime folder runs: the folder records it, so a sandbox
 * paused on a folder built by an older release resumes with that folder's own arguments.
 */
export function envdArgs(runtimeDir: string): string[] {
  let args = argsMemo.get(runtimeDir);
  if (!args) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(join(runtimeDir, ARGS_FILE), "utf8"));
    } catch (e) {
      throw new Error(`runtime folder ${runtimeDir} has no readable ${ARGS_FILE}: ${(e as Error).message}`);
    }
    if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === "string")) {
      throw new Error(`runtime folder ${runtimeDir}: ${ARGS_FILE} is not a list of strings`);
    }
    args = parsed;
    argsMemo.set(runtimeDir, args);
  }
  return args;
}

function buildRuntimeFolder(dir: string, inputs: Array<readonly [string, string]>): void {
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(join(tmp, "bin"), { recursive: true });
  // Mount point of the template tree (read-only here, so it must exist beforehand).
  mkdirSync(join(tmp, relative("/.aenv", SANDBOX_LOWER_DIR)), { recursive: true });
  writeFileSync(join(tmp, ARGS_FILE), JSON.stringify(ENVD_ARGS));
  for (const [src, name] of inputs) cpSync(src, join(tmp, "bin", name));
  writeFileSync(join(tmp, ".complete"), "");
  rmSync(dir, { recursive: true, force: true });
  // Every sandbox mounts it: a crash must never leave a torn copy marked complete.
  publishTreeSync(tmp, dir);
}
