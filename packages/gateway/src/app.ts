import type { IncomingMessage, ServerResponse } from "node:http";
import { apiKeyRoutes } from "@aenv/edge/api-key-routes";
import { keys, type NodeInfo } from "@aenv/edge/cluster-keys";
import { buildEdge } from "@aenv/edge/edge";
import { InvalidRequestError, KeyLimitError } from "@aenv/edge/errors";
import { errorBody, errorBodyOf, NO_API_KEY, retryAfterOf, statusOf, zodMessage } from "@aenv/edge/http-errors";
import type { HttpLimits } from "@aenv/edge/http-limits";
import { registerKeySandboxes } from "@aenv/edge/key-metrics";
import { decodeKeyCursor } from "@aenv/edge/keyset-page";
import { decodeCursor, encodeCursor, parseStates } from "@aenv/edge/list-filter";
import { resolveTarget, targetProblem } from "@aenv/edge/proxy-target";
import { RedisRecordStore } from "@aenv/edge/record-store";
import { isSignedFiles } from "@aenv/edge/signed-files";
import { endWithError } from "@aenv/edge/socket-error";
import { teamsOf } from "@aenv/edge/teams";
import { keyOf, tenantOf, tenantOfHeaders } from "@aenv/edge/tenancy";
import { type ApiKeyRecord, type KeyUse, Tenants } from "@aenv/edge/tenants";
import { ERROR_CODES, IDEMPOTENCY, idempotencyKeyOf, PARTIAL_HEADER, TOTAL_RUNNING_HEADER } from "@aenv/protocol";
import { WebhookDeliveriesQuery } from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { BATCH_METRICS_PATH, batchMetrics } from "./batch-metrics.js";
import { ClusterView, type KnownRoutes, StateUnavailableError } from "./cluster-view.js";
import { askEveryNode } from "./every-node.js";
import { call, forward, forwardUpgrade, sendError, sendErrorOf } from "./forward.js";
import { nodeHeaders, parseJson, readBody, relayReply } from "./http-util.js";
import { ClusterKeyLimits, forkCount, keyHolds } from "./key-limits.js";
import { clusterPage, type ListedSandbox } from "./list-merge.js";
import { registerGateway } from "./metrics.js";
import { signNodeRequestsWith } from "./node-proof.js";
import { createdId, failureStatus, SandboxCalls, trafficOf } from "./sandbox-calls.js";
import { maxTeamMetrics, teamMetrics } from "./team-metrics.js";

export interface GatewayOptions {
  redis: Redis;
  apiKey: string;
  log: Logger;
  /** Timeouts and the connection cap of the listener (slow clients cannot hold it). */
  limits: HttpLimits;
  /** Routes that keep serving sandbox traffic while Redis is out (default: 30 s old at most). */
  knownRoutes?: KnownRoutes;
}

/** API paths about one sandbox: routed to the node that owns it. */
const SANDBOX_PATH = /^\/(?:v2\/)?sandboxes\/([^/?]+)(\/[^?]*)?(?:\?.*)?$/;

/** E2B's node shape for GET /nodes. */
function nodeShape(n: NodeInfo) {
  return {
    nodeID: n.nodeID,
    status: n.status,
    sandboxCount: n.sandboxCount,
    pausedCount: n.pausedCount,
    capacity: n.capacity,
    allocatedCPU: n.allocatedCPU,
    allocatedMemoryMiB: n.allocatedMemoryMiB,
    version: n.version,
    url: n.url,
  };
}

/**
 * The cluster's one endpoint: the E2B API, envd traffic and the sandbox proxy, each request
 * routed to the node that owns its sandbox; creates placed on a node with room; lists merged.
 * Stateless: everything it knows is in Redis (it remembers recent routes only to keep serving
 * traffic through a Redis outage).
 */
