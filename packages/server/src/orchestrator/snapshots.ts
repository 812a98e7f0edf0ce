import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { ConflictError, NotFoundError, StartFailedError } from "@aenv/edge/errors";
import type { SandboxRecord, SnapshotRecord } from "../state/store.js";
import { type RejectReport, type SnapshotMeta, snapshotMetaOf } from "../storage/repository/manifest-kinds.js";
import type { Manifest, SnapshotRepository } from "../storage/repository/repository.js";
import { UntrustedManifestError } from "../storage/repository/trust.js";
import { writeFileDurableSync } from "../util/durable-write.js";
import { commitDir, commitDirAsync } from "../util/fsync.js";
import { envdTokenOf } from "./envd-credentials.js";
import type { NodeContext } from "./node-context.js";

/** How long a start waits for a snapshot another server is committing. */
const COMMIT_WAIT_MS = 5 * 60_000;

/**
 * A checkpoint image made whole from a repository manifest (temp name, then rename); `fill`
 * writes it from elsewhere (a peer's manifest) instead.
 */
export async function materializeImage(
  repository: SnapshotRepository,
  manifestId: string,
  imageDir: string,
  fill: (tmp: string) => Promise<void> = (tmp) => repository.materialize(manifestId, tmp),
) {
  const tmp = `${imageDir}.tmp-${randomBytes(4).toString("hex")}`;
  try {
    await fill(tmp);
    commitDir(tmp, imageDir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * Snapshots: named captures of running sandboxes, usable as a templateID. Durable on this
 * node first, then committed to the repository in the background, after which any server
 * sharing it can start them. The repository is the catalog; node-local images are copies.
 */
export class Snapshots {
  private readonly byId = new Map<string, SnapshotRecord>();
  /** Commits still running, by snapshot ID. */
  private readonly commits = new Map<string, Promise<void>>();

  constructor(private readonly ctx: NodeContext) {}

  /** After a restart: the repository's snapshots, and local ones whose commit had not finished. */
  async recover(): Promise<void> {
    // A manifest is written last, so every listed one is complete.
    for (const m of await this.ctx.repository.list()) {
      const rec = this.ofManifest(m);
      if (rec) this.byId.set(m.id, rec);
    }
    const root = this.ctx.paths.snapshots;
    if (!existsSync(root)) return;
    const pending: SnapshotRecord[] = [];
    for (const name of readdirSync(root)) {
      const id = name.replace(/\.pending\.json$/, "");
      if (
        id === name ||
        this.byId.has(id) ||
        !this.ctx.runner.driver.isCompleteCheckpoint(this.ctx.paths.snapshot(id))
      ) {
        continue;
      }
      try {
        const rec = JSON.parse(readFileSync(this.ctx.paths.snapshotPending(id), "utf8")) as SnapshotRecord;
        if (rec.id !== id) continue;
        const local = { ...rec, imageDir: this.ctx.paths.snapshot(id) };
        this.byId.set(id, local);
        pending.push(local);
      } catch {
        // an unreadable record: the image is dropped below
      }
    }
    for (const name of readdirSync(root)) {
      const id = name.replace(/\.pending\.json$/, "");
      if (!this.byId.has(id)) rmSync(`${root}/${name}`, { recursive: true, force: true });
    }
    for (const rec of pending) {
      await this.ctx.repository.announce(rec.id, rec.names).catch(() => undefined);
      this.commit(rec);
    }
  }

  /**
   * By ID or name, among those this node knows. A name taken again names a new build (as E2B's
   * snapshots do): the newest answers to it, the older ones to their IDs.
   */
  findLocal(ref: string, visible: Visible = all): SnapshotRecord | undefined {
    const byId = this.byId.get(ref);
    if (byId && visible(byId.owner)) return byId;
    return newest([...this.byId.values()].filter((s) => s.names.includes(ref) && visible(s.owner)));
  }

  /**
   * By ID or name: one this node knows (unless deleted elsewhere meanwhile), else, with
   * `remote`, one another server sharing the repository committed. With `visible`, only
   * snapshots of owners it accepts answer: a name another API key took is not this caller's
   * (names are a shared namespace, but each key's newest build of a name is its own).
   */
  async find(ref: string, opts: { remote?: boolean; visible?: Visible } = {}): Promise<SnapshotRecord | undefined> {
    const visible = opts.visible ?? all;
    const known = await this.stillCommitted(this.findLocal(ref, visible));
    if (known || opts.remote === false) return known;
    const found = await this.findRemote(ref, visible);
    return found && visible(found.owner) ? found : undefined;
  }

  /** What GET /snapshots shows: this node's, and those others committed, less those deleted elsewhere. */
  async list(): Promise<SnapshotRecord[]> {
    const local = [...this.byId.values()].sort((a, b) => a.createdAt - b.createdAt);
    // Only what was committed before the listing began must be in it: a commit that ends
    // while the repository is listed is not "deleted elsewhere".
    const committedBefore = new Set(local.filter((s) => s.committed).map((s) => s.id));
    const manifests = await this.ctx.repository.listFresh().catch(() => undefined);
    if (!manifests) return local;
    const inRepo = new Set(manifests.map((m) => m.id));
    const out = local.filter((s) => !committedBefore.has(s.id) || inRepo.has(s.id));
    const known = new Set(local.map((s) => s.id));
    for (const m of manifests) {
      const rec = known.has(m.id) ? undefined : this.ofManifest(m);
      if (rec) out.push(rec);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  usesTemplate(templateId: string): boolean {
    for (const s of this.byId.values()) if (s.templateId === templateId) return true;
    return false;
  }

  /** Captures a running sandbox (it keeps running); the repository commit follows in the background. */
  async take(id: string, name: string | undefined): Promise<SnapshotRecord> {
    const l = this.ctx.registry.mustGet(id);
    if (name !== undefined && this.ctx.templates.get(name) !== undefined) {
      throw new ConflictError(`'${name}' is a template's name; a snapshot cannot take it`);
    }
    return this.ctx.registry.enqueue(l, async () => {
      if (l.rec.state !== "running") throw new ConflictError(`sandbox '${id}' is not running`);
      const tmp = this.ctx.paths.snapshot(`.capture-${randomBytes(8).toString("hex")}`);
      mkdirSync(this.ctx.paths.snapshots, { recursive: true });
      const t0 = Date.now();
      try {
        await this.ctx.runner.capture(l, tmp);
        const rec = await this.publish(l.rec, name, tmp);
        this.ctx.log.info({ sandboxID: id, snapshotID: rec.id, ms: Date.now() - t0 }, "snapshot taken");
        return rec;
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    });
  }

  /**
   * Makes a finished capture of `src` a snapshot (the folder is moved, not copied): durable on
   * this node first (image, then its record), usable everywhere as soon as this returns (other
   * servers wait for the commit), committed to the repository in the background and redone
   * after a restart until it succeeds. A fork whose children do not all fit here publishes
   * its capture this way, so the rest start on other nodes from the same memory image.
   */
  async publish(src: SandboxRecord, name: string | undefined, captureDir: string): Promise<SnapshotRecord> {
    const snapId = `snap_${randomBytes(8).toString("hex")}`;
    const final = this.ctx.paths.snapshot(snapId);
    mkdirSync(this.ctx.paths.snapshots, { recursive: true });
    const rec = this.record(src, snapId, name, final, this.ctx.runner.driver.checkpointBytes(captureDir));
    // The announcement goes out while the image is made durable: nobody has the ID before
    // this returns, and one left by a crash meanwhile only expires (announcements.ts).
    const announced = this.ctx.repository
      .announce(snapId, rec.names)
      .catch((err) => this.ctx.log.warn({ err, snapshotID: snapId }, "snapshot commit not announced"));
    try {
      await commitDirAsync(captureDir, final);
      this.writePending(rec);
    } catch (err) {
      await announced;
      await this.ctx.repository.withdraw(snapId).catch(() => undefined);
      throw err;
    }
    await announced;
    this.byId.set(snapId, rec);
    this.commit(rec);
    return rec;
  }

  /** Makes sure the node-local copy of a snapshot exists, rebuilding it from the repository. */
  async ensureLocal(snap: SnapshotRecord): Promise<void> {
    const complete = () => this.ctx.runner.driver.isCompleteCheckpoint(snap.imageDir);
    if (complete()) return;
    try {
      await materializeImage(this.ctx.repository, snap.id, snap.imageDir);
    } catch (err) {
      if (complete()) return; // a concurrent create won
      throw new StartFailedError(`snapshot '${snap.id}' cannot be loaded: ${(err as Error).message}`);
    }
  }

  async delete(ref: string): Promise<void> {
    const s = this.findLocal(ref);
    if (!s) throw new NotFoundError(`snapshot '${ref}' not found`);
    this.byId.delete(s.id);
    await this.commits.get(s.id);
    await this.ctx.repository.delete(s.id);
    rmSync(this.ctx.paths.snapshotPending(s.id), { force: true });
    rmSync(s.imageDir, { recursive: true, force: true });
  }

  async close(): Promise<void> {
    await Promise.all([...this.commits.values()]);
  }

  private writePending(rec: SnapshotRecord): void {
    const { imageDir: _local, ...data } = rec;
    const file = this.ctx.paths.snapshotPending(rec.id);
    writeFileDurableSync(file, JSON.stringify(data));
  }

  /** Commits a snapshot's local image to the repository; other servers can use it after. */
  private commit(rec: SnapshotRecord): void {
    const { imageDir, committed: _c, uploadedBytes: _u, ...data } = rec;
    const meta: SnapshotMeta = { kind: "snapshot", ...data };
    const t0 = Date.now();
    const p = this.ctx.repository
      .commit(rec.id, imageDir, meta)
      .then(({ stats }) => {
        rec.uploadedBytes = stats.uploadedBytes;
        rec.committed = true;
        rmSync(this.ctx.paths.snapshotPending(rec.id), { force: true });
        this.ctx.log.info(
          { snapshotID: rec.id, ...stats, ms: Date.now() - t0 },
          "snapshot committed to the repository",
        );
      })
      .catch((err) =>
        this.ctx.log.warn(
          { err, snapshotID: rec.id },
          "snapshot not committed to the repository; retried at the next start",
        ),
      )
      .finally(async () => {
        // Committed, or failed (retried at the next start, announced again then).
        await this.ctx.repository.withdraw(rec.id).catch(() => undefined);
        if (this.commits.get(rec.id) === p) this.commits.delete(rec.id);
      });
    this.commits.set(rec.id, p);
  }

  private record(
    src: SandboxRecord,
    snapId: string,
    name: string | undefined,
    imageDir: string,
    sizeBytes: number,
  ): SnapshotRecord {
    return {
      id: snapId,
      ...(src.owner ? { owner: src.owner } : {}),
      names: [name ?? snapId],
      sandboxId: src.id,
      templateId: src.templateId,
      alias: src.alias,
      rootfs: src.rootfs,
      runtimeDir: src.runtimeDir,
      imageDir,
      envdToken: envdTokenOf(src),
      envVars: src.envVars,
      ...(src.network ? { network: src.network } : {}),
      allowInternet: src.allowInternet,
      ...(src.volumeMounts?.length ? { volumeMounts: src.volumeMounts.map((m) => ({ ...m })) } : {}),
      ...(src.boot ? { boot: src.boot } : {}),
      cpuCount: src.cpuCount,
      memoryMB: src.memoryMB,
      diskSizeMB: src.diskSizeMB,
      sizeBytes,
      createdAt: Date.now(),
      imageKey: this.ctx.checkpointKey,
    };
  }

  /**
   * A snapshot this node knows may have been deleted through another server sharing the
   * repository: its manifest decides. If the repository cannot be reached, the local copy is
   * used.
   */
  private async stillCommitted(snap: SnapshotRecord | undefined): Promise<SnapshotRecord | undefined> {
    if (!snap?.committed) return snap;
    const m = await this.ctx.repository.get(snap.id).then(
      (x) => x ?? null,
      () => undefined,
    );
    if (m !== null) return snap;
    this.ctx.log.info({ snapshotID: snap.id }, "snapshot was deleted from the repository elsewhere; forgetting it");
    this.byId.delete(snap.id);
    rmSync(snap.imageDir, { recursive: true, force: true });
    return undefined;
  }

  /**
   * A snapshot this node has not seen yet: another node sharing the repository committed it.
   * Looked up by ID (one manifest read), then by name in a listing taken after this call.
   */
  private async findRemote(ref: string, visible: Visible): Promise<SnapshotRecord | undefined> {
    const adopt = (m: Manifest | undefined) => {
      const local = m && this.ofManifest(m);
      if (local) this.byId.set(local.id, local);
      return local;
    };
    if (/^[A-Za-z0-9_.-]{1,128}$/.test(ref)) {
      const byId = adopt(await this.ctx.repository.get(ref).catch(() => undefined));
      if (byId) return byId;
    }
    const named = (await this.ctx.repository.listFresh().catch(() => [])).filter((m) => {
      const meta = snapshotMetaOf(m, this.reject);
      return meta?.names.includes(ref) && visible(meta.owner);
    });
    const latest = newest(named.flatMap((m) => this.ofManifest(m) ?? []));
    if (latest) return adopt(named.find((m) => m.id === latest.id));
    // Taken on another server a moment ago and still being committed: wait for it.
    const pending = (await this.ctx.repository.announced().catch(() => [])).find(
      (a) => a.id === ref || a.names.includes(ref),
    );
    if (pending) {
      this.ctx.log.info({ snapshotID: pending.id }, "waiting for another server's snapshot commit");
      return adopt(await this.ctx.repository.waitFor(pending.id, COMMIT_WAIT_MS));
    }
    return undefined;
  }

  /** A refused manifest is logged once per reason, and otherwise ignored. */
  private readonly rejected = new Set<string>();
  private readonly reject: RejectReport = (err) => {
    if (this.rejected.has(err.message)) return;
    this.rejected.add(err.message);
    this.ctx.log.error({ entry: err.entry }, `${err.message}; treated as unusable`);
  };

  /** A snapshot manifest's record as this node keeps it (undefined for other kinds). */
  private ofManifest(m: Manifest): SnapshotRecord | undefined {
    const meta = snapshotMetaOf(m, this.reject);
    if (!meta) return undefined;
    // An image from before image keys restores with its own /.aenv: only one of this node's.
    if (!meta.imageKey && !this.ctx.paths.isRuntimeDir(meta.runtimeDir)) {
      this.reject(new UntrustedManifestError(m.id, `runtimeDir ${meta.runtimeDir} is not this node's`));
      return undefined;
    }
    const { kind: _k, ...rec } = meta;
    return { ...rec, imageDir: this.ctx.paths.snapshot(m.id), committed: true };
  }
}

/** Which owners' snapshots a lookup may answer with (absent owner: the operator's). */
export type Visible = (owner: string | undefined) => boolean;
const all: Visible = () => true;

/** The most recently taken of some snapshots (a name's current build). */
function newest(snaps: SnapshotRecord[]): SnapshotRecord | undefined {
  return snaps.reduce<SnapshotRecord | undefined>((a, b) => (!a || b.createdAt > a.createdAt ? b : a), undefined);
}
