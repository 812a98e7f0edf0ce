import type { IncomingHttpHeaders } from "node:http";
import { ConflictError, InvalidRequestError, NotFoundError, NotImplementedError } from "@aenv/edge/errors";
import { errorBody } from "@aenv/edge/http-errors";
import { keysetPage } from "@aenv/edge/keyset-page";
import { matchesMetadata, paginate, parseMetadataFilter, parseStates } from "@aenv/edge/list-filter";
import { tenantOf } from "@aenv/edge/tenancy";
import { ownerOf, owns, type Tenant } from "@aenv/edge/tenants";
import {
  AUTO_RESUME_HEADER,
  FORK_SPILL,
  type ForkResult,
  IDEMPOTENCY,
  idempotencyKeyOf,
  type SandboxesWithMetrics,
  type SandboxMetric,
  TOTAL_RUNNING_HEADER,
  TRAFFIC_PORT_HEADER,
  TRAFFIC_TOKEN_HEADER,
} from "@aenv/protocol";
import {
  BatchMetricsQuery,
  ColdSandbox,
  ConnectBody,
  ForkBody,
  ForkBodyV2,
  ListQuery,
  MetricsQuery,
  NetworkUpdate,
  NewSandbox,
  PauseBody,
  RefreshBody,
  SandboxIdParams,
  type SandboxOptions,
  SnapshotBody,
  SnapshotIdParams,
  SnapshotListQuery,
  TimeoutBody,
} from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { type NetworkSpec, validateNetworkSpec } from "../../network/policy.js";
import type { MetricSample } from "../../orchestrator/metrics.js";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";
import type { ResumeOptions } from "../../orchestrator/pause-kinds.js";
import { type BindingOf, checkRuleBindings } from "../../secrets/binding.js";
import type { OnDemandImages } from "../../templates/on-demand.js";
import type { LocalKeyLimits } from "../../tenancy/limits.js";
import {
  apiState,
  type SerializeContext,
  sandboxCreated,
  sandboxDetail,
  sandboxListed,
  snapshotInfo,
} from "../serialize.js";

export interface SandboxRoutesOptions {
  orch: Orchestrator;
  onDemand: OnDemandImages;
  ctx: SerializeContext;
  /** A secret of `owner`'s, to refuse rules that would send it to a host it is not bound to. */
  secretBinding: (name: string, owner: string | undefined) => ReturnType<BindingOf>;
  /** A node of its own enforces API keys' limits (behind gateways they do). */
  keyLimits?: LocalKeyLimits;
}

const body = (b: unknown) => (b === undefined || b === null ? {} : b);

/** E2B `SandboxMetric`: a sample with its ISO time beside the Unix one. */
const metricOf = (m: MetricSample): SandboxMetric => ({
  ...m,
  timestamp: new Date(m.timestampUnix * 1000).toISOString(),
});

/** A client's network settings, checked and normalised, secrets' bindings included. */
function networkSpec(raw: Parameters<typeof validateNetworkSpec>[0], bindingOf: BindingOf): NetworkSpec {
  const spec = validateNetworkSpec(raw);
  checkRuleBindings(spec.rules, bindingOf);
  return spec;
}

/** The E2B body fields every create shares, as the orchestrator takes them. */
function sandboxOptions(b: SandboxOptions, bindingOf: BindingOf) {
  // An empty tokens map asks for nothing (E2B: a non-empty map enables workload identity).
  if (Object.keys(b.iam?.tokens ?? {}).length > 0) {
    throw new NotImplementedError(
      "iam: workload identity tokens are not offered by this server: it is no JWT-SVID issuer (no signing keys, no OIDC discovery a cloud provider could trust)",
    );
  }
  return {
    timeoutS: b.timeout,
    metadata: b.metadata,
    envVars: b.envVars,
    allowInternetAccess: b.allow_internet_access ?? b.allowInternetAccess,
    ...(b.network ? { network: networkSpec(b.network, bindingOf) } : {}),
    autoPause: b.autoPause,
    autoResume: b.autoResume?.enabled,
  };
}

