import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join, relative } from "node:path";
import { envdArtifacts } from "@aenv/envd";
import { SANDBOX_LOWER_DIR } from "@aenv/protocol";
import { publishTreeSync } from "../util/durable-write.js";
import { fileIdentity, readMemo, writeMemo } from "../util/memo-file.js";

/**
 * PID 1 of a sandbox: aenv-init, which starts envd (with the runtime folder's loader and
 * node) and reaps orphaned processes. Part of the folder's identity: checkpoints taken with
 * other arguments (node flags) must not be restored under these.
 */
export const ENVD_ARGS = [
  "/.aenv/bin/aenv-init",
  "/.aenv/lib/ld-linux-x86-64.so.2",
  "--library-path",
  "/.aenv/lib",
  "/.aenv/bin/node",
  // A small daemon: young generation capped at 1 MiB semi-spaces and no V8 helper threads
  // shrink every pause image, snapshot and fork by ~3 MiB (20.4 -> 17.5 MiB idle here).
  "--max-semi-space-size=1",
  "--single-threaded",
  // For /quiesce?gc=1: images that many sandboxes restore from are taken after a full GC.
  "--expose-gc",
  "/.aenv/envd/envd.js",
  "--port",
  "49983",
];

/**
 * PID 1 with the native (Go, static) envd: no node, no libraries. ~1.6 MiB of pause image for
 * an idle sandbox instead of ~13 (see docs/benchmarks.md).
 */
export const NATIVE_ENVD_ARGS = ["/.aenv/bin/aenv-init", "/.aenv/bin/envd", "--port", "49983"];

export type EnvdKind = "node" | "native";

const argsOf = (kind: EnvdKind): string[] => (kind === "native" ? NATIVE_ENVD_ARGS : ENVD_ARGS);

/** Shared libraries the host's node binary loads, from ldd (the loader included). */
function nodeLibraries(node: string): string[] {
  const out = execFileSync("ldd", [node], { encoding: "utf8" });
  const libs: string[] = [];
  for (const line of out.split("\n")) {
    const m = /=>\s+(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m?.[1]) libs.push(m[1]);
  }
  return libs;
}

/** What goes into the runtime folder: envd (node, its libraries and the bundle, or the native binary) and its tools. */
function runtimeInputs(kind: EnvdKind): {
  node: string;
  libs: string[];
  art: ReturnType<typeof envdArtifacts>;
  files: string[];
} {
  const art = envdArtifacts();
  const tools = [art.init, art.sudo, art.xattr];
  if (kind === "native") {
    if (!art.native) {
      throw new Error(
        "runtime.envd is native (the default) but the native envd is not built (packages/envd/dist/envd-native needs Go: scripts/install-deps.sh, then npm run build), or set runtime.envd = node",
      );
    }
    return { node: "", libs: [], art, files: [art.native, ...tools] };
  }
  const node = realpathSync(process.execPath);
  const libs = nodeLibraries(node);
  const files = [
    node,
    ...libs,
    art.bundle,
    ...tools,
    ...(art.trim ? [art.trim] : []),
    join(art.nodePtyDir, "build/Release/pty.node"),
  ];
  return { node, libs, art, files };
}

/** Part of what a restore needs identical besides the files: mounts and envd's arguments. */
const identityPrefix = (kind: EnvdKind): string => `mounts:${SANDBOX_LOWER_DIR}args:${JSON.stringify(argsOf(kind))}`;

/**
 * The folder's content ID: a hash of every input's path and bytes (~100 MB, most of it node:
 * ~0.8 s here). Nodes of a cluster that run the same builds get the same ID, so they restore
 * each other's images.
 */
