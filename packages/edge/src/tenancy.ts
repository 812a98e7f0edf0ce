import type { IncomingHttpHeaders } from "node:http";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ForbiddenError, NotFoundError, UnauthorizedError } from "./errors.js";
import { NO_API_KEY } from "./http-errors.js";
import { owns, type Tenant, type Tenants } from "./tenants.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Who is calling (set by the key check); null on the routes that authenticate themselves. */
    tenant: Tenant | null;
  }
}

/** The key a request carries: X-API-Key, or Authorization: Bearer (the CLI's and curl's habit). */
export function keyOf(headers: IncomingHttpHeaders): string | undefined {
  const x = headers["x-api-key"];
  if (typeof x === "string") return x;
  const auth = headers.authorization;
  return auth?.startsWith("Bearer ") ? auth.slice(7) : undefined;
}

/**
 * The tenant the key a request carries is, if it carries one that is a key. `vouched`: a
 * gateway passed it on (Tenants.resolve).
 */
export async function tenantOfHeaders(
  tenants: Tenants,
  headers: IncomingHttpHeaders,
  vouched = false,
): Promise<Tenant | undefined> {
  const key = keyOf(headers);
  return key ? tenants.resolve(key, { vouched }) : undefined;
}

/** The caller of a route behind the key check. */
export function tenantOf(req: FastifyRequest): Tenant {
  if (!req.tenant) throw new UnauthorizedError(NO_API_KEY);
  return req.tenant;
}

/**
 * Routes only the operator's key may call: other nodes' and the operator's own business, and
 * the team's metrics (every key's sandboxes added up).
 */
const OPERATOR_ONLY = [/^\/cluster\//, /^\/api-keys(?:[/?]|$)/, /^\/nodes(?:[/?]|$)/, /^\/teams\/[^/]+\/metrics/];

/** Counts a key's API calls against its limit (a node's own count, or a cluster's in Redis). */
export interface KeyCalls {
  call(t: Tenant): void | Promise<void>;
}

/**
 * The tenant a request's key is, with a cluster node's rule applied: a tenant's key only on a
 * request a gateway passed on (`viaGateway`, gateway-proof.ts), else 403. Undefined when the
 * request carries no key that is one.
 */
export async function callerOf(
  tenants: Tenants,
  headers: IncomingHttpHeaders,
  viaGateway?: (headers: IncomingHttpHeaders) => boolean,
): Promise<Tenant | undefined> {
  const fromGateway = viaGateway?.(headers);
  const t = await tenantOfHeaders(tenants, headers, fromGateway);
  if (t && !t.admin && fromGateway === false) {
    throw new ForbiddenError("this server is a cluster node: call the cluster's gateway with this API key");
  }
  return t;
}

export interface AuthOptions {
  /** Counts each call against the key's limits: a node of its own; behind gateways they count. */
  limits?: KeyCalls;
  /**
   * A cluster node's: whether a tenant's request came through a gateway (gateway-proof.ts).
   * Without it a tenant's key is refused here, since only gateways hold it to its limits.
   */
  viaGateway?: (headers: IncomingHttpHeaders) => boolean;
}

/**
 * The key check on every control-plane route except GET /health and the routes that
 * authenticate themselves (signed upload links, volume tokens): which tenant is calling, the
 * operator's routes refused to others, a tenant's key on a cluster node only through a
 * gateway, and each call counted against the key's limits.
 */
export function installAuth(app: FastifyInstance, tenants: Tenants, opts: AuthOptions = {}): void {
  const { limits, viaGateway } = opts;
  app.decorateRequest("tenant", null);
  app.addHook("onRequest", async (req) => {
    if (req.method === "GET" && req.url === "/health") return;
    if ((req.routeOptions.config as { public?: boolean } | undefined)?.public) return;
    const t = await callerOf(tenants, req.headers, viaGateway);
    if (!t) throw new UnauthorizedError(NO_API_KEY);
    if (!t.admin && OPERATOR_ONLY.some((re) => re.test(req.url))) {
      throw new ForbiddenError("this route is the operator's: call it with the server's own API key");
    }
    await limits?.call(t);
    req.tenant = t;
  });
}

/** What the ownership check needs of a resource: its owner, and whether other keys may read it. */
export interface Owned {
  owner?: string | undefined;
  /** Other keys may read it (GET) and start from it, never change it: a public template. */
  shared?: boolean;
}

export interface OwnedKind {
  /** As messages name it: "sandbox", "snapshot", … */
  kind: string;
  find(id: string): Owned | undefined | Promise<Owned | undefined>;
}

/**
 * Every route with one of these path parameters acts only on what the caller owns: for another
 * key's resource the answer is the 404 an unknown ID gets (existence is not confirmed). A
 * parameter naming nothing is left to the route's own 404. One hook, so a route added later
 * with the same parameter is covered without a line of its own.
 */
export function installOwnership(app: FastifyInstance, byParam: Record<string, OwnedKind>): void {
  app.addHook("preHandler", async (req) => {
    const t = req.tenant;
    if (!t || t.admin) return;
    const params = (req.params ?? {}) as Record<string, string | undefined>;
    for (const [param, k] of Object.entries(byParam)) {
      const id = params[param];
      if (id === undefined) continue;
      const found = await k.find(id);
      if (!found || owns(t, found.owner)) continue;
      if (found.shared && req.method === "GET") continue;
      throw new NotFoundError(`${k.kind} '${id}' not found`);
    }
  });
}
