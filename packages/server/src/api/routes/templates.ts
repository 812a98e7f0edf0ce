import { ENVD_VERSION } from "@aenv/protocol";
import type { FastifyInstance } from "fastify";
import { ApiError } from "../../errors.js";
import type { Template, TemplateStore } from "../../storage/templates.js";
import { paginate } from "../list-filter.js";
import { ListQuery, TemplateIdParams } from "../schemas.js";

/** E2B `Template`: the fields the SDK and CLIs read, for templates on this node. */
function templateInfo(t: Template) {
  const created = t.createdAt ?? new Date(0).toISOString();
  return {
    templateID: t.id,
    buildID: `local-r${t.revision}`,
    cpuCount: t.cpuCount,
    memoryMB: t.memoryMB,
    diskSizeMB: t.diskSizeMB,
    public: false,
    aliases: [t.name],
    names: [t.name],
    createdAt: created,
    updatedAt: created,
    createdBy: null,
    lastSpawnedAt: null,
    spawnCount: 0,
    buildCount: 1,
    envdVersion: ENVD_VERSION,
    buildStatus: "ready",
  };
}

/** Read-only template listing; building templates is the template build API's job. */
export async function templateRoutes(app: FastifyInstance, opts: { templates: TemplateStore }): Promise<void> {
  const all = () => opts.templates.list().sort((a, b) => a.id.localeCompare(b.id));
  app.get("/templates", async () => all().map(templateInfo));
  app.get("/v2/templates", async (req, reply) => {
    const q = ListQuery.parse(req.query);
    return paginate(all(), q, (t) => void reply.header("x-next-token", t)).map(templateInfo);
  });
  app.get("/templates/:templateID", async (req) => {
    const { templateID } = TemplateIdParams.parse(req.params);
    const t = opts.templates.get(templateID);
    if (!t) throw new ApiError(404, `template '${templateID}' not found`);
    return { ...templateInfo(t), builds: [{ buildID: `local-r${t.revision}`, status: "ready" }] };
  });
  app.get("/templates/aliases/:alias", async (req) => {
    const { alias } = req.params as { alias: string };
    const t = opts.templates.get(alias);
    if (!t) throw new ApiError(404, `alias '${alias}' not found`);
    return { templateID: t.id, public: false };
  });
}