export function runtimeContentId(files: string[], kind: EnvdKind): string {
  const h = createHash("sha256");
  h.update(identityPrefix(kind));
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

/** The inputs' identities (memo-file.ts): lets a restart skip reading ~100 MB. */
function statKey(files: string[], kind: EnvdKind): string {
  const h = createHash("sha256");
  h.update(identityPrefix(kind));
  for (const f of files) h.update(`${f}\0${fileIdentity(f)}\n`);
  return h.digest("hex");
}

/**
 * Builds the folder mounted read-only at /.aenv in every sandbox: the host's node binary
 * with its libraries (so envd runs in any rootfs, glibc or musl or none) and the envd bundle.
 * Content-addressed by what went in, so a running sandbox's folder never changes under it
 * (restored images expect identical files). The content ID is remembered by the inputs'
 * stat key (`.ids.json`), so a start with unchanged inputs reads none of them.
 */
export function prepareEnvdRuntime(root: string, kind: EnvdKind): string {
  const { node, libs, art, files } = runtimeInputs(kind);
  const key = statKey(files, kind);
  // One memo per kind: a host switching between them re-reads neither.
  const memo = join(root, kind === "native" ? ".ids-native.json" : ".ids.json");
  const known = readMemo(memo, key);
  if (known && /^[0-9a-f]{16}$/.test(known) && existsSync(join(root, known, ".complete"))) return join(root, known);
  const id = runtimeContentId(files, kind);
  const dir = join(root, id);
  if (!existsSync(join(dir, ".complete"))) buildRuntimeDir(dir, kind, node, libs, art);
  writeMemo(memo, key, id);
  return dir;
}

const ARGS_FILE = "args.json";
const argsMemo = new Map<string, string[]>();

/**
 * What PID 1 of a sandbox on this runtime folder runs (the folder records it). Folders built
 * before it did are Node ones.
 */
export function envdArgs(runtimeDir: string): string[] {
  let args = argsMemo.get(runtimeDir);
  if (!args) {
    try {
      const parsed: unknown = JSON.parse(readFileSync(join(runtimeDir, ARGS_FILE), "utf8"));
      args = Array.isArray(parsed) && parsed.every((a) => typeof a === "string") ? parsed : ENVD_ARGS;
    } catch {
      args = ENVD_ARGS;
    }
    argsMemo.set(runtimeDir, args);
  }
  return args;
}

function buildRuntimeDir(
  dir: string,
  kind: EnvdKind,
  node: string,
  libs: string[],
  art: ReturnType<typeof envdArtifacts>,
): void {
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(join(tmp, "bin"), { recursive: true });
  writeFileSync(join(tmp, ARGS_FILE), JSON.stringify(argsOf(kind)));
  if (kind === "native") {
    mkdirSync(join(tmp, relative("/.aenv", SANDBOX_LOWER_DIR)), { recursive: true });
    for (const [src, name] of [
      [art.native as string, "envd"],
      [art.init, "aenv-init"],
      [art.sudo, "aenv-sudo"],
      [art.xattr, "aenv-xattr"],
    ] as const) {
      cpSync(src, join(tmp, "bin", name));
    }
    writeFileSync(join(tmp, ".complete"), "");
    rmSync(dir, { recursive: true, force: true });
    publishTreeSync(tmp, dir);
    return;
  }
  mkdirSync(join(tmp, "lib"), { recursive: true });
  mkdirSync(join(tmp, "envd", "node_modules"), { recursive: true });
  // Mount point of the template tree (read-only here, so it must exist beforehand).
  mkdirSync(join(tmp, relative("/.aenv", SANDBOX_LOWER_DIR)), { recursive: true });
  cpSync(node, join(tmp, "bin", "node"));
  cpSync(art.init, join(tmp, "bin", "aenv-init"));
  cpSync(art.sudo, join(tmp, "bin", "aenv-sudo"));
  cpSync(art.xattr, join(tmp, "bin", "aenv-xattr"));
  for (const lib of libs) {
    const name = basename(lib);
    cpSync(realpathSync(lib), join(tmp, "lib", name));
  }
  if (!existsSync(join(tmp, "lib", "ld-linux-x86-64.so.2"))) {
    throw new Error("node's dynamic loader ld-linux-x86-64.so.2 not found via ldd");
  }
  cpSync(art.bundle, join(tmp, "envd", "envd.js"));
  if (art.trim) cpSync(art.trim, join(tmp, "envd", "aenv-trim.node"));
  cpSync(art.nodePtyDir, join(tmp, "envd", "node_modules", "node-pty"), { recursive: true, dereference: true });
  // envd's build ships the package.json that pins the bundle's module type.
  cpSync(join(dirname(art.bundle), "package.json"), join(tmp, "envd", "package.json"));
  writeFileSync(join(tmp, ".complete"), "");
  rmSync(dir, { recursive: true, force: true });
  // Every sandbox mounts it: a crash must never leave a torn copy marked complete.
  publishTreeSync(tmp, dir);
}
