import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { badRequest, ConflictError, conflict, notFound } from "@aenv/edge/errors";
import { ownerOf, owns, type Requester } from "@aenv/edge/tenants";
import type { BuildLogs, BuildStatus } from "@aenv/protocol";
import type { BuildLogsQuery } from "@aenv/protocol/rest";
import type { Logger } from "pino";
import { envdProcess } from "../orchestrator/envd-process.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import { newTemplateId } from "../state/ids.js";
import {
  DEFAULT_PATH,
  type Template,
  type TemplateInput,
  type TemplateStore,
  usable,
  validTemplateName,
} from "../state/template-catalog.js";
import { isHostPathSource } from "../storage/images/reference.js";
import { publishTree, writeFileDurableSync } from "../util/durable-write.js";
import { appendLog, type BuildRecord, type LogEntry, selectBuildLogs } from "./build-log.js";
import { buildOwnerAlive, claimBuild } from "./build-owner.js";
import { baseTree, type ImageProvider, must, runStep, STAGING_MOUNT, StepFailure, stageFiles } from "./build-steps.js";
import type { ContextFiles } from "./context-files.js";
import { inSandbox } from "./in-sandbox.js";
import { checkRegistryAccess } from "./registry-access.js";
import type { BuildStart, TemplateRequest } from "./spec.js";
import { validateSteps } from "./spec.js";
import type { TemplateSync } from "./sync.js";

const TAG_RE = /^[A-Za-z0-9_.-]{1,128}$/;
/**
 * Template builds (E2B's v2/v3 template API): a base tree from an image or another template,
 * steps run inside a sandbox of that tree (writes land in the new rootfs), then a warm image
 * with the start command running. Builds run one at a time.
 */
export class TemplateBuilder {
  private readonly builds = new Map<string, BuildRecord>();
  private queue: Promise<unknown> = Promise.resolve();
  private closing = false;

  constructor(
    private readonly d: {
      templates: TemplateStore;
      orch: Orchestrator;
      files: ContextFiles;
      images: ImageProvider;
      /** Commits built templates to the repository (absent: they stay on this node). */
      sync?: TemplateSync;
      /** API callers may build from host paths (oci:, *-archive:); see images.allow_host_sources. */
      allowHostImageSources: boolean;
      /** A build still running after this stops holding up the queue behind it (default 1 h). */
      buildTimeoutMs?: number;
      log: Logger;
    },
  ) {
    this.failInterrupted();
  }

  /**
   * Builds a server left `waiting` or `building` when it stopped (a crash, a kill) are failed
   * at start, so the template is not stuck: it can be rebuilt or deleted. The templates dir
   * may be shared by servers on one host, so a build whose owning process still runs is left.
   */
  private failInterrupted(): void {
    for (const t of this.d.templates.list()) {
      if (t.buildStatus !== "building" && t.buildStatus !== "waiting") continue;
      if (buildOwnerAlive(t.dir)) continue;
      const reason = { message: "interrupted: the server stopped during this build; build it again" };
      this.d.templates.save({ ...t, buildStatus: "error", reason });
      const rec = this.loadRecord(t, t.buildId);
      if (rec && (rec.status === "building" || rec.status === "waiting")) {
        this.persist(t, { ...rec, status: "error", reason, finishedAt: new Date().toISOString() });
      }
      this.d.log.warn({ template: t.id, build: t.buildId }, "template build interrupted by a restart: marked failed");
    }
  }

