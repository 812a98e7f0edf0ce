import type { IncomingMessage, ServerResponse } from "node:http";
import type { NodeInfo } from "@aenv/edge/cluster-keys";
import { NEEDS_CHECKPOINT_KEY_HEADER } from "@aenv/edge/errors";
import { errorBodyOf } from "@aenv/edge/http-errors";
import { SANDBOX_NOT_FOUND, trafficErrorBody } from "@aenv/edge/proxy-target";
import { NO_SIGNER, wellFormedSignature } from "@aenv/edge/signed-files";
import {
  AUTO_RESUME_HEADER,
  ERROR_CODES,
  type ErrorBody,
  FORK_SPILL,
  type SandboxCreated,
  type SandboxDetail,
  type SnapshotInfo,
  TRAFFIC_PORT_HEADER,
  TRAFFIC_TOKEN_HEADER,
} from "@aenv/protocol";
import type { Logger } from "pino";
import { type ClusterView, type Reservation, StateUnavailableError } from "./cluster-view.js";
import { ContentPlacement } from "./content-placement.js";
import { call, forward, sendError, sendJson } from "./forward.js";
import { type NodeAnswer, nodeHeaders, parseJson, readBody, relay } from "./http-util.js";

/** Sandbox traffic as far as a resume for it goes: its port and the traffic token it carried. */
export interface Traffic {
  port: number;
  token?: string;
}

export function trafficOf(req: IncomingMessage, port: number): Traffic {
  const got = req.headers[TRAFFIC_TOKEN_HEADER];
  const token = Array.isArray(got) ? got[0] : got;
  return token !== undefined ? { port, token } : { port };
}

/** A traffic refusal, as a node's proxy words it. */
const failureBody = (f: { status: number; message: string; sandboxId?: string }) =>
  trafficErrorBody(f.status, f.message, f.sandboxId);

export interface Placement {
  templateId?: string;
  checkpointKey?: string;
  prefer?: string[];
  exclude?: string[];
}

/** A child of a node's fork answer, as far as the gateway reads it (ForkResult, loosely). */
interface ForkChild {
  sandbox?: Pick<SandboxCreated, "sandboxID">;
  error?: ErrorBody;
}

/**
 * The gateway's calls about one sandbox that need more than a forward: placing a call on a
 * node with room, moving a paused sandbox off a dead node (by connect or by traffic), forks
 * that spill onto other nodes, and snapshots remembered where they were taken.
 */
export class SandboxCalls {
  private readonly content: ContentPlacement;

  constructor(
    private readonly view: ClusterView,
    private readonly apiKey: string,
    private readonly log: Logger,
  ) {
    this.content = new ContentPlacement({ view, apiKey, log });
  }

  /**
   * Places a call on a node with room and makes it: a node that answers 429/503 or cannot be
   * reached (it may have died since its last heartbeat) is skipped and another tried. The
   * sandbox `ownerOf` names in the node's answer is routed to that node as the reservation is
   * released (best effort: the node's heartbeat writes a route that is missing).
   */
  async placeAndCall(
    placement: Placement,
    path: string,
    headers: Record<string, string>,
    body: Buffer,
    ownerOf: (ans: NodeAnswer) => string | undefined,
  ): Promise<{ node: NodeInfo; ans: NodeAnswer } | undefined> {
    const exclude = [...(placement.exclude ?? [])];
    for (;;) {
      const r = await this.view.place({ ...placement, exclude });
      if (!r) return undefined;
      let ans: NodeAnswer;
      try {
        ans = await call(r.node.url, "POST", path, headers, body);
      } catch (err) {
        await this.releaseQuietly(r, false);
        this.log.warn({ err: (err as Error).message, node: r.node.nodeID }, "node unreachable; trying another");
        exclude.push(r.node.nodeID);
        continue;
      }
      // Past this point the node has answered: a sandbox it made exists, so losing Redis now
      // must not turn that answer into a failure.
      await this.releaseQuietly(r, ans.status < 300, ans.status < 300 ? ownerOf(ans) : undefined);
      if (ans.status === 429 || ans.status === 503) {
        exclude.push(r.node.nodeID);
        continue;
      }
      return { node: r.node, ans };
    }
  }

