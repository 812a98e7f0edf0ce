/**
 * How long each operation of the simulated runtime takes: a log-normal distribution per
 * operation, given by its median and 95th percentile as measured on the project's benchmark
 * host (a 2-vCPU Debian 12 VM, runsc 20240729 on systrap), from docs/benchmarks.md:
 *
 * - boot: a cold boot of a template tree with envd as init, ≈ 1 s (booting a runtime inside
 *   gVisor; the cold start of a cached tree → serving measured 1.58 s with the command);
 * - restore: `runsc restore` of a warm image or pause image with its disk, 358–397 ms
 *   ("What limits each figure: Resume from an image");
 * - checkpoint: `runsc checkpoint` of a running sandbox, memory save 70–111 ms plus the rest
 *   of the save (raw checkpoint 105–143 ms, ours ~2× raw);
 * - suspend: `runsc pause` (a pause answers in 69 ms in all, HTTP included);
 * - unsuspend: `runsc resume` (resume right after a pause → first command 128 ms);
 * - freeze / thaw: the cgroup freezer (a warm-pool claim is 20 ms with envd's /init);
 * - destroy: `runsc delete` under a subreaper, off every caller's path;
 * - command: `commands.run('true')` inside the sandbox, `bash -l -c true` (52.9 ms p50 through
 *   the SDK; ~40 ms of it the fork+exec in gVisor).
 *
 * The figures are sleeps, not work: a simulated sandbox costs its node no CPU, so one host
 * runs many simulated nodes and what is measured is the node, gateway and Redis around them.
 */
export type SimOperation =
  | "boot"
  | "restore"
  | "checkpoint"
  | "suspend"
  | "unsuspend"
  | "freeze"
  | "thaw"
  | "destroy"
  | "command";

export interface LatencyFigure {
  medianMs: number;
  p95Ms: number;
}

export const SIM_LATENCIES: Readonly<Record<SimOperation, LatencyFigure>> = {
  boot: { medianMs: 1000, p95Ms: 1500 },
  restore: { medianMs: 375, p95Ms: 450 },
  checkpoint: { medianMs: 150, p95Ms: 250 },
  suspend: { medianMs: 40, p95Ms: 70 },
  unsuspend: { medianMs: 30, p95Ms: 60 },
  freeze: { medianMs: 5, p95Ms: 15 },
  thaw: { medianMs: 5, p95Ms: 15 },
  destroy: { medianMs: 50, p95Ms: 150 },
  command: { medianMs: 45, p95Ms: 90 },
};

/** z of the 95th percentile of the standard normal distribution. */
const Z95 = 1.6448536;

/**
 * Draws operation times. `scale` multiplies every figure (0: every operation is immediate,
 * for tests); `random` is the uniform source (injectable so a test can pin the draws).
 */
export class LatencyModel {
  constructor(
    private readonly scale = 1,
    private readonly random: () => number = Math.random,
    private readonly figures: Readonly<Record<SimOperation, LatencyFigure>> = SIM_LATENCIES,
  ) {
    if (!(scale >= 0) || !Number.isFinite(scale)) throw new Error(`latency scale must be >= 0, got ${scale}`);
  }

  /** One draw for an operation, in milliseconds. */
  sample(op: SimOperation): number {
    if (this.scale === 0) return 0;
    const f = this.figures[op];
    const sigma = Math.log(f.p95Ms / f.medianMs) / Z95;
    return this.scale * f.medianMs * Math.exp(sigma * this.normal());
  }

  /** Waits one draw of the operation's time. */
  async wait(op: SimOperation): Promise<void> {
    const ms = this.sample(op);
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
  }

  /** A standard normal draw (Box–Muller), from two uniform draws. */
  private normal(): number {
    const u = Math.max(this.random(), Number.MIN_VALUE);
    const v = this.random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
}
