import type { Readable } from "node:stream";
import { InvalidRequestError, NotFoundError } from "@aenv/edge/errors";
import { paginate } from "@aenv/edge/list-filter";
import { tenantOf } from "@aenv/edge/tenancy";
import { owns, type Tenant } from "@aenv/edge/tenants";
import { ENVD_VERSION, type TemplateUpdated } from "@aenv/protocol";
import { BuildLogsQuery, ListQuery, TemplateIdParams, TemplateUpdateBody } from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";
import type { Template, TemplateStore } from "../../state/template-catalog.js";
import type { TemplateBuilder } from "../../templates/builder.js";
import type { ContextFiles } from "../../templates/context-files.js";
import { BuildStart, BuildStatusQuery, TemplateRequest } from "../../templates/spec.js";

/** Every name a template answers to, its primary one first (E2B's `aliases` and `names`). */
function namesOf(t: Pick<Template, "name" | "aliases">): string[] {
  return [t.name, ...t.aliases];
}

/** E2B `Template`: the fields the SDK and CLIs read. */
function templateInfo(t: Template) {
  const created = t.createdAt ?? new Date(0).toISOString();
  return {
    templateID: t.id,
    buildID: t.buildId,
    cpuCount: t.cpuCount,
    memoryMB: t.memoryMB,
    diskSizeMB: t.diskSizeMB,
    public: t.public,
    aliases: namesOf(t),
    names: namesOf(t),
    createdAt: created,
    updatedAt: t.updatedAt ?? created,
    createdBy: null,
    lastSpawnedAt: null,
    spawnCount: 0,
    buildCount: t.buildCount,
    envdVersion: ENVD_VERSION,
    buildStatus: t.buildStatus,
    ...(t.fromImage ? { fromImage: t.fromImage, imageDigest: t.imageDigest } : {}),
    ...(t.fromTemplate ? { fromTemplate: t.fromTemplate } : {}),
    ...(t.startCmd ? { startCmd: t.startCmd } : {}),
    ...(t.readyCmd ? { readyCmd: t.readyCmd } : {}),
    tags: t.tags.map((x) => x.tag),
  };
}

const TagsBody = z.looseObject({ target: z.string().min(1).max(256), tags: z.array(z.string()).min(1).max(64) });
const UntagBody = z.looseObject({ name: z.string().min(1).max(256), tags: z.array(z.string()).min(1).max(64) });
const FilesParams = TemplateIdParams.extend({ hash: TemplateIdParams.shape.templateID });
const BuildParams = TemplateIdParams.extend({ buildID: TemplateIdParams.shape.templateID });

export interface TemplateRouteOptions {
  templates: TemplateStore;
  builder: TemplateBuilder;
  files: ContextFiles;
  orch: Orchestrator;
}