  /** POST /v3/templates: registers a build; an existing name gets a new build of its template. */
  request(req: TemplateRequest, requester?: Requester): { template: Template; tags: string[] } {
    const raw = req.name ?? req.alias;
    if (!raw) throw badRequest("name is required");
    const [name, tag] = raw.split(":", 2) as [string, string | undefined];
    if (!validTemplateName(name))
      throw badRequest(`invalid template name '${name}': use letters, digits, '_', '-', '.'`);
    if (this.d.orch.snapshots.findLocal(name)) throw conflict(`name '${name}' is taken by a snapshot`);
    const tags = [...new Set([...(req.tags ?? []), ...(tag ? [tag] : [])])];
    for (const x of tags) if (!TAG_RE.test(x)) throw badRequest(`invalid tag '${x}'`);
    const existing = this.d.templates.get(name);
    // Names are one namespace: another API key's template (or the operator's) is not rebuilt.
    if (existing && requester && !owns(requester, existing.owner)) throw conflict(`name '${name}' is taken`);
    if (existing && (existing.buildStatus === "building" || this.isQueued(existing))) {
      throw conflict(`template '${name}' has a build in progress`);
    }
    const buildId = randomUUID();
    // Tags on the build being replaced keep starting it.
    if (existing?.buildStatus === "ready" && existing.tags.some((x) => x.buildId === existing.buildId)) {
      this.d.templates.recordBuild(existing);
    }
    const base: TemplateInput = existing ?? {
      id: newTemplateId(),
      name,
      revision: 0,
      rootfsDir: "rootfs-r0",
      user: "user",
      workdir: "/home/user",
      env: {},
      cpuCount: 2,
      memoryMB: 1024,
      diskSizeMB: 2048,
      buildId,
      buildStatus: "waiting",
      buildCount: 0,
      createdAt: new Date().toISOString(),
      ...(requester ? ownerOf(requester) : {}),
    };
    // E2B's minFreeDiskMb: free space the template's sandboxes start with. Their writable layer
    // is the whole disk here (the tree is not counted), so it is that layer's size, in whole
    // GiB (disks are formatted ahead per size), never shrunk.
    const diskSizeMB =
      req.minFreeDiskMb === undefined
        ? base.diskSizeMB
        : Math.max(base.diskSizeMB ?? 2048, Math.ceil(req.minFreeDiskMb / 1024) * 1024);
    if (diskSizeMB !== base.diskSizeMB) this.d.orch.checkDiskSize(diskSizeMB);
    const now = new Date().toISOString();
    const t = this.d.templates.save({
      ...base,
      cpuCount: req.cpuCount ?? base.cpuCount,
      memoryMB: req.memoryMB ?? base.memoryMB,
      diskSizeMB,
      buildId,
      buildStatus: "waiting",
      reason: undefined,
      tags: [
        ...(base.tags ?? []).filter((x) => !tags.includes(x.tag)),
        ...tags.map((tag) => ({ tag, buildId, createdAt: now })),
      ],
    });
    this.builds.set(buildId, {
      templateID: t.id,
      buildID: buildId,
      status: "waiting",
      logs: [],
      startedAt: new Date().toISOString(),
    });
    claimBuild(t.dir);
    return { template: t, tags };
  }

  private isQueued(t: Template): boolean {
    const b = this.builds.get(t.buildId);
    return b?.status === "building";
  }

