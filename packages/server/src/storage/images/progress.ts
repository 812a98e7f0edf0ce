/** Per-layer progress for pulls and unpacks, throttled so byte counts do not flood a CLI or log stream. */

export type LayerState = "waiting" | "cached" | "downloading" | "done" | "extracting" | "extracted";

export interface LayerProgress {
  digest: string;
  /** Compressed size (the blob's size). */
  size: number;
  /** Bytes downloaded (pull) or read from the stored blob (unpack). */
  bytes: number;
  state: LayerState;
}

export interface Progress {
  phase: "pull" | "unpack";
  layers: LayerProgress[];
  /** Sums over layers. */
  bytes: number;
  totalBytes: number;
  layersDone: number;
  layersTotal: number;
}

/** Gets the whole picture plus the layer that just changed. */
export type ProgressCallback = (progress: Progress, changed: LayerProgress) => void;

const DONE: ReadonlySet<LayerState> = new Set(["cached", "done", "extracted"]);

export class ProgressTracker {
  private readonly layers: LayerProgress[];
  private lastEmit = 0;

  constructor(
    private readonly phase: "pull" | "unpack",
    layers: { digest: string; size: number }[],
    private readonly cb?: ProgressCallback,
    private readonly intervalMs = 100,
  ) {
    this.layers = layers.map((l) => ({ digest: l.digest, size: l.size, bytes: 0, state: "waiting" }));
  }

  state(i: number, state: LayerState): void {
    const l = this.layers[i]!;
    l.state = state;
    if (state === "cached" || state === "done" || state === "extracted") l.bytes = l.size;
    this.emit(l, true);
  }

  bytes(i: number, n: number): void {
    const l = this.layers[i]!;
    l.bytes = n;
    this.emit(l, false);
  }

  snapshot(): Progress {
    const layers = this.layers.map((l) => ({ ...l }));
    return {
      phase: this.phase,
      layers,
      bytes: layers.reduce((s, l) => s + l.bytes, 0),
      totalBytes: layers.reduce((s, l) => s + l.size, 0),
      layersDone: layers.filter((l) => DONE.has(l.state)).length,
      layersTotal: layers.length,
    };
  }

  private emit(l: LayerProgress, force: boolean): void {
    if (!this.cb) return;
    const now = performance.now();
    if (!force && now - this.lastEmit < this.intervalMs) return;
    this.lastEmit = now;
    this.cb(this.snapshot(), { ...l });
  }
}