/**
 * A create's idempotency key (header or metadata) kept in its metadata, where the creator
 * looks for an earlier sandbox with the same key.
 */
function withIdempotencyKey<T extends { metadata?: Record<string, string> }>(b: T, headers: IncomingHttpHeaders): T {
  const { key, error } = idempotencyKeyOf(headers[IDEMPOTENCY.header], b.metadata);
  if (error) throw new InvalidRequestError(error);
  return key ? { ...b, metadata: { ...b.metadata, [IDEMPOTENCY.metadataKey]: key } } : b;
}

export async function sandboxRoutes(app: FastifyInstance, opts: SandboxRoutesOptions): Promise<void> {
  const { orch, ctx } = opts;
  /** `owner`'s secrets' bindings. */
  const bindings =
    (owner: string | undefined): BindingOf =>
    (name) =>
      opts.secretBinding(name, owner);
  /** Room in the caller's limits for `n` sandboxes more, held until `run` ends. */
  const withinLimits = async <T>(t: Tenant, n: number, run: () => Promise<T>, creates = true): Promise<T> => {
    const done = n > 0 ? opts.keyLimits?.admitCreate(t, n, { creates }) : undefined;
    try {
      return await run();
    } finally {
      done?.();
    }
  };

  const create = async (req: FastifyRequest) => {
    const t = tenantOf(req);
    const b = withIdempotencyKey(NewSandbox.parse(body(req.body)), req.headers);
    return withinLimits(t, 1, async () => {
      // A template named by an image reference the operator allows (images.on_demand): the
      // E2B SDKs pass the string as it is, so `Sandbox.create("registry/repo:tag")` starts it.
      const image = opts.onDemand.resolves(b.templateID) ? await opts.onDemand.template(b.templateID) : undefined;
      const rec = await orch.create({
        templateID: image?.id ?? b.templateID,
        requester: t,
        ...(image ? { cold: true } : {}),
        autoPauseMemory: b.autoPauseMemory,
        ...sandboxOptions(b, bindings(ownerOf(t).owner)),
        ...(b.volumeMounts ? { volumeMounts: b.volumeMounts } : {}),
      });
      return sandboxCreated(rec, ctx);
    });
  };
  app.post("/sandboxes", async (req, reply) => reply.status(201).send(await create(req)));
  app.post("/v2/sandboxes", async (req, reply) => reply.status(201).send(await create(req)));

  // Cold start: boot a sandbox straight from an image (pulled and unpacked on first use).
  app.post("/sandboxes-cold", async (req, reply) => {
    const t = tenantOf(req);
    const b = withIdempotencyKey(ColdSandbox.parse(body(req.body)), req.headers);
    // Before the pull: a refused size costs no download.
    orch.checkDiskSize(b.diskSizeMB);
    const rec = await withinLimits(t, 1, async () => {
      const tpl = await opts.onDemand.template(b.image);
      return orch.create({
        templateID: tpl.id,
        requester: t,
        cold: true,
        cpuCount: b.cpuCount,
        memoryMB: b.memoryMB,
        diskSizeMB: b.diskSizeMB,
        ...sandboxOptions(b, bindings(ownerOf(t).owner)),
      });
    });
    return reply.status(201).send(sandboxCreated(rec, ctx));
  });

  app.get("/sandboxes/:sandboxID", async (req) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    return sandboxDetail(orch.get(sandboxID), ctx, orch.placeOf(sandboxID));
  });

  app.get("/v2/sandboxes", async (req, reply) => {
    const q = ListQuery.parse(req.query);
    const meta = parseMetadataFilter(q.metadata);
    const states = parseStates(q.state);
    const after = q.startedAfter ? Date.parse(q.startedAfter) : undefined;
    if (after !== undefined && Number.isNaN(after)) throw new InvalidRequestError("startedAfter is not a date");
    const t = tenantOf(req);
    const items = orch
      .list()
      .filter((r) => owns(t, r.owner))
      .filter((r) => states.has(apiState(r)) && matchesMetadata(r, meta))
      .filter((r) => (after === undefined ? true : r.startedAt >= after))
      .filter((r) => (q.template ? r.templateId === q.template || r.alias === q.template : true));
    items.sort((a, b) => a.startedAt - b.startedAt || a.id.localeCompare(b.id));
    if ((q.order ?? "desc") === "desc") items.reverse();
    // E2B counts the running matches before pagination, and only when running ones were asked for.
    if (states.has("running")) {
      void reply.header(TOTAL_RUNNING_HEADER, String(items.filter((r) => apiState(r) === "running").length));
    }
    const page = keysetPage(
      items,
      q,
      (r) => ({ at: r.startedAt, id: r.id }),
      (t) => void reply.header("x-next-token", t),
    );
    return page.map((r) => sandboxListed(r, orch.placeOf(r.id)));
  });

  // v1 list: running sandboxes only, no pagination.
  app.get("/sandboxes", async (req) => {
    const q = ListQuery.parse(req.query);
    const meta = parseMetadataFilter(q.metadata);
    const t = tenantOf(req);
    return orch
      .list()
      .filter((r) => owns(t, r.owner) && apiState(r) === "running" && matchesMetadata(r, meta))
      .map((r) => sandboxListed(r, orch.placeOf(r.id)));
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

  /** The traffic behind a gateway's auto-resume, whose credentials the sandbox must accept. */
  const trafficOf = (req: FastifyRequest): Pick<ResumeOptions, "traffic"> => {
    const port = Number(req.headers[TRAFFIC_PORT_HEADER]);
    if (!Number.isInteger(port) || port < 1 || port > 65535) return {};
    const token = req.headers[TRAFFIC_TOKEN_HEADER];
    return { traffic: { port, ...(typeof token === "string" ? { token } : {}) } };
  };

  // connect: resume if paused (201), else extend the TTL (200). resume: the older SDKs' form.
  const connect = async (req: FastifyRequest, reply: FastifyReply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = ConnectBody.parse(body(req.body));
    // A cluster gateway moving a sandbox because traffic reached it: only if autoResume allows.
    const auto = req.headers[AUTO_RESUME_HEADER] === "1";
    // memory: false (E2B's onResume: 'reboot') boots a pause that kept memory from its disk.
    const memory = b.memory === false ? { memory: false } : {};
    const t = tenantOf(req);
    // A resume runs one more of the key's sandboxes; a connect to a running one does not.
    const paused = !orch.registry.has(sandboxID) || apiState(orch.get(sandboxID)) === "paused";
    const { rec, resumed } = await withinLimits(
      t,
      paused ? 1 : 0,
      () => orch.resume(sandboxID, b.timeout, { auto, requester: t, ...trafficOf(req), ...memory }),
      false,
    );
    return reply.status(resumed ? 201 : 200).send(sandboxCreated(rec, ctx));
  };
  app.post("/sandboxes/:sandboxID/connect", connect);
  app.post("/v2/sandboxes/:sandboxID/connect", connect);
  app.post("/sandboxes/:sandboxID/resume", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = ConnectBody.parse(body(req.body));
    // In a cluster a sandbox paused elsewhere is not known here yet: resume() takes it over.
    if (orch.registry.has(sandboxID) && apiState(orch.get(sandboxID)) !== "paused") {
      throw new ConflictError(`sandbox '${sandboxID}' is not paused`);
    }
    const t = tenantOf(req);
    const { rec } = await withinLimits(
      t,
      1,
      () => orch.resume(sandboxID, b.timeout, { requester: t, ...(b.memory === false ? { memory: false } : {}) }),
      false,
    );
    return reply.status(201).send(sandboxCreated(rec, ctx));
  });

  app.post("/sandboxes/:sandboxID/pause", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = PauseBody.parse(body(req.body));
    await orch.pause(sandboxID, { memory: b.memory });
    return reply.status(204).send();
  });

  app.post("/sandboxes/:sandboxID/snapshots", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = SnapshotBody.parse(body(req.body));
    return reply.status(201).send(snapshotInfo(await orch.snapshot(sandboxID, b.name)));
  });

  app.get("/snapshots", async (req, reply) => {
    const q = SnapshotListQuery.parse(req.query);
    const t = tenantOf(req);
    const all = (await orch.snapshots.list())
      .filter((s) => owns(t, s.owner))
      .filter((s) => (q.sandboxID ? s.sandboxId === q.sandboxID : true))
      .filter((s) => (q.name ? s.names.includes(q.name) : true));
    return paginate(all, q, (t) => void reply.header("x-next-token", t)).map(snapshotInfo);
  });

  app.get("/snapshots/:snapshotID", async (req) => {
    const { snapshotID } = SnapshotIdParams.parse(req.params);
    const t = tenantOf(req);
    const s = await orch.snapshots.find(snapshotID, { visible: (owner) => owns(t, owner) });
    if (!s) throw new NotFoundError(`snapshot '${snapshotID}' not found`);
    return snapshotInfo(s);
  });

  // Snapshots are templates to the SDK: deleteSnapshot() calls DELETE /templates/{id}.

  // v1 answers children the parent's time left when no timeout is given; v2 (E2B's newer
  // SDKs) the default sandbox timeout, and takes memory: false (filesystem-only children).
  const fork = async (req: FastifyRequest, reply: FastifyReply, v2: boolean): Promise<ForkResult[]> => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = v2 ? ForkBodyV2.parse(body(req.body)) : { ...ForkBody.parse(body(req.body)), memory: undefined };
    // A cluster gateway asks for the children that do not fit here as a snapshot it starts
    // elsewhere (named in a header: the body stays the list the SDK expects).
    const spill = req.headers[FORK_SPILL.request.header] === FORK_SPILL.request.value;
    const { children, spillSnapshot } = await withinLimits(tenantOf(req), b.count ?? 1, () =>
      orch.fork(sandboxID, b.count ?? 1, b.timeout, {
        spill,
        ...(b.memory === false ? { memory: false } : {}),
        defaultTimeout: v2,
      }),
    );
    if (spillSnapshot) void reply.header(FORK_SPILL.snapshotHeader, spillSnapshot.id);
    return children.map((r) =>
      "sandbox" in r ? { sandbox: sandboxCreated(r.sandbox, ctx) } : { error: errorBody(r.error) },
    );
  };
  app.post("/sandboxes/:sandboxID/fork", async (req, reply) => reply.status(201).send(await fork(req, reply, false)));
  app.post("/v2/sandboxes/:sandboxID/fork", async (req, reply) => reply.status(201).send(await fork(req, reply, true)));

  app.put("/sandboxes/:sandboxID/network", async (req, reply) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const b = NetworkUpdate.parse(body(req.body));
    // The sandbox's own key's secrets, whoever (it or the operator) sets its rules.
    const spec = networkSpec(b, bindings(orch.get(sandboxID).owner));
    await orch.updateNetwork(sandboxID, spec, b.allow_internet_access);
    return reply.status(204).send();
  });

  app.get("/sandboxes/:sandboxID/metrics", async (req) => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const q = MetricsQuery.parse(req.query);
    if (q.start !== undefined && q.end !== undefined && q.start > q.end) {
      throw new InvalidRequestError("metrics range: start is after end");
    }
    const ms = await orch.metrics(sandboxID, { start: q.start, end: q.end });
    return ms.map(metricOf);
  });

  // E2B's batch form: the latest sample of each running sandbox named. IDs this node does not
  // hold, or paused ones, are left out (E2B's answer is a map of running sandboxes), so a
  // gateway can ask each node for all of its own and merge the maps.
  app.get("/sandboxes/metrics", async (req): Promise<SandboxesWithMetrics> => {
    const { sandbox_ids: asked } = BatchMetricsQuery.parse(req.query);
    const t = tenantOf(req);
    // Another key's sandboxes are left out as IDs this node does not hold are.
    const ids = t.admin ? asked : asked.filter((id) => owns(t, orch.registry.get(id)?.rec.owner));
    const latest = await orch.latestMetrics(ids);
    return { sandboxes: Object.fromEntries([...latest].map(([id, m]) => [id, metricOf(m)])) };
  });
}
