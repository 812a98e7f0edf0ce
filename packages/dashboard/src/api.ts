import type {
  ApiKeyInfo,
  BuildStatus,
  CreatedApiKey,
  ErrorBody,
  ForkResult,
  ListedSandbox,
  SandboxCreated,
  SandboxDetail,
  SandboxMetric,
  SnapshotInfo,
  TemplateInfo,
  VolumeListed,
} from "@aenv/protocol";
import type { ApiKeyLimits } from "@aenv/protocol/rest";

/**
 * The dashboard's only way to the control plane: the public REST API of the origin that
 * served the page, with the key in X-API-Key. The key lives in sessionStorage (gone with
 * the tab), never in a URL.
 */
const KEY = "aenv.apiKey";

export function storedKey(): string | undefined {
  return sessionStorage.getItem(KEY) ?? undefined;
}
export function storeKey(key: string): void {
  sessionStorage.setItem(KEY, key);
}
export function forgetKey(): void {
  sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Called when any call is refused for the key (401): the page goes back to sign-in. */
let onUnauthorized: () => void = () => {};
export function setUnauthorizedHandler(f: () => void): void {
  onUnauthorized = f;
}

interface Answer<T> {
  body: T;
  headers: Headers;
}

async function call<T>(method: string, path: string, body?: unknown, key = storedKey()): Promise<Answer<T>> {
  if (!key) throw new ApiError(401, "not signed in");
  const r = await fetch(path, {
    method,
    headers: { "x-api-key": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await r.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  if (!r.ok) {
    const msg = (parsed as Partial<ErrorBody> | undefined)?.message ?? `${r.status} ${r.statusText}`;
    if (r.status === 401) onUnauthorized();
    throw new ApiError(r.status, msg);
  }
  return { body: parsed as T, headers: r.headers };
}

const get = async <T>(path: string) => (await call<T>("GET", path)).body;
const enc = encodeURIComponent;

/** Every page of a paginated list (x-next-token). */
async function all<T>(path: string): Promise<T[]> {
  const out: T[] = [];
  let token: string | null = null;
  for (let i = 0; i < 1000; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const a: Answer<T[]> = await call<T[]>("GET", `${path}${sep}limit=100${token ? `&nextToken=${enc(token)}` : ""}`);
    out.push(...a.body);
    token = a.headers.get("x-next-token");
    if (!token) break;
  }
  return out;
}

/** Whether a key is the server's: one cheap authenticated call. */
export async function checkKey(key: string): Promise<boolean> {
  try {
    await call("GET", "/v2/sandboxes?limit=1", undefined, key);
    return true;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return false;
    throw err;
  }
}

export interface SandboxFilter {
  state: "all" | "running" | "hibernated" | "paused";
  template: string;
  /** `key=value` pairs, `&`-separated, as the API's metadata filter takes them. */
  metadata: string;
}

export async function listSandboxes(f: SandboxFilter): Promise<ListedSandbox[]> {
  // Hibernated sandboxes are running ones to the API; the dashboard tells them apart.
  const state = f.state === "all" ? "running,paused" : f.state === "hibernated" ? "running" : f.state;
  const q = new URLSearchParams({ state });
  if (f.template.trim()) q.set("template", f.template.trim());
  if (f.metadata.trim()) q.set("metadata", f.metadata.trim());
  const items = await all<ListedSandbox>(`/v2/sandboxes?${q}`);
  return f.state === "hibernated" ? items.filter((s) => s.hibernation) : items;
}

export const api = {
  sandbox: (id: string) => get<SandboxDetail>(`/sandboxes/${enc(id)}`),
  metrics: (id: string) => get<SandboxMetric[]>(`/sandboxes/${enc(id)}/metrics`),
  pause: (id: string) => call<void>("POST", `/sandboxes/${enc(id)}/pause`, {}),
  resume: (id: string) => call<SandboxCreated>("POST", `/sandboxes/${enc(id)}/resume`, {}),
  kill: (id: string) => call<void>("DELETE", `/sandboxes/${enc(id)}`),
  fork: async (id: string, count: number) =>
    (await call<ForkResult[]>("POST", `/sandboxes/${enc(id)}/fork`, { count })).body,
  snapshot: async (id: string, name?: string) =>
    (await call<SnapshotInfo>("POST", `/sandboxes/${enc(id)}/snapshots`, name ? { name } : {})).body,
  templates: () => get<TemplateInfo[]>("/templates"),
  buildStatus: (templateId: string, buildId: string, logsOffset: number) =>
    get<BuildStatus>(`/templates/${enc(templateId)}/builds/${enc(buildId)}/status?logsOffset=${logsOffset}`),
  snapshots: () => all<SnapshotInfo>("/snapshots"),
  volumes: () => get<VolumeListed[]>("/volumes"),
  /** A gateway's nodes; a single server without a cluster answers 404. */
  nodes: () => get<NodeInfo[]>("/nodes"),
  /** API keys: the operator's key only (others: 403). */
  keys: () => get<ApiKeyInfo[]>("/api-keys"),
  createKey: async (name: string, limits?: ApiKeyLimits) =>
    (await call<CreatedApiKey>("POST", "/api-keys", { name, ...(limits ? { limits } : {}) })).body,
  revokeKey: (id: string) => call<void>("DELETE", `/api-keys/${enc(id)}`),
};

/** E2B's node shape (GET /nodes). */
export interface NodeInfo {
  nodeID: string;
  status: string;
  sandboxCount: number;
  pausedCount?: number;
  capacity?: number;
  allocatedCPU?: number;
  allocatedMemoryMiB?: number;
  version?: string;
  url?: string;
}
