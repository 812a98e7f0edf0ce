import {
  type ApiKeyInfo,
  type BuildStatus,
  type CreatedApiKey,
  E2B_SANDBOX_ID_HEADER,
  E2B_SANDBOX_PORT_HEADER,
  type ErrorBody,
  type ForkResult,
  type ListedSandbox,
  type SandboxCreated,
  type SnapshotInfo,
  type TemplateInfo,
  TRAFFIC_TOKEN_HEADER,
} from "@aenv/protocol";
import { CODE_INTERPRETER_PORT, type ExecuteRequest } from "@aenv/protocol/code-interpreter";
import type { ApiKeyLimits, ColdSandboxBody, NewSandboxBody } from "@aenv/protocol/rest";
import { Sandbox } from "e2b";
import type { ResolvedConfig } from "./config.js";
import { CliError } from "./errors.js";

export type {
  ApiKeyInfo,
  ApiKeyLimits,
  BuildStatus,
  CreatedApiKey,
  ForkResult,
  ListedSandbox,
  SandboxCreated,
  SnapshotInfo,
  TemplateInfo,
};

export type ColdOptions = ColdSandboxBody;
export type CreateOptions = NewSandboxBody;

/** HTTP status of a failed control-plane call (for callers that treat some as "unsupported"). */
export class ApiError extends CliError {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message, 1);
  }
}

/** A failed answer as one error: the server's (or proxy's, or service's) message, else its status. */
function httpError(r: Response, text: string): ApiError {
  let msg = text.trim();
  try {
    // A body from the server is ErrorBody; anything in between (a proxy) may answer otherwise.
    const j = JSON.parse(text) as Partial<Record<keyof ErrorBody, unknown>>;
    if (typeof j.message === "string") msg = j.message;
  } catch {
    // not JSON: keep the text
  }
  if (r.status === 401 || r.status === 403) msg = `${msg || "unauthorized"} (check 'aenv auth' or AENV_API_KEY)`;
  return new ApiError(r.status, `${msg.split("\n")[0] || r.statusText} (HTTP ${r.status})`);
}

/** The control-plane calls the e2b SDK lacks (or hides), over plain fetch. */
export class Api {
  constructor(readonly cfg: ResolvedConfig) {}

  private key(): string {
    if (!this.cfg.apiKey) throw new CliError("no API key: run 'aenv auth' or set AENV_API_KEY");
    return this.cfg.apiKey;
  }