/** The E2B template API: catalog, builds (v2/v3), COPY context uploads, aliases. */
export async function templateRoutes(app: FastifyInstance, o: TemplateRouteOptions): Promise<void> {
  /** What a key sees: its own templates, the operator's and public ones. */
  const visibleTo = (t: Tenant) => (x: Template) => !x.owner || x.public || owns(t, x.owner);
  const all = (req: FastifyRequest) =>
    o.templates
      .list()
      .filter(visibleTo(tenantOf(req)))
      .sort((a, b) => a.id.localeCompare(b.id));
  /** A template the caller may change (the hook has checked path parameters; bodies name them too). */
  const mustOwn = (req: FastifyRequest, ref: string): Template => {
    const t = mustGet(ref);
    if (!owns(tenantOf(req), t.owner)) throw new NotFoundError(`template '${ref}' not found`);
    return t;
  };
  const mustGet = (ref: string) => {
    const t = o.templates.get(ref);
    if (!t) throw new NotFoundError(`template '${ref}' not found`);
    return t;
  };

  app.get("/templates", async (req) => all(req).map(templateInfo));
  app.get("/v2/templates", async (req, reply) => {
    const q = ListQuery.parse(req.query);
    return paginate(all(req), q, (t) => void reply.header("x-next-token", t)).map(templateInfo);
  });
  app.get("/templates/:templateID", async (req) => {
    const { templateID } = TemplateIdParams.parse(req.params);
    const t = mustGet(templateID);
    const builds = o.builder.recordsOf(t).map((b) => ({
      buildID: b.buildID,
      status: b.status,
      createdAt: b.startedAt,
      updatedAt: b.finishedAt ?? b.startedAt,
      finishedAt: b.finishedAt ?? null,
      cpuCount: t.cpuCount,
      memoryMB: t.memoryMB,
      envdVersion: ENVD_VERSION,
    }));
    return { ...templateInfo(t), builds };
  });
  // E2B's CLI publishes a template with these: v1 answers 200 without a body, v2 its names.
  const update = (req: { params: unknown; body: unknown }): Template => {
    const { templateID } = TemplateIdParams.parse(req.params);
    const b = TemplateUpdateBody.parse(req.body ?? {});
    // The template as it is now (a `name:tag` ref would name an older build's view).
    const named = mustGet(templateID);
    const t = o.templates.get(named.id) ?? named;
    return b.public === undefined ? t : o.templates.save({ ...t, public: b.public });
  };
  app.patch("/templates/:templateID", async (req, reply) => {
    update(req);
    return reply.status(200).send();
  });
  app.patch("/v2/templates/:templateID", async (req): Promise<TemplateUpdated> => ({ names: namesOf(update(req)) }));

  app.get("/templates/aliases/:alias", async (req) => {
    const { alias } = req.params as { alias: string };
    const t = mustGet(alias);
    return { templateID: t.id, public: t.public };
  });

  const request = async (req: FastifyRequest, reply: { status(n: number): { send(b: unknown): unknown } }) => {
    const { template: t, tags } = o.builder.request(TemplateRequest.parse(req.body ?? {}), tenantOf(req));
    return reply.status(202).send({
      templateID: t.id,
      buildID: t.buildId,
      public: t.public,
      names: namesOf(t),
      aliases: namesOf(t),
      tags,
    });
  };
  app.post("/v3/templates", request);
  app.post("/v2/templates", request);

  // 201, as E2B's spec says: the Python SDK accepts nothing else ("Failed to get file upload link").
  app.get("/templates/:templateID/files/:hash", async (req, reply) => {
    const { templateID, hash } = FilesParams.parse(req.params);
    // A link to write into a build's context: the template's own key only, even if it is shared.
    const t = mustOwn(req, templateID);
    return reply.status(201).send(o.files.link(t.id, hash, `${req.protocol}://${req.headers.host}`));
  });

  // The SDK PUTs COPY contexts to the signed link without an API key, like a presigned URL.
  await app.register(async (upload) => {
    upload.removeAllContentTypeParsers();
    upload.addContentTypeParser("*", (_req, payload, done) => done(null, payload));
    upload.put("/templates/:templateID/files/:hash", { config: { public: true } }, async (req, reply) => {
      const { templateID, hash } = FilesParams.parse(req.params);
      const q = req.query as { exp?: string; sig?: string };
      o.files.verify(templateID, hash, q.exp, q.sig);
      const len = req.headers["content-length"] ? Number(req.headers["content-length"]) : undefined;
      const stream = (req.body as Readable | undefined) ?? req.raw;
      // Under the template the signed link names: no other template's build ever reads it.
      await o.files.store(templateID, hash, stream, len);
      return reply.status(200).send();
    });
  });

  app.post("/v2/templates/:templateID/builds/:buildID", async (req, reply) => {
    const { templateID, buildID } = BuildParams.parse(req.params);
    const spec = BuildStart.parse(req.body ?? {});
    // A build starts from a template the caller may start sandboxes of, as a create would;
    // another key's is answered as a missing one is (the builder's 400).
    const from = spec.fromTemplate ? o.templates.get(spec.fromTemplate) : undefined;
    if (from && !visibleTo(tenantOf(req))(from)) {
      throw new InvalidRequestError(`base template '${spec.fromTemplate}' not found`);
    }
    o.builder.start(templateID, buildID, spec);
    return reply.status(202).send();
  });
  app.get("/templates/:templateID/builds/:buildID/status", async (req) => {
    const { templateID, buildID } = BuildParams.parse(req.params);
    const q = BuildStatusQuery.parse(req.query);
    return o.builder.status(templateID, buildID, q.logsOffset ?? 0, q.limit);
  });

  app.get("/templates/:templateID/builds/:buildID/logs", async (req) => {
    const { templateID, buildID } = BuildParams.parse(req.params);
    return o.builder.logs(templateID, buildID, BuildLogsQuery.parse(req.query));
  });

  app.post("/templates/tags", async (req, reply) => {
    const b = TagsBody.parse(req.body ?? {});
    mustOwn(req, b.target);
    return reply.status(201).send(o.builder.assignTags(b.target, b.tags));
  });
  app.delete("/templates/tags", async (req, reply) => {
    const b = UntagBody.parse(req.body ?? {});
    mustOwn(req, b.name);
    o.builder.removeTags(b.name, b.tags);
    return reply.status(204).send();
  });
  app.get("/templates/:templateID/tags", async (req) => {
    const { templateID } = TemplateIdParams.parse(req.params);
    return mustGet(templateID).tags.map((x) => ({ tag: x.tag, buildID: x.buildId, createdAt: x.createdAt }));
  });

  // Snapshots and templates share one namespace (E2B deletes both through this route).
  app.delete("/templates/:templateID", async (req, reply) => {
    const { templateID } = TemplateIdParams.parse(req.params);
    // A snapshot here, or one another server sharing the repository committed.
    // A template's name is never a snapshot's (see Sources.resolve): the template goes.
    const t = tenantOf(req);
    const snapshot = o.templates.get(templateID)
      ? undefined
      : await o.orch.snapshots.find(templateID, { visible: (owner) => owns(t, owner) });
    if (snapshot) await o.orch.snapshots.delete(snapshot.id);
    else await o.builder.delete(templateID);
    return reply.status(204).send();
  });
}