  /**
   * Gives a reservation back without failing the call it served: if Redis is unreachable the
   * reservation expires by itself (two minutes), and the node's next beat counts what it made.
   */
  private async releaseQuietly(r: Reservation, created: boolean, sandboxId?: string): Promise<void> {
    await r
      .release(created, sandboxId)
      .catch((err: Error) =>
        this.log.warn(
          { err: err.message, sandboxID: sandboxId },
          "reservation not released; the node's heartbeat routes",
        ),
      );
  }

  /**
   * Records who owns a sandbox that now exists. Best effort: when Redis is unreachable or
   * loses the write in a failover, the owning node's heartbeat writes the route within a beat
   * (a route that is missing or names a dead node is the beat's to write).
   */
  async recordOwner(sandboxId: string, nodeId: string): Promise<void> {
    await this.view
      .setOwner(sandboxId, nodeId)
      .catch((err: Error) =>
        this.log.warn({ err: err.message, sandboxID: sandboxId }, "route not recorded; the node's heartbeat will"),
      );
  }

  /**
   * Placement for a start from `templateId` (or, `cold`, from that image): a snapshot goes to
   * the node that took it first; an image no node holds goes where most of its layers are.
   */
  async placementFor(templateId: string | undefined, cold = false): Promise<Placement> {
    if (!templateId) return {};
    const nodes = await this.view.placementNodes();
    // A template a node holds is no snapshot: no holder to look up.
    if (nodes.some((n) => n.templates.includes(templateId))) return { templateId };
    const holder = cold ? undefined : await this.view.snapshotHolder(templateId);
    if (!holder) {
      const prefer = await this.content.prefer(templateId, cold, nodes).catch((err: Error) => {
        this.log.warn({ err: err.message, image: templateId }, "content placement skipped");
        return [];
      });
      return prefer.length ? { templateId, prefer } : { templateId };
    }
    const checkpointKey = await this.view.checkpointKeyOf(holder);
    return { templateId, prefer: [holder], ...(checkpointKey ? { checkpointKey } : {}) };
  }

  /**
   * Whether a sandbox is paused, for a resume that runs one more of its key's sandboxes: asked
   * of its node with the caller's own key (another key's sandbox is as good as absent); one
   * whose node is gone can only have been paused to move at all.
   */
  async isPaused(id: string, req: IncomingMessage): Promise<boolean> {
    const owner = await this.view.owner(id);
    if (!owner.node) return !!owner.dead;
    const headers = { ...nodeHeaders(req) };
    delete headers["content-type"];
    const ans = await call(owner.node.url, "GET", `/sandboxes/${encodeURIComponent(id)}`, headers, undefined, 15_000);
    return ans.status === 200 && parseJson<{ state?: string }>(ans.body)?.state === "paused";
  }

  /**
   * API calls about one sandbox, routed to its node; a paused sandbox whose node is gone moves
   * on connect. `read`: the body, when the caller has read it already (to count a fork).
   */
  async route(req: IncomingMessage, res: ServerResponse, id: string, rest: string, read?: Buffer): Promise<void> {
    const owner = await this.view.owner(id);
    const moving = req.method === "POST" && (rest === "/connect" || rest === "/resume");
    if (owner.node && moving) {
      // Its node may have died since its last heartbeat: then the sandbox moves (only a paused
      // one can: the node that takes it over needs its pause image in the repository).
      const body = read ?? (await readBody(req));
      let ans: NodeAnswer;
      try {
        ans = await call(owner.node.url, "POST", req.url ?? "/", nodeHeaders(req), body);
      } catch (err) {
        this.log.warn(
          { err: (err as Error).message, node: owner.node.nodeID, sandboxID: id },
          "owner unreachable; moving",
        );
        return relay(res, await this.resumeElsewhere(id, req.url ?? "/", nodeHeaders(req), body, owner.node.nodeID));
      }
      // Its node runs another runtime build now (it was upgraded after a drain): the pause
      // moves to a node that can restore it.
      const needs = ans.status === 409 ? ans.headers[NEEDS_CHECKPOINT_KEY_HEADER] : undefined;
      if (typeof needs === "string" && needs !== owner.node.checkpointKey) {
        const need = { checkpointKey: needs, node: owner.node.nodeID };
        return relay(res, await this.resumeElsewhere(id, req.url ?? "/", nodeHeaders(req), body, undefined, need));
      }
      return relay(res, ans);
    }
    if (owner.node) {
      if (req.method === "POST" && rest === "/fork") return this.fork(req, res, owner.node, id, read);
      if (req.method === "POST" && rest === "/snapshots") return this.snapshot(req, res, owner.node);
      if (req.method === "DELETE" && !rest) {
        res.on("finish", () => {
          if (res.statusCode < 300) this.view.dropOwner(id).catch(() => {});
        });
      }
      return forward(req, res, owner.node.url);
    }
    if (!moving) {
      // Its node may be cut off, not gone: the sandbox is not reported killed (404).
      if (owner.dead) return sendError(res, 503, unreachable(id, owner.dead));
      return sendError(res, 404, `sandbox '${id}' not found`);
    }
    return relay(
      res,
      await this.resumeElsewhere(id, req.url ?? "/", nodeHeaders(req), read ?? (await readBody(req)), owner.dead),
    );
  }

