/** filesystem.Filesystem Connect service (§5.7). */
import { type Dirent, promises as fsp, type Stats } from "node:fs";
import path from "node:path";
import type { Filesystem, filesystemPb } from "@aenv/protocol";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Env } from "../env.js";
import { resolvePath } from "../paths.js";
import { errnoOf, fsConnectError } from "../rpc/errors.js";
import { keepaliveMs, PushQueue } from "../rpc/stream.js";
import { rpcUser } from "../rpc/user.js";
import { type EntryDeps, entryFor, entryFromStat } from "./entry.js";
import { mkdirpOwned } from "./ownership.js";
import { DirWatcher, type WatchEvent, type WatchOptions } from "./watch.js";

type WatchInit = MessageInitShape<typeof filesystemPb.WatchDirResponseSchema>;

async function deps(env: Env): Promise<EntryDeps> {
  return { accounts: await env.users.accounts(), metadata: env.metadata };
}

async function resolveFor(env: Env, ctx: HandlerContext, p: string): Promise<string> {
  const user = await rpcUser(env, ctx);
  return resolvePath(p, user, env.state.defaultWorkdir);
}

/** The directory must exist (following symlinks) and be a directory. */
async function requireDir(p: string): Promise<void> {
  let st: Awaited<ReturnType<typeof fsp.stat>>;
  try {
    st = await fsp.stat(p);
  } catch (err) {
    throw fsConnectError(err, p);
  }
  if (!st.isDirectory()) throw new ConnectError(`path '${p}' is not a directory`, Code.InvalidArgument);
}

async function listDir(
  dir: string,
  display: string,
  depth: number,
  d: EntryDeps,
  out: filesystemPb.EntryInfo[],
  isRoot = true,
): Promise<void> {
  let items: Dirent[];
  try {
    items = await fsp.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if (isRoot) throw err;
    return; // unreadable or vanished subdirectory: skip it
  }
  items.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const found: Array<{ abs: string; disp: string; st: Stats }> = [];
  for (const it of items) {
    const abs = path.join(dir, it.name);
    try {
      found.push({ abs, disp: path.join(display, it.name), st: await fsp.lstat(abs) });
    } catch {
      // vanished meanwhile
    }
  }
  const metas = await d.metadata.getMany(found.map((f) => ({ path: f.abs, dev: f.st.dev, ino: f.st.ino })));
  for (const [i, f] of found.entries()) {
    out.push(await entryFromStat(f.abs, f.st, d, f.disp, { meta: metas[i] }));
    if (depth > 1 && f.st.isDirectory()) await listDir(f.abs, f.disp, depth - 1, d, out, false);
  }
}

function watchMessage(ev: WatchEvent): WatchInit {
  return { event: { case: "filesystem", value: { name: ev.name, type: ev.type, entry: ev.entry } } };
}

async function startWatcher(
  env: Env,
  ctx: HandlerContext,
  reqPath: string,
  opts: WatchOptions,
  push: (ev: WatchEvent) => void,
): Promise<DirWatcher> {
  const p = await resolveFor(env, ctx, reqPath);
  await requireDir(p);
  const w = new DirWatcher(p, opts, { users: env.users, metadata: env.metadata }, push);
  try {
    await w.start();
  } catch (err) {
    w.close();
    throw fsConnectError(err, p);
  }
  return w;
}

export function filesystemService(env: Env): ServiceImpl<typeof Filesystem> {
  return {
    async stat(req, ctx) {
      const p = await resolveFor(env, ctx, req.path);
      try {
        return { entry: await entryFor(p, await deps(env)) };
      } catch (err) {
        throw fsConnectError(err, p);
      }
    },

    async makeDir(req, ctx) {
      const user = await rpcUser(env, ctx);
      const p = resolvePath(req.path, user, env.state.defaultWorkdir);
      try {
        const st = await fsp.stat(p);
        if (st.isDirectory()) throw new ConnectError(`directory '${p}' already exists`, Code.AlreadyExists);
        throw new ConnectError(`path '${p}' already exists but it is not a directory`, Code.InvalidArgument);
      } catch (err) {
        if (err instanceof ConnectError) throw err;
        if (errnoOf(err) !== "ENOENT") throw fsConnectError(err, p);
      }
      try {
        await mkdirpOwned(p, user);
        return { entry: await entryFor(p, await deps(env)) };
      } catch (err) {
        if (errnoOf(err) === "EEXIST") {
          throw new ConnectError(`path '${p}' already exists but it is not a directory`, Code.InvalidArgument);
        }
        throw fsConnectError(err, p);
      }
    },

    async move(req, ctx) {
      const user = await rpcUser(env, ctx);
      const src = resolvePath(req.source, user, env.state.defaultWorkdir);
      const dst = resolvePath(req.destination, user, env.state.defaultWorkdir);
      try {
        await fsp.lstat(src);
      } catch (err) {
        throw fsConnectError(err, src);
      }
      try {
        await mkdirpOwned(path.dirname(dst), user);
        try {
          await fsp.rename(src, dst);
        } catch (err) {
          if (errnoOf(err) !== "EXDEV") throw err;
          await fsp.cp(src, dst, { recursive: true, force: true, preserveTimestamps: true, verbatimSymlinks: true });
          await fsp.rm(src, { recursive: true, force: true });
        }
        env.metadata.move(src, dst);
        return { entry: await entryFor(dst, await deps(env)) };
      } catch (err) {
        throw fsConnectError(err, dst);
      }
    },

    async listDir(req, ctx) {
      const p = await resolveFor(env, ctx, req.path);
      await requireDir(p);
      const out: filesystemPb.EntryInfo[] = [];
      try {
        await listDir(p, p, Math.max(1, req.depth || 1), await deps(env), out);
      } catch (err) {
        throw fsConnectError(err, p);
      }
      return { entries: out };
    },

    async remove(req, ctx) {
      const p = await resolveFor(env, ctx, req.path);
      try {
        await fsp.rm(p, { recursive: true, force: true });
      } catch (err) {
        throw fsConnectError(err, p);
      }
      env.metadata.remove(p);
      return {};
    },

    async *watchDir(req, ctx) {
      const queue = new PushQueue<WatchInit>();
      const opts = { recursive: req.recursive, includeEntry: req.includeEntry };
      const watcher = await startWatcher(env, ctx, req.path, opts, (ev) => queue.push(watchMessage(ev)));
      try {
        yield { event: { case: "start", value: {} } };
        // ends at the Connect-Timeout-Ms deadline or when the client goes away
        yield* queue.drain({
          signal: ctx.signal,
          intervalMs: keepaliveMs(ctx.requestHeader),
          keepalive: () => ({ event: { case: "keepalive", value: {} } }),
        });
      } finally {
        watcher.close();
      }
    },

    async createWatcher(req, ctx) {
      const opts = { recursive: req.recursive, includeEntry: req.includeEntry };
      const watcherId = await env.watchers.create((push) => startWatcher(env, ctx, req.path, opts, push));
      return { watcherId };
    },

    getWatcherEvents(req) {
      return {
        events: env.watchers.drain(req.watcherId).map((ev) => ({ name: ev.name, type: ev.type, entry: ev.entry })),
      };
    },

    removeWatcher(req) {
      env.watchers.remove(req.watcherId);
      return {};
    },
  };
}
