/**
 * Layer progress from image builds. The server logs one line per layer state change, shaped
 *   `pull layer <12 hex> <state> <bytes>/<size>` or `unpack layer <12 hex> <state> <bytes>/<size>`.
 */
export type LayerPhase = "pull" | "unpack";
export type LayerState = "waiting" | "cached" | "downloading" | "done" | "extracting" | "extracted";

export interface LayerLine {
  phase: LayerPhase;
  digest: string;
  state: LayerState;
  bytes: number;
  size: number;
}

const LINE = /^(pull|unpack) layer ([0-9a-f]{12}) (waiting|cached|downloading|done|extracting|extracted) (\d+)\/(\d+)$/;

/** The layer progress in a build log line, or undefined for any other line. */
export function parseLayerLine(message: string): LayerLine | undefined {
  const m = LINE.exec(message.trim());
  if (!m) return undefined;
  return {
    phase: m[1] as LayerPhase,
    digest: m[2] as string,
    state: m[3] as LayerState,
    bytes: Number(m[4]),
    size: Number(m[5]),
  };
}

export function formatBytes(b: number): string {
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = b;
  while (v >= 1000 && i < u.length - 1) {
    v /= 1000;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)}${u[i]}`;
}

/** Finished states fill the bar whatever the byte counts say (a cached layer moves no bytes). */
function fraction(l: LayerLine): number {
  if (l.state === "cached" || l.state === "done" || l.state === "extracted") return 1;
  if (l.size <= 0) return 0;
  return Math.min(1, Math.max(0, l.bytes / l.size));
}

/** One bar: `<digest> <phase state padded> [=====>    ] 1.2MB/3.4MB`. */
export function renderBar(l: LayerLine, width = 24): string {
  const f = fraction(l);
  const full = Math.round(f * width);
  const bar = f >= 1 ? "=".repeat(width) : `${"=".repeat(Math.max(0, full - 1))}${full > 0 ? ">" : ""}`.padEnd(width);
  const label = `${l.phase === "pull" ? "pull" : "unpack"} ${l.state}`.padEnd(18);
  const sizes = l.state === "cached" ? "cached" : `${formatBytes(l.bytes)}/${formatBytes(l.size)}`;
  return `${l.digest} ${label} [${bar}] ${sizes}`;
}

/** Latest state of every layer, in the order they first appeared (one bar per layer). */
export class LayerBoard {
  private readonly layers = new Map<string, LayerLine>();

  update(l: LayerLine): void {
    this.layers.set(l.digest, l);
  }

  get size(): number {
    return this.layers.size;
  }

  lines(width?: number): string[] {
    return [...this.layers.values()].map((l) => renderBar(l, width));
  }
}