  /**
   * POST /v2/templates/{id}/builds/{buildID}: validates, then builds in the background.
   * The returned promise settles when the build has finished (either way).
   */
  start(templateId: string, buildId: string, spec: BuildStart, opts: { warm?: boolean } = {}): Promise<void> {
    const t = this.mustGet(templateId);
    if (t.buildId !== buildId) throw notFound(`build '${buildId}' of template '${templateId}' not found`);
    const b = this.builds.get(buildId);
    if (b?.status !== "waiting") throw conflict(`build '${buildId}' was already started`);
    if (spec.fromImage && spec.fromTemplate) throw badRequest("give fromImage or fromTemplate, not both");
    if (spec.fromImage) this.checkSource(spec.fromImage);
    if (spec.fromImageRegistry && !spec.fromImage) throw badRequest("fromImageRegistry is for a fromImage build");
    // Refused now (400), not as a failed build: credentials this server cannot use.
    checkRegistryAccess(spec.fromImageRegistry);
    const bad = validateSteps(spec.steps);
    if (bad) throw badRequest(bad);
    for (const [i, s] of spec.steps.entries()) {
      if (s.filesHash && !this.d.files.has(t.id, s.filesHash)) {
        throw badRequest(`step ${i + 1} (${s.type}): files ${s.filesHash} were not uploaded`);
      }
    }
    if (spec.fromTemplate || !spec.fromImage) {
      const from = this.d.templates.get(spec.fromTemplate ?? "base");
      if (!from || !usable(from)) throw badRequest(`base template '${spec.fromTemplate ?? "base"}' not found`);
    }
    b.status = "building";
    this.d.templates.save({ ...t, buildStatus: "building" });
    // Started by a route that does not wait for it: a failure past run()'s own handling (the
    // disk full while recording it) is logged, never an unhandled rejection.
    const run = () =>
      this.run(t.id, b, spec, opts.warm ?? true).catch((err) => {
        b.status = "error";
        this.d.log.error({ err, template: t.id, build: b.buildID }, "template build failed unexpectedly");
      });
    const p = this.queue.then(run, run);
    // Builds run one at a time, but a stuck one (a stalled step) must not block every later
    // build and cold start: after the timeout the next one starts beside it.
    const limit = this.d.buildTimeoutMs ?? 3600_000;
    let timer: NodeJS.Timeout | undefined;
    const released = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        if (b.status === "building") {
          this.d.log.warn({ template: t.id, build: b.buildID, ms: limit }, "build over its time; next builds go ahead");
          appendLog(
            b,
            "warn",
            `build still running after ${Math.round(limit / 1000)} s; later builds no longer wait for it`,
          );
        }
        resolve();
      }, limit);
      timer.unref();
    });
    this.queue = Promise.race([p.finally(() => clearTimeout(timer)), released]);
    return p;
  }

  /** Host-path sources read host files: refused to API callers unless the operator allows them. */
  private checkSource(ref: string): void {
    if (isHostPathSource(ref) && !this.d.allowHostImageSources) {
      throw badRequest(
        `image '${ref}' names a path on the server's host; only registry images are accepted here ` +
          "(an operator may allow host paths with images.allow_host_sources / AENV_ALLOW_HOST_IMAGE_SOURCES, " +
          "or import them with aenv-server import-template)",
      );
    }
  }

  status(templateId: string, buildId: string, offset = 0, limit = 1000): BuildStatus {
    const b = this.record(templateId, buildId);
    const entries = b.logs.slice(offset, offset + limit);
    return {
      templateID: b.templateID,
      buildID: b.buildID,
      status: b.status,
      logEntries: entries,
      logs: entries.map((e) => `[${e.timestamp}] ${e.message}`),
      ...(b.reason
        ? { reason: { ...b.reason, logEntries: b.logs.filter((e) => e.level === "error").slice(-20) } }
        : {}),
    };
  }

  /** GET /templates/{id}/builds/{buildID}/logs: the same log as status(), filtered E2B's way. */
  logs(templateId: string, buildId: string, q: BuildLogsQuery): BuildLogs {
    return { logs: selectBuildLogs(this.record(templateId, buildId).logs, q) };
  }

  /** A build of a template, running here or recorded on disk. */
  private record(templateId: string, buildId: string): BuildRecord {
    const t = this.mustGet(templateId);
    const b = this.builds.get(buildId) ?? this.loadRecord(t, buildId);
    if (!b || b.templateID !== t.id) throw notFound(`build '${buildId}' of template '${templateId}' not found`);
    return b;
  }

  /** Builds of one template, newest last (GET /templates/{id}). */
  recordsOf(t: Template): BuildRecord[] {
    const b = this.builds.get(t.buildId) ?? this.loadRecord(t, t.buildId);
    return b ? [b] : [];
  }

  /** The template as it is now, by ID, name or `name:tag` (never an older build's view). */
  private mustGet(ref: string): Template {
    const found = this.d.templates.get(ref);
    const t = found ? this.d.templates.get(found.id) : undefined;
    if (!t) throw notFound(`template '${ref}' not found`);
    return t;
  }

  private recordPath(t: Template, buildId: string): string {
    return join(t.dir, "builds", `${buildId.replace(/[^A-Za-z0-9-]/g, "")}.json`);
  }

  private loadRecord(t: Template, buildId: string): BuildRecord | undefined {
    try {
      return JSON.parse(readFileSync(this.recordPath(t, buildId), "utf8")) as BuildRecord;
    } catch {
      if (t.buildId !== buildId) return undefined;
      // Builds from before a restart that left no record (e.g. the base template).
      const status = t.buildStatus === "building" || t.buildStatus === "waiting" ? "error" : t.buildStatus;
      return {
        templateID: t.id,
        buildID: buildId,
        status,
        logs: [],
        startedAt: t.createdAt ?? new Date(0).toISOString(),
        ...(status === "error" ? { reason: t.reason ?? { message: "build interrupted by a server restart" } } : {}),
      };
    }
  }

  private persist(t: Template, b: BuildRecord): void {
    if (!existsSync(join(t.dir, "template.json"))) return; // deleted meanwhile
    mkdirSync(join(t.dir, "builds"), { recursive: true });
    const file = this.recordPath(t, b.buildID);
    writeFileDurableSync(file, JSON.stringify(b));
  }

  // ---------------------------------------------------------------- the build

  private async run(templateId: string, b: BuildRecord, spec: BuildStart, warm: boolean): Promise<void> {
    const log = (level: LogEntry["level"], message: string, step?: string) => appendLog(b, level, message, step);
    let t = this.mustGet(templateId);
    const rev = t.revision + 1;
    const rootfsDir = `rootfs-r${rev}`;
    const tmpRoot = join(t.dir, `${rootfsDir}.tmp`);
    const staging = join(t.dir, `.staging-${b.buildID}`);
    let sandbox: { ip: string; close(): Promise<void> } | undefined;
    const t0 = Date.now();
    log("info", `Building template ${t.name} (${t.id}), build ${b.buildID}`);
    try {
      if (this.closing) throw new StepFailure("server is shutting down", "base");
      rmSync(tmpRoot, { recursive: true, force: true });
      const ctx = await baseTree(this.d, spec, tmpRoot, (m) => log("info", m, "base")).catch((err: Error) => {
        throw new StepFailure(err.message, "base");
      });
      let user: string;
      let workdir: string;
      if (!warm && spec.steps.length === 0) {
        // An image as it is (cold starts): nothing to run, so no build sandbox; it runs as the
        // image's user, root by default, as a container runtime would.
        user = ctx.userSet ?? "root";
        workdir = ctx.workdirSet ?? (user === "root" ? "/root" : `/home/${user}`);
      } else {
        await stageFiles(this.d.files, t.id, spec.steps, staging);
        sandbox = await this.d.orch.buildSandbox({
          rootfs: tmpRoot,
          cpuCount: t.cpuCount,
          memoryMB: t.memoryMB,
          mounts: { [STAGING_MOUNT]: staging },
        });
        const ip = sandbox.ip;
        ctx.bash = (await envdProcess(ip, inSandbox.exists("/bin/bash"))).exitCode === 0;
        for (const [i, step] of spec.steps.entries()) {
          await runStep(ip, i, step, ctx, log);
        }
        // finalize: the account and folder sandboxes start in, then the tree is the template's.
        user = ctx.userSet ?? (ctx.user !== "root" ? ctx.user : "user");
        if (user !== "root") await must(ip, inSandbox.ensureUser(user), "finalize", log);
        workdir = ctx.workdirSet ?? (user === "root" ? "/root" : `/home/${user}`);
        await must(ip, inSandbox.mkdir(workdir), "finalize", log);
        await sandbox.close();
        sandbox = undefined;
      }
      rmSync(join(tmpRoot, STAGING_MOUNT.slice(1)), { recursive: true, force: true });
      rmSync(join(t.dir, rootfsDir), { recursive: true, force: true });
      await publishTree(tmpRoot, join(t.dir, rootfsDir));
      t = this.d.templates.save({
        ...this.mustGet(templateId),
        revision: rev,
        rootfsDir,
        env: { PATH: DEFAULT_PATH, ...ctx.env },
        user,
        workdir,
        startCmd: spec.startCmd || ctx.startCmd,
        readyCmd: spec.readyCmd || (spec.startCmd ? undefined : ctx.readyCmd),
        fromImage: spec.fromImage,
        fromTemplate: spec.fromImage ? undefined : (spec.fromTemplate ?? "base"),
        imageDigest: ctx.imageDigest,
        buildStatus: "building",
        warm,
      });
      if (warm) {
        log("info", "Taking the warm snapshot (start command running, ready command passed)", "finalize");
        await this.d.orch.warmImages
          .ensure(t, (m) => log("info", m, "finalize"))
          .catch((err: Error) => {
            throw new StepFailure(`start/ready command failed: ${err.message}`, "finalize");
          });
      }
      t = this.d.templates.save({ ...t, buildStatus: "ready", buildCount: t.buildCount + 1, reason: undefined });
      b.status = "ready";
      if (this.d.sync && warm) this.commitInBackground(t);
      log("info", `Build finished in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    } catch (err) {
      const step = err instanceof StepFailure ? err.step : "finalize";
      const message = (err as Error).message;
      b.reason = { message, step };
      this.d.log.warn({ template: templateId, build: b.buildID, step, err: message }, "template build failed");
      const cur = this.d.templates.get(templateId);
      if (cur) t = this.d.templates.save({ ...cur, buildStatus: "error", reason: b.reason });
      b.status = "error";
      log("error", `Build failed: ${message}`, step);
      if (sandbox) await sandbox.close().catch(() => {});
      rmSync(tmpRoot, { recursive: true, force: true });
    } finally {
      rmSync(staging, { recursive: true, force: true });
      b.finishedAt = new Date().toISOString();
      this.persist(t, b);
    }
  }

  private readonly commits = new Set<Promise<void>>();

  /** Other servers can use the template once committed; the build does not wait for it. */
  private commitInBackground(t: Template): void {
    const p = (this.d.sync as TemplateSync)
      .commit(t)
      .catch((err) => this.d.log.warn({ err, template: t.id }, "template not committed to the repository"))
      .finally(() => this.commits.delete(p));
    this.commits.add(p);
  }

  /**
   * POST /templates/tags: names a build with more tags. The target is `name` (the current
   * build) or `name:tag` (the build that tag names, possibly an older one).
   */
  assignTags(target: string, tags: string[]): { buildID: string; tags: string[] } {
    const build = this.d.templates.get(target);
    if (!build) throw notFound(`template '${target}' not found`);
    const t = this.mustGet(build.id);
    for (const tag of tags) if (!TAG_RE.test(tag)) throw badRequest(`invalid tag '${tag}'`);
    const now = new Date().toISOString();
    this.d.templates.save({
      ...t,
      tags: [
        ...t.tags.filter((x) => !tags.includes(x.tag)),
        ...tags.map((tag) => ({ tag, buildId: build.buildId, createdAt: now })),
      ],
    });
    return { buildID: build.buildId, tags };
  }

  /** DELETE /templates/tags. */
  removeTags(name: string, tags: string[]): void {
    const t = this.mustGet(name);
    this.d.templates.save({ ...t, tags: t.tags.filter((x) => !tags.includes(x.tag)) });
  }

  /** DELETE /templates/{id}: the catalog entry, its tree and its warm images. */
  async delete(ref: string): Promise<void> {
    const t = this.mustGet(ref);
    const check = () => {
      if (t.buildStatus === "building") throw conflict(`template '${ref}' is being built`);
      if (this.d.orch.templateInUse(t.id)) {
        throw new ConflictError(`template '${ref}' is used by sandboxes or snapshots; remove them first`);
      }
    };
    check();
    // The warm pool may be restoring from the tree: it is emptied first, and the checks are
    // made again after that wait, then the tree goes without another await.
    await this.d.orch.pool.forget(t.id);
    check();
    this.d.orch.warmImages.forget(t.id);
    this.d.templates.remove(t.id);
    void this.d.sync
      ?.remove(t.id)
      .catch((err) => this.d.log.warn({ err, template: t.id }, "template manifests not removed"));
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.queue.catch(() => {});
    await Promise.all(this.commits);
  }
}