  /**
   * A paused sandbox resumed on another node from the shared repository, one gateway at a time
   * (a Redis lock; the repository's claim guards the rest). Only nodes that can restore what
   * the dead node wrote are candidates.
   */
  async resumeElsewhere(
    id: string,
    path: string,
    headers: Record<string, string>,
    body: Buffer,
    dead?: string,
    /** Its (live) node cannot restore it: a node with this checkpoint key must. */
    need?: { checkpointKey: string; node: string },
  ): Promise<NodeAnswer> {
    const unlock = await this.view.lock(`resume:${id}`, 120_000);
    try {
      // Another gateway may have moved it while this one waited for the lock.
      const again = await this.view.owner(id);
      const away = dead ?? need?.node;
      if (again.node && again.node.nodeID !== away) return await call(again.node.url, "POST", path, headers, body);
      const checkpointKey = need?.checkpointKey ?? (dead ? await this.view.checkpointKeyOf(dead) : undefined);
      const placed = await this.placeAndCall(
        { ...(away ? { exclude: [away] } : {}), ...(checkpointKey ? { checkpointKey } : {}) },
        path,
        headers,
        body,
        () => id,
      );
      if (!placed && checkpointKey && !(await this.view.nodes()).some((n) => n.checkpointKey === checkpointKey)) {
        return jsonAnswer(
          503,
          errorBodyOf(
            503,
            `sandbox '${id}' was paused under runtime '${checkpointKey}' and no ready node runs it: it resumes once a node with that runtime (checkpoint key) joins the cluster`,
          ),
        );
      }
      if (!placed) {
        return jsonAnswer(
          503,
          errorBodyOf(503, "no node has room to resume this sandbox", ERROR_CODES.capacityUnavailable),
          {
            "retry-after": "1",
          },
        );
      }
      // No pause image in the repository: it was running on its node when that node went
      // unreachable. It is not gone (its node may be cut off, not dead), so not a 404.
      if (placed.ans.status === 404 && dead) {
        return jsonAnswer(
          503,
          errorBodyOf(503, `${unreachable(id, dead)}; it was not paused, so no other node can resume it`),
        );
      }
      return placed.ans;
    } finally {
      // The lock expires by itself; a resume that happened is not undone by failing to drop it.
      await unlock().catch((err: Error) =>
        this.log.warn({ err: err.message, sandboxID: id }, "resume lock not released"),
      );
    }
  }

