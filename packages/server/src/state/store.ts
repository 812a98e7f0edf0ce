/** What the node persists about a sandbox; enough to report, clean up and (later) resume it. */
export type SandboxState = "creating" | "running" | "paused" | "killing";

export interface SandboxRecord {
  id: string;
  templateId: string;
  alias: string;
  clientId: string;
  envdToken: string;
  startedAt: number;
  endAt: number;
  state: SandboxState;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  allowInternet: boolean;
  autoPause: boolean;
  autoResume: boolean;
  slotIndex: number | null;
  dir: string;
}

/** The seam for node-local state: SQLite here, Redis-backed views come with clustering. */
export interface StateStore {
  put(rec: SandboxRecord): void;
  delete(id: string): void;
  get(id: string): SandboxRecord | undefined;
  all(): SandboxRecord[];
  close(): void;
}