  /** fetch on this server; a server that cannot be reached is one line saying so. */
  private async send(path: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(`${this.cfg.apiUrl}${path}`, init);
    } catch (e) {
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const why = cause?.code ?? cause?.message ?? (e as Error).message;
      throw new CliError(`cannot reach ${this.cfg.apiUrl}: ${why}`);
    }
  }

  async request<T>(method: string, path: string, body?: unknown, timeoutMs = 120_000): Promise<T> {
    const r = await this.send(path, {
      method,
      headers: {
        "x-api-key": this.key(),
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await r.text();
    if (!r.ok) throw httpError(r, text);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  list(q: { state?: string; metadata?: string } = {}): Promise<ListedSandbox[]> {
    const p = new URLSearchParams();
    if (q.state) p.set("state", q.state);
    if (q.metadata) p.set("metadata", q.metadata);
    const qs = p.toString();
    return this.request("GET", `/v2/sandboxes${qs ? `?${qs}` : ""}`);
  }
  create(o: CreateOptions): Promise<SandboxCreated> {
    return this.request("POST", "/sandboxes", o);
  }
  kill(id: string): Promise<void> {
    return this.request("DELETE", `/sandboxes/${encodeURIComponent(id)}`);
  }
  /** memory: false keeps only the sandbox's files (a filesystem-only pause). */
  pause(id: string, opts: { memory?: boolean } = {}): Promise<void> {
    const body = opts.memory === false ? { memory: false } : {};
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/pause`, body);
  }
  resume(id: string): Promise<SandboxCreated> {
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/connect`, {});
  }
  setTimeout(id: string, seconds: number): Promise<void> {
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/timeout`, { timeout: seconds });
  }
  /** Extends the TTL to at least now+seconds; never shortens it. */
  refresh(id: string, seconds: number): Promise<void> {
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/refreshes`, { duration: seconds });
  }
  fork(id: string, count: number): Promise<ForkResult[]> {
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/fork`, { count });
  }
  snapshot(id: string, name?: string): Promise<SnapshotInfo> {
    return this.request("POST", `/sandboxes/${encodeURIComponent(id)}/snapshots`, name ? { name } : {});
  }
  snapshots(sandboxID?: string): Promise<SnapshotInfo[]> {
    return this.request("GET", `/snapshots${sandboxID ? `?sandboxID=${encodeURIComponent(sandboxID)}` : ""}`);
  }
  apiKeys(): Promise<ApiKeyInfo[]> {
    return this.request("GET", "/api-keys");
  }
  createApiKey(name: string, limits?: ApiKeyLimits): Promise<CreatedApiKey> {
    return this.request("POST", "/api-keys", { name, ...(limits ? { limits } : {}) });
  }
  updateApiKey(id: string, body: { name?: string; limits?: ApiKeyLimits | null }): Promise<ApiKeyInfo> {
    return this.request("PATCH", `/api-keys/${encodeURIComponent(id)}`, body);
  }
  revokeApiKey(id: string): Promise<void> {
    return this.request("DELETE", `/api-keys/${encodeURIComponent(id)}`);
  }
  deleteSnapshot(id: string): Promise<void> {
    return this.request("DELETE", `/templates/${encodeURIComponent(id)}`);
  }
  templates(): Promise<TemplateInfo[]> {
    return this.request("GET", "/templates");
  }
  template(ref: string): Promise<TemplateInfo> {
    return this.request("GET", `/templates/${encodeURIComponent(ref)}`);
  }
  deleteTemplate(ref: string): Promise<void> {
    return this.request("DELETE", `/templates/${encodeURIComponent(ref)}`);
  }
  buildStatus(templateID: string, buildID: string, logsOffset: number): Promise<BuildStatus> {
    const t = encodeURIComponent(templateID);
    return this.request("GET", `/templates/${t}/builds/${encodeURIComponent(buildID)}/status?logsOffset=${logsOffset}`);
  }
  /** A sandbox booted straight from an image reference (imported on first use). */
  createCold(o: ColdOptions): Promise<SandboxCreated> {
    // The first start of an image pulls it: allow for a slow registry.
    return this.request("POST", "/sandboxes-cold", o, 30 * 60_000);
  }

  /**
   * POST /execute of the code-interpreter service (port 49999) through the server's proxy, as
   * @e2b/code-interpreter sends it: routed by E2B's headers, with the sandbox's envd access
   * token (the service knows the sandbox by it) and its traffic token when it has them.
   * Answers the NDJSON stream of the cell's lines.
   */
  async execute(sbx: SandboxCreated, body: ExecuteRequest, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    const r = await this.send("/execute", {
      method: "POST",
      headers: {
        "content-type": "application/json",
        [E2B_SANDBOX_ID_HEADER]: sbx.sandboxID,
        [E2B_SANDBOX_PORT_HEADER]: String(CODE_INTERPRETER_PORT),
        ...(sbx.envdAccessToken ? { "x-access-token": sbx.envdAccessToken } : {}),
        ...(sbx.trafficAccessToken ? { [TRAFFIC_TOKEN_HEADER]: sbx.trafficAccessToken } : {}),
      },
      body: JSON.stringify(body),
      signal,
    });
    if (!r.ok || !r.body) throw httpError(r, await r.text());
    return r.body;
  }

  /** An e2b SDK handle for sandbox traffic (commands, pty, files), pointed at this server. */
  async connect(id: string): Promise<Sandbox> {
    return Sandbox.connect(id, { apiUrl: this.cfg.apiUrl, sandboxUrl: this.cfg.apiUrl, apiKey: this.key() });
  }
}