  /**
   * Traffic (envd, proxy, WebSocket) for a sandbox whose node is gone: if it was paused with
   * autoResume, it is resumed on another node first, as its own node would have. Returns the
   * node to send the traffic to, or the answer to give instead.
   */
  async nodeForTraffic(
    id: string,
    traffic: Traffic,
    unreachable?: string,
  ): Promise<{ node: NodeInfo } | { status: number; message: string; sandboxId?: string }> {
    const owner = await this.view.ownerForTraffic(id);
    // A node that refused a connection is dead even if its heartbeat has not expired yet.
    const dead = owner.node && owner.node.nodeID === unreachable ? unreachable : owner.dead;
    if (owner.node && !dead) return { node: owner.node };
    if (!dead) return { status: 502, message: SANDBOX_NOT_FOUND, sandboxId: id };
    const ans = await this.resumeElsewhere(
      id,
      `/sandboxes/${encodeURIComponent(id)}/connect`,
      {
        "x-api-key": this.apiKey,
        "content-type": "application/json",
        [AUTO_RESUME_HEADER]: "1",
        // The node checks the traffic's own credentials before it resumes anything.
        [TRAFFIC_PORT_HEADER]: String(traffic.port),
        ...(traffic.token !== undefined ? { [TRAFFIC_TOKEN_HEADER]: traffic.token } : {}),
      },
      Buffer.from("{}"),
      dead,
    );
    const moved = ans.status < 300 ? await this.view.owner(id) : undefined;
    if (moved?.node && moved.node.nodeID !== dead) return { node: moved.node };
    const why = parseJson<Partial<ErrorBody>>(ans.body)?.message ?? `status ${ans.status}`;
    if (ans.status === 403) return { status: 403, message: why };
    // 410 for a paused sandbox without autoResume, as a node's own proxy answers.
    return { status: ans.status === 409 ? 410 : 502, message: `sandbox '${id}' is not running: ${why}` };
  }

  /**
   * A signed /files URL that names no sandbox (the SDK's uploadUrl/downloadUrl): each node is
   * asked whether one of its sandboxes signed it; that node serves it (it finds the sandbox).
   */
  async forwardSignedFiles(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Garbage costs no call to any node.
    if (!wellFormedSignature(req)) {
      req.resume();
      return sendError(res, 401, "invalid signature");
    }
    const ask = Buffer.from(JSON.stringify({ url: req.url, method: req.method }));
    const headers = { "x-api-key": this.apiKey, "content-type": "application/json" };
    const nodes = await this.view.nodes();
    const answers = await Promise.all(
      nodes.map((n) =>
        call(n.url, "POST", "/cluster/files-signer", headers, ask, 10_000).then(
          (a) => (a.status === 200 ? n : undefined),
          () => undefined,
        ),
      ),
    );
    const node = answers.find((n) => n !== undefined);
    if (!node) {
      req.resume();
      return sendError(res, 401, NO_SIGNER);
    }
    forward(req, res, node.url);
  }

  /** Sends sandbox traffic to its node, moving the sandbox first if that node turns out dead. */
  async forwardTraffic(req: IncomingMessage, res: ServerResponse, id: string, port: number): Promise<void> {
    const traffic = trafficOf(req, port);
    const to = await this.nodeForTraffic(id, traffic);
    if ("status" in to) return sendJson(res, to.status, failureBody(to));
    forward(req, res, to.node.url, {
      onConnectError: (err) => {
        this.log.warn({ err: err.message, node: to.node.nodeID, sandboxID: id }, "node refused traffic; moving");
        this.nodeForTraffic(id, traffic, to.node.nodeID).then(
          (again) =>
            "status" in again ? sendJson(res, again.status, failureBody(again)) : forward(req, res, again.node.url),
          (e: Error) => sendError(res, failureStatus(e), `gateway error: ${e.message}`),
        );
      },
    });
  }

