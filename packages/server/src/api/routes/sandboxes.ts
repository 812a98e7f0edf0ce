import type { FastifyInstance } from "fastify";
import { ApiError } from "../../errors.js";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";
import { decodeCursor, encodeCursor, matchesMetadata, parseMetadataFilter, parseStates } from "../list-filter.js";
import {
  ConnectBody,
  ListQuery,
  MetricsQuery,
  NewSandbox,
  RefreshBody,
  SandboxIdParams,
  TimeoutBody,
} from "../schemas.js";
import { type SerializeContext, sandboxCreated, sandboxDetail, sandboxListed } from "../serialize.js";

export interface SandboxRoutesOptions {
  orch: Orchestrator;
  ctx: SerializeContext;
}

const body = (b: unknown) => (b === undefined || b === null ? {} : b);

export async function sandboxRoutes(app: FastifyInstance, opts: SandboxRoutesOptions): Promise<void> {
  const { orch, ctx } = opts;

  const create = async (raw: unknown) => {
    const b = NewSandbox.parse(body(raw));
    const rec = await orch.create({
      templateID: b.templateID,
      timeoutS: b.timeout,
      metadata: b.metadata,
      envVars: b.envVars,
      allowInternetAccess: b.allow_internet_access ?? b.allowInternetAccess,
      autoPause: b.autoPause,
      autoResume: b.autoResume?.enabled,
    });
    return sandboxCreated(rec, ctx);
  };
  app.post("/sandboxes", async (req, reply) => reply.status(201).send(await create(req.body)));
  app.post("/v2/sandboxes", async (req, reply) => reply.status(201).send(await create(req.body)));

  app.get("/sandboxes/:sandboxID", async (req) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    return sandboxDetail(orch.get(sandboxID), ctx);
  });

  app.get("/v2/sandboxes", async (req, reply) => {
    const q = ListQuery.parse(req.query);
    const meta = parseMetadataFilter(q.metadata);
    const states = parseStates(q.state);
    const after = q.startedAfter ? Date.parse(q.startedAfter) : undefined;
    if (after !== undefined && Number.isNaN(after)) throw new ApiError(400, "startedAfter is not a date");
    let items = orch
      .list()
      .filter((r) => states.has(r.state) && matchesMetadata(r, meta))
      .filter((r) => (after === undefined ? true : r.startedAt > after))
      .filter((r) => (q.template ? r.templateId === q.template || r.alias === q.template : true));
    items.sort((a, b) => a.startedAt - b.startedAt || a.id.localeCompare(b.id));
    if ((q.order ?? "desc") === "desc") items.reverse();
    const offset = decodeCursor(q.nextToken);
    const limit = q.limit ?? 100;
    const page = items.slice(offset, offset + limit);
    if (offset + limit < items.length) void reply.header("x-next-token", encodeCursor(offset + limit));
    items = page;
    return items.map(sandboxListed);
  });

  // v1 list: running sandboxes only, no pagination.
  app.get("/sandboxes", async (req) => {
    const q = ListQuery.parse(req.query);
    const meta = parseMetadataFilter(q.metadata);
    return orch
      .list()
      .filter((r) => r.state === "running" && matchesMetadata(r, meta))
      .map(sandboxListed);
  });

  app.delete("/sandboxes/:sandboxID", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    await orch.kill(sandboxID);
    return reply.status(204).send();
  });

  app.post("/sandboxes/:sandboxID/timeout", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = TimeoutBody.parse(body(req.body));
    orch.setTimeout(sandboxID, b.timeout);
    return reply.status(204).send();
  });

  app.post("/sandboxes/:sandboxID/refreshes", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = RefreshBody.parse(body(req.body));
    orch.extend(sandboxID, b.duration ?? 60);
    return reply.status(204).send();
  });

  const connect = async (id: string, raw: unknown) => {
    const b = ConnectBody.parse(body(raw));
    return sandboxCreated(orch.extend(id, b.timeout), ctx);
  };
  app.post("/sandboxes/:sandboxID/connect", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    return reply.status(200).send(await connect(sandboxID, req.body));
  });
  app.post("/v2/sandboxes/:sandboxID/connect", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    return reply.status(200).send(await connect(sandboxID, req.body));
  });

  app.get("/sandboxes/:sandboxID/metrics", async (req) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    MetricsQuery.parse(req.query);
    const ms = await orch.metrics(sandboxID);
    return ms.map((m) => ({ ...m, timestamp: new Date(m.timestampUnix * 1000).toISOString() }));
  });
}