export function buildGateway(o: GatewayOptions): FastifyInstance {
  signNodeRequestsWith(o.apiKey);
  const view = new ClusterView(o.redis, o.knownRoutes);
  const log = o.log;
  const unauthorized = (res: ServerResponse) => sendError(res, 401, NO_API_KEY);

  const calls = new SandboxCalls(view, o.apiKey, log);
  // API keys live in Redis, shared with the nodes; the gateways hold their limits cluster-wide.
  const tenants = new Tenants(
    new RedisRecordStore<ApiKeyRecord>(o.redis, keys.apiKeys),
    new RedisRecordStore<KeyUse>(o.redis, keys.apiKeyUses),
    o.apiKey,
    (err) => log.warn({ err: err.message }, "API key lastUsed not written"),
  );
  const keyLimits = new ClusterKeyLimits(o.redis);

  /** A request for one sandbox: routed to the node that owns it, after the key's limits. */
  const sandboxCall = async (req: IncomingMessage, res: ServerResponse, next: () => void) => {
    const m = SANDBOX_PATH.exec(req.url ?? "");
    // The batch metrics route is the gateway's own (a fan-out), not a sandbox called "metrics".
    if (!m || (req.url ?? "").split("?")[0] === BATCH_METRICS_PATH) return next();
    const t = await tenantOfHeaders(tenants, req.headers);
    if (!t) return unauthorized(res);
    let id: string;
    try {
      id = decodeURIComponent(m[1] as string);
    } catch {
      return sendError(res, 400, "sandbox ID is not valid URL encoding");
    }
    const rest = m[2] ?? "";
    let body: Buffer | undefined;
    try {
      await keyLimits.call(t);
      // A fork's children and a resume run more of the key's sandboxes: held cluster-wide.
      const held = keyHolds(t, req.method ?? "GET", rest);
      if (held) {
        body = await readBody(req);
        const n = held === "fork" ? forkCount(body) : (await calls.isPaused(id, req)) ? 1 : 0;
        const release = await keyLimits.reserve(t, n, { creates: held === "fork" });
        res.on("close", () => {
          release(res.statusCode === 201 ? n : 0).catch((err: Error) =>
            log.warn({ err: err.message }, "key reservation not released"),
          );
        });
      }
    } catch (err) {
      if (err instanceof KeyLimitError) return sendErrorOf(res, err);
      throw err;
    }
    return calls.route(req, res, id, rest, body);
  };
  /** What the gateway did not finish itself: answered with the error (503 for a Redis outage). */
  const answered = (req: IncomingMessage, res: ServerResponse, work: Promise<void>) => {
    work.catch((err) => {
      const status = failureStatus(err);
      if (status === 503) log.warn({ err: (err as Error).message, url: req.url }, "gateway request refused");
      else log.error({ err, url: req.url }, "gateway request failed");
      sendError(res, status, `gateway error: ${(err as Error).message}`);
    });
  };

  const fastify = buildEdge({
    log,
    component: "gateway",
    limits: o.limits,
    tenants,
    keyCalls: keyLimits,
    // Sandbox traffic: envd checks its own token. A bad port is refused here as on a node.
    // Signed /files URLs are sandbox traffic too (an upload may take longer than an API call).
    traffic: (req, res) => {
      const target = resolveTarget(req);
      if (target) {
        const problem = targetProblem(target);
        if (problem) return () => sendError(res, 400, problem);
        return () => answered(req, res, calls.forwardTraffic(req, res, target.sandboxId, target.port));
      }
      if (isSignedFiles(req)) return () => answered(req, res, calls.forwardSignedFiles(req, res));
      return undefined;
    },
    api: (req, res, toFastify) => answered(req, res, sandboxCall(req, res, toFastify)),
    upgrade: (req, socket, head, target) => {
      socket.on("error", () => socket.destroy());
      const fail = (status: number, message: string) => endWithError(socket, status, message);
      const problem = targetProblem(target);
      if (problem) return fail(400, problem);
      calls.nodeForTraffic(target.sandboxId, trafficOf(req, target.port)).then(
        (to) =>
          "status" in to ? fail(to.status, to.message) : forwardUpgrade(req, socket, head, to.node.url, o.limits),
        (err: Error) => fail(failureStatus(err), `gateway error: ${err.message}`),
      );
    },
  });

  fastify.setErrorHandler((err: Error & { statusCode?: number }, req, reply) => {
    if (err instanceof StateUnavailableError) {
      // A Redis outage or failover: nothing was placed, the client may retry.
      req.log.warn({ err: err.message }, "gateway request refused");
      return reply.status(503).header("retry-after", "1").send(errorBodyOf(503, err.message));
    }
    // A domain error the gateway threw itself (a bad query, a key's limit) has its status from the one table.
    const known = statusOf(err);
    const status = known ?? (typeof err.statusCode === "number" && err.statusCode < 500 ? err.statusCode : 502);
    if (status >= 500) req.log.error({ err }, "gateway request failed");
    const retry = retryAfterOf(err);
    if (retry !== undefined) void reply.header("retry-after", String(retry));
    void reply.status(status).send(known ? errorBody(err) : errorBodyOf(status, err.message));
  });
  // Bodies stay bytes: they are passed to a node as they came.
  fastify.removeAllContentTypeParsers();
  fastify.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));

  fastify.get("/health", async (_req, reply) => {
    const pong = await o.redis.ping().catch(() => undefined);
    return pong === "PONG" ? reply.status(204).send() : reply.status(503).send(errorBodyOf(503, "cannot reach Redis"));
  });

  // Prometheus (the route is the edge's): the cluster as Redis has it, and each key's sandboxes.
  registerGateway(() => view.nodes());
  registerKeySandboxes(async () => {
    const n = new Map<string, number>();
    for (const node of await view.nodes().catch(() => [])) {
      for (const [k, c] of Object.entries(node.owners ?? {})) n.set(k, (n.get(k) ?? 0) + c);
    }
    return n;
  });
  // The operator's key management, here as on a node (the keys are the cluster's, in Redis).
  void fastify.register(async (keysApp) => {
    keysApp.addContentTypeParser("application/json", { parseAs: "string" }, (_req, raw, done) => {
      try {
        done(null, raw ? JSON.parse(raw as string) : {});
      } catch (err) {
        done(new InvalidRequestError(`invalid JSON: ${(err as Error).message}`), undefined);
      }
    });
    await apiKeyRoutes(keysApp, { tenants });
  });

  fastify.get("/nodes", async () => (await view.nodes()).map(nodeShape));
  fastify.get("/nodes/:nodeID", async (req, reply) => {
    const n = await view.node((req.params as { nodeID: string }).nodeID);
    if (!n) return reply.status(404).send(errorBodyOf(404, "node not found"));
    return nodeShape(n);
  });

  // Creates: placed on a node with room, retried on another if that one turns out full.
  const place = async (req: { raw: IncomingMessage; url: string }, body: Buffer, reply: FastifyReply) => {
    // Malformed JSON is placed anyway: the node answers it.
    const asked = parseJson<{ templateID?: unknown; image?: unknown }>(body);
    // A cold start names its image; a create, its template (or an image started on demand).
    const cold = req.url.split("?")[0] === "/sandboxes-cold";
    const from = cold ? asked?.image : asked?.templateID;
    const placement = await calls.placementFor(typeof from === "string" ? from : undefined, cold);
    const placed = await calls.placeAndCall(placement, req.url, nodeHeaders(req.raw), body, createdId);
    if (!placed) {
      // Every node refused (full, or its start queue too long) or none is ready (all down or
      // draining, or not yet registered again after Redis lost their keys: they do within a
      // heartbeat): either way nothing was started and a retry may succeed.
      const message = (await view.nodes()).some((n) => n.status === "ready")
        ? "no node has room for another sandbox"
        : "no node is ready";
      reply
        .status(503)
        .header("retry-after", "1")
        .send(errorBodyOf(503, message, ERROR_CODES.capacityUnavailable));
      return undefined;
    }
    relayReply(reply, placed.ans);
    return createdId(placed.ans);
  };
  /**
   * A create with an idempotency key, one at a time per key across gateways: a retry gets the
   * sandbox the first attempt made, from its node (which answers for it by the key in its
   * metadata), or waits for a first attempt still in flight.
   */
  const placeOnce = async (
    req: { raw: IncomingMessage; url: string },
    body: Buffer,
    reply: FastifyReply,
    key: string,
  ) => {
    // Held past its wait: a first create with this key that has not ended (or a gateway that
    // died holding it; the lock then expires). Nothing was started for this request: retry.
    const unlock = await view.lock(`idem:${key}`, 120_000).catch((err: unknown) => {
      if (err instanceof StateUnavailableError) throw err;
      return undefined;
    });
    if (!unlock) {
      return reply
        .status(503)
        .header("retry-after", "1")
        .send(errorBodyOf(503, "a create with this idempotency key is still in progress"));
    }
    try {
      const earlier = await view.idempotentSandbox(key);
      const node = earlier ? (await view.owner(earlier)).node : undefined;
      if (node) {
        const ans = await call(node.url, "POST", req.url, nodeHeaders(req.raw), body).catch(() => undefined);
        const id = ans && createdId(ans);
        if (ans && id) {
          if (id !== earlier) await view.setIdempotentSandbox(key, id);
          await calls.recordOwner(id, node.nodeID);
          return relayReply(reply, ans);
        }
      }
      const id = await place(req, body, reply);
      if (id) await view.setIdempotentSandbox(key, id);
      return reply;
    } finally {
      await unlock().catch(() => {});
    }
  };
  const create = async (req: FastifyRequest, reply: FastifyReply) => {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.from("");
    const metadata = parseJson<{ metadata?: unknown }>(body)?.metadata;
    const { key, error } = idempotencyKeyOf(
      req.raw.headers[IDEMPOTENCY.header],
      metadata && typeof metadata === "object" ? (metadata as Record<string, string>) : undefined,
    );
    if (error) return reply.status(400).send(errorBodyOf(400, error));
    const t = tenantOf(req);
    const release = await keyLimits.reserve(t, 1);
    try {
      // Each key's idempotency keys are its own.
      if (key) await placeOnce(req, body, reply, `${t.id}/${key}`);
      else await place(req, body, reply);
    } finally {
      await release(reply.statusCode === 201 ? 1 : 0).catch((err: Error) =>
        log.warn({ err: err.message }, "key reservation not released"),
      );
    }
    return reply;
  };
  fastify.post("/sandboxes", create);
  fastify.post("/v2/sandboxes", create);
  fastify.post("/sandboxes-cold", create);

  // Lists: every node's, merged, ordered and paginated here.
  const fanOut = async (path: string, req: IncomingMessage) => {
    const nodes = (await view.nodes()).filter((n) => n.url);
    const missing: string[] = [];
    const parts = await Promise.all(
      nodes.map(async (n) => {
        const items: unknown[] = [];
        let token: string | undefined;
        try {
          for (let page = 0; page < 1000; page++) {
            const sep = path.includes("?") ? "&" : "?";
            const p = `${path}${sep}limit=100${token ? `&nextToken=${encodeURIComponent(token)}` : ""}`;
            const ans = await call(n.url, "GET", p, nodeHeaders(req), undefined, 15_000);
            if (ans.status !== 200) throw new Error(`status ${ans.status}: ${ans.body.toString().slice(0, 200)}`);
            items.push(...(JSON.parse(ans.body.toString()) as unknown[]));
            const next = ans.headers["x-next-token"];
            token = typeof next === "string" && next ? next : undefined;
            if (!token) break;
          }
        } catch (err) {
          log.warn({ err, node: n.nodeID }, "node did not answer a list");
          missing.push(n.nodeID);
        }
        return items;
      }),
    );
    return { items: parts.flat(), missing };
  };
  const listQuery = (url: string, drop: string[]) => {
    const u = new URL(url, "http://x");
    for (const k of drop) u.searchParams.delete(k);
    const qs = u.searchParams.toString();
    return { path: `${u.pathname}${qs ? `?${qs}` : ""}`, params: new URL(url, "http://x").searchParams };
  };
  /** A list's page size as the client asked, within 1..100 (100 when unset or not a number). */
  const limitOf = (params: URLSearchParams) => Math.min(100, Math.max(1, Number(params.get("limit") ?? 100) || 100));
  const page = <T>(items: T[], params: URLSearchParams, reply: FastifyReply): T[] => {
    const limit = limitOf(params);
    const offset = decodeCursor(params.get("nextToken") ?? undefined);
    if (offset + limit < items.length) void reply.header("x-next-token", encodeCursor(offset + limit));
    return items.slice(offset, offset + limit);
  };
  const warnMissing = (reply: FastifyReply, missing: string[]) => {
    if (missing.length) void reply.header(PARTIAL_HEADER, `nodes not answering: ${missing.join(",")}`);
  };

  // Pages of the nodes after the cursor, merged (list-merge.ts): a page costs about 2 × limit
  // items and a request to each node, not every sandbox of the cluster.
  fastify.get("/v2/sandboxes", async (req, reply) => {
    const { path, params } = listQuery(req.url, ["limit", "nextToken"]);
    // Checked before any node is asked: a bad state or cursor is the client's 400, not a silent node.
    const countRunning = parseStates(params.get("state") ?? undefined).has("running");
    const nextToken = params.get("nextToken") ?? undefined;
    decodeKeyCursor(nextToken);
    const limit = limitOf(params);
    const order = params.get("order") === "asc" ? "asc" : "desc";
    const sep = path.includes("?") ? "&" : "?";
    const nodes = (await view.nodes()).filter((n) => n.url);
    const missing = new Set<string>();
    const counted = new Set<string>();
    let running = 0;
    const ask = async (n: NodeInfo, token: string | undefined, nodeLimit: number) => {
      const p = `${path}${sep}limit=${nodeLimit}${token ? `&nextToken=${encodeURIComponent(token)}` : ""}`;
      try {
        const ans = await call(n.url, "GET", p, nodeHeaders(req.raw), undefined, 15_000);
        if (ans.status !== 200) throw new Error(`status ${ans.status}: ${ans.body.toString().slice(0, 200)}`);
        // Each node counts its own running matches, whatever the page: once per node.
        if (!counted.has(n.nodeID)) {
          counted.add(n.nodeID);
          running += Number(ans.headers[TOTAL_RUNNING_HEADER] ?? 0) || 0;
        }
        return { items: JSON.parse(ans.body.toString()) as ListedSandbox[], more: !!ans.headers["x-next-token"] };
      } catch (err) {
        log.warn({ err, node: n.nodeID }, "node did not answer a list");
        missing.add(n.nodeID);
        return undefined;
      }
    };
    const merged = await clusterPage(nodes, ask, { limit, order, nextToken });
    warnMissing(reply, [...missing]);
    // Each node counted its own running matches before its page: their sum is the cluster's.
    if (countRunning) void reply.header(TOTAL_RUNNING_HEADER, String(running));
    if (merged.nextToken) void reply.header("x-next-token", merged.nextToken);
    return merged.items;
  });
  // The team: the caller's key is its key; its metrics are the nodes' series added up.
  fastify.get("/teams", async (req) => teamsOf(keyOf(req.headers) ?? ""));
  fastify.get("/teams/:teamID/metrics", async (req, reply) => {
    const { body, missing } = await teamMetrics(view, req.raw, (req.params as { teamID: string }).teamID);
    warnMissing(reply, missing);
    return body;
  });
  fastify.get("/teams/:teamID/metrics/max", async (req, reply) => {
    const { body, missing } = await maxTeamMetrics(view, req.raw, (req.params as { teamID: string }).teamID);
    warnMissing(reply, missing);
    return body;
  });
  fastify.get(BATCH_METRICS_PATH, async (req, reply) => {
    const { body, partial } = await batchMetrics(view, req.raw, log);
    if (partial) void reply.header(PARTIAL_HEADER, partial);
    return body;
  });
  fastify.get("/sandboxes", async (req, reply) => {
    const { parts, missing } = await askEveryNode<unknown>(await view.nodes(), req.url, req.raw);
    warnMissing(reply, missing);
    return parts.flat();
  });
  fastify.get("/snapshots", async (req, reply) => {
    const { path, params } = listQuery(req.url, ["limit", "nextToken"]);
    const { items, missing } = await fanOut(path, req.raw);
    const seen = new Map<string, { snapshotID: string; createdAt: string }>();
    for (const s of items as Array<{ snapshotID: string; createdAt: string }>) seen.set(s.snapshotID, s);
    const all = [...seen.values()].sort(
      (a, b) => a.createdAt.localeCompare(b.createdAt) || a.snapshotID.localeCompare(b.snapshotID),
    );
    warnMissing(reply, missing);
    return page(all, params, reply);
  });

  // Everything else (templates, builds, snapshots by ID): templates and snapshots live in the
  // shared repository, so one node answers for all. Builds stay on the first ready node, so
  // a build's status polls reach the node that runs it.
  const anyNode = async (req: { raw: IncomingMessage; body: unknown }, reply: FastifyReply) => {
    const n = (await view.nodes()).find((x) => x.status === "ready");
    if (!n) return reply.status(503).send(errorBodyOf(503, "no node is ready"));
    const body = Buffer.isBuffer(req.body) ? req.body : undefined;
    reply.hijack();
    forward(req.raw, reply.raw, n.url, body ? { body } : {});
  };
  // Webhooks are in Redis, shared by every node: one answers. Each node delivers its own
  // sandboxes' events, so the deliveries are every node's, merged newest first.
  fastify.get("/events/webhooks/:webhookID/deliveries", async (req, reply) => {
    const id = encodeURIComponent((req.params as { webhookID: string }).webhookID);
    const q = WebhookDeliveriesQuery.safeParse(req.query);
    if (!q.success) throw new InvalidRequestError(zodMessage(q.error));
    const limit = q.data.limit ?? 100;
    const nodes = await view.nodes();
    const n = nodes.find((x) => x.status === "ready");
    if (!n) return reply.status(503).send(errorBodyOf(503, "no node is ready"));
    const own = await call(n.url, "GET", `/events/webhooks/${id}`, nodeHeaders(req.raw), undefined, 15_000);
    if (own.status !== 200) return relayReply(reply, own);
    const { parts, missing } = await askEveryNode<{ createdAt: string; id: string }>(
      nodes.filter((x) => x.url),
      req.url,
      req.raw,
    );
    warnMissing(reply, missing);
    return parts
      .flat()
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id.localeCompare(a.id))
      .slice(0, limit);
  });
  for (const method of ["GET", "POST", "DELETE", "PATCH"] as const) {
    fastify.route({ method, url: "/events/webhooks", handler: anyNode });
    fastify.route({ method, url: "/events/webhooks/:webhookID", handler: anyNode });
  }
  // Secrets are in Redis too, sealed with the nodes' repository key: a node answers for all.
  for (const method of ["GET", "POST", "DELETE"] as const) {
    fastify.route({ method, url: "/secrets", handler: anyNode });
    fastify.route({ method, url: "/secrets/:secretID", handler: anyNode });
  }
  for (const method of ["GET", "POST", "DELETE", "PUT", "PATCH"] as const) {
    fastify.route({ method, url: "/templates*", handler: anyNode });
    fastify.route({ method, url: "/v2/templates*", handler: anyNode });
    fastify.route({ method, url: "/v3/templates*", handler: anyNode });
    fastify.route({ method, url: "/snapshots/*", handler: anyNode });
  }
  return fastify;
}