  /**
   * Fork: children start on the parent's node (its memory image is there). Those that do not
   * fit start on other nodes from the same capture, which the node publishes as a snapshot
   * for them and which is deleted once they run.
   */
  private async fork(
    req: IncomingMessage,
    res: ServerResponse,
    node: NodeInfo,
    id: string,
    read: Buffer | undefined,
  ): Promise<void> {
    const body = read ?? (await readBody(req));
    const headers = nodeHeaders(req);
    // Calls without a body (the parent's info, the capture's delete) must not claim JSON.
    const { "content-type": _ct, ...bare } = headers;
    const ask = { ...headers, [FORK_SPILL.request.header]: FORK_SPILL.request.value };
    const ans = await call(node.url, "POST", req.url ?? "/", ask, body);
    const children = ans.status === FORK_SPILL.created ? parseJson<ForkChild[]>(ans.body) : undefined;
    if (!Array.isArray(children)) return relay(res, ans);
    // Children on the parent's node; those placed elsewhere are routed as they are placed.
    const here = children.flatMap((c) => (c.sandbox?.sandboxID ? [c.sandbox.sandboxID] : []));
    const snap = ans.headers[FORK_SPILL.snapshotHeader];
    if (typeof snap === "string") {
      const full = children.flatMap((c, i) => (c.error?.error_code === FORK_SPILL.spilledErrorCode ? [i] : []));
      const fork = parseJson<{ timeout?: number }>(body) ?? {};
      const parent = await call(node.url, "GET", `/sandboxes/${encodeURIComponent(id)}`, bare, undefined, 15_000);
      const info = parseJson<Partial<Pick<SandboxDetail, "metadata" | "endAt">>>(parent.body) ?? {};
      const left = info.endAt ? Math.ceil((Date.parse(info.endAt) - Date.now()) / 1000) : 300;
      // Without a timeout, v1 children get the parent's time left, v2 ones the default (omitted).
      const v2 = (req.url ?? "").startsWith("/v2/");
      const timeout = fork.timeout ?? (v2 ? undefined : Math.max(1, left));
      const create = Buffer.from(JSON.stringify({ templateID: snap, timeout, metadata: info.metadata ?? {} }));
      const checkpointKey = node.checkpointKey;
      await Promise.all(
        full.map(async (i) => {
          const placed = await this.placeAndCall(
            { exclude: [node.nodeID], checkpointKey },
            "/sandboxes",
            { ...headers, "content-type": "application/json" },
            create,
            createdId,
          ).catch((err: Error) => {
            this.log.warn({ err: err.message, sandboxID: id }, "fork child not placed");
            return undefined;
          });
          if (placed?.ans.status === 201) {
            children[i] = { sandbox: parseJson<Pick<SandboxCreated, "sandboxID">>(placed.ans.body) };
          } else if (placed) {
            children[i] = { error: parseJson<ErrorBody>(placed.ans.body) ?? errorBodyOf(placed.ans.status, "failed") };
          }
        }),
      );
      this.log.info({ sandboxID: id, spilled: full.length, snapshot: snap }, "fork children started on other nodes");
      // The capture served its purpose; the children run from their own copies.
      call(node.url, "DELETE", `/templates/${encodeURIComponent(snap)}`, bare).then(
        (a) => {
          if (a.status >= 300) this.log.warn({ status: a.status, snapshot: snap }, "fork capture not deleted");
        },
        (err: Error) => this.log.warn({ err: err.message, snapshot: snap }, "fork capture not deleted"),
      );
    }
    await Promise.all(here.map((child) => this.recordOwner(child, node.nodeID)));
    sendJson(res, 201, children);
  }

  /** A snapshot is remembered where it was taken: starts from it go there first. */
  private async snapshot(req: IncomingMessage, res: ServerResponse, node: NodeInfo): Promise<void> {
    const ans = await call(node.url, "POST", req.url ?? "/", nodeHeaders(req), await readBody(req));
    const snap =
      ans.status === 201 ? parseJson<Partial<Pick<SnapshotInfo, "snapshotID" | "names">>>(ans.body) : undefined;
    if (snap?.snapshotID) {
      await this.view
        .setSnapshotHolder([snap.snapshotID, ...(snap.names ?? [])], node.nodeID)
        .catch((err: Error) => this.log.warn({ err: err.message }, "snapshot holder not recorded"));
    }
    relay(res, ans);
  }
}

/** 503 when the cluster's state is unreachable (retry), 502 for anything else that failed here. */
export function failureStatus(err: unknown): number {
  return err instanceof StateUnavailableError ? 503 : 502;
}

/** The answer about a sandbox whose node's heartbeat expired. */
function unreachable(id: string, node: string): string {
  return `sandbox '${id}' is on node '${node}', which is unreachable (its heartbeat expired): a paused sandbox resumes on another node at connect; a running one is served again when its node is back`;
}

function jsonAnswer(status: number, body: unknown, headers: Record<string, string> = {}): NodeAnswer {
  return {
    status,
    headers: { "content-type": "application/json", ...headers },
    body: Buffer.from(JSON.stringify(body)),
  };
}

/** The sandbox a node's 201 answer to a create made. */
export function createdId(ans: NodeAnswer): string | undefined {
  if (ans.status !== 201) return undefined;
  return parseJson<Partial<SandboxCreated>>(ans.body)?.sandboxID;
}
