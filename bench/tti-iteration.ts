/**
 * One TTI iteration as ComputeSDK's benchmark runs it (computesdk/benchmarks,
 * src/sandbox/benchmark.ts), through their provider interface: timer on, `sandbox.create()`,
 * the identity probe (must exit 0), `node -v` (must exit 0), timer off, then `destroy()`
 * outside the timer. Same timeouts: 120 s for the create, 30 s for each command, 15 s for the
 * destroy. Also records the split between the three timed steps, which theirs does not.
 */
import { randomUUID } from "node:crypto";

/** What the benchmark needs of a ComputeSDK sandbox (the provider package's GeneratedSandbox). */
export interface TtiSandbox {
  readonly sandboxId: string;
  runCommand(command: string): Promise<{ exitCode: number; stdout?: string; stderr?: string }>;
  destroy(): Promise<void>;
}

/** What it needs of a ComputeSDK provider instance (`e2b({ apiKey })`). */
export interface TtiCompute {
  readonly sandbox: { create(options?: { templateId?: string }): Promise<TtiSandbox> };
}

export type FailureKind = "http429" | "http503" | "timeout" | "other";
export type Step = "create" | "probe" | "node";

export interface Iteration {
  /** create → probe → `node -v` in ms; 0 for a failure, as theirs records it. */
  ttiMs: number;
  createMs?: number;
  probeMs?: number;
  nodeMs?: number;
  error?: string;
  failure?: FailureKind;
  failedAt?: Step;
  /** Three or more strong identity signals (namespaces, cgroup, boot id, pid 1) seen before in this mode. */
  reuseSuspected?: boolean;
  /** `node -v`'s output. */
  nodeVersion?: string;
  /** From the mode's start, for staggered and burst launches. */
  launchedAtMs?: number;
  readyAtMs?: number;
}

const CREATE_TIMEOUT_MS = 120_000;
const COMMAND_TIMEOUT_MS = 30_000;
const DESTROY_TIMEOUT_MS = 15_000;
const MARKER_A = "/tmp/.bench_ephemeral_check";
const MARKER_B = "/var/tmp/.bench_ephemeral_check";
/** The signals theirs counts as strong evidence that a sandbox is an earlier one reused. */
const STRONG = ["ns_mnt", "ns_pid", "ns_uts", "cgroup_hash", "boot_id", "pid1"] as const;

/** Per mode, as theirs keeps one per run: a nonce for the markers and every strong signal seen. */
export class ReuseDetector {
  readonly nonce = randomUUID();
  private readonly seen = new Map<string, Set<string>>();

  /** Counts this identity's strong signals seen before, then remembers them. */
  check(identity: Record<string, string>): number {
    let matches = 0;
    for (const key of STRONG) {
      const v = identity[key];
      if (!v || v === "unknown") continue;
      const set = this.seen.get(key) ?? new Set<string>();
      if (set.has(v)) matches++;
      set.add(v);
      this.seen.set(key, set);
    }
    return matches;
  }
}

/**
 * The identity probe, the same shell line theirs runs: reads a marker an earlier sandbox would
 * have left, prints namespace links, a hash of the cgroup, the boot id, pid 1's command line and
 * the uptime, then writes this run's token to both markers.
 */
export function probeCommand(token: string): string {
  const sh = (v: string) => `printf '${v}=%s\\n' "$${v}"`;
  return [
    `marker_a='${MARKER_A}'`,
    `marker_b='${MARKER_B}'`,
    "marker_path=''",
    'for p in "$marker_a" "$marker_b"; do if [ -f "$p" ]; then marker_path=$p; break; fi; done',
    "marker_value='unknown'",
    `if [ -n "$marker_path" ]; then marker_value=$(tr -d '\\n' < "$marker_path" 2>/dev/null || true); fi`,
    "ns_mnt=$(readlink /proc/self/ns/mnt 2>/dev/null || printf unknown)",
    "ns_pid=$(readlink /proc/self/ns/pid 2>/dev/null || printf unknown)",
    "ns_uts=$(readlink /proc/self/ns/uts 2>/dev/null || printf unknown)",
    'cgroup_hash=$(cat /proc/self/cgroup 2>/dev/null | sha256sum 2>/dev/null | cut -d" " -f1)',
    'if [ -z "$cgroup_hash" ]; then cgroup_hash=unknown; fi',
    "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || printf unknown)",
    "pid1=$(tr -d '\\0' < /proc/1/cmdline 2>/dev/null || printf unknown)",
    "uptime=$(cut -d' ' -f1 /proc/uptime 2>/dev/null || printf unknown)",
    ...["marker_path", "marker_value", "ns_mnt", "ns_pid", "ns_uts", "cgroup_hash", "boot_id", "pid1", "uptime"].map(
      sh,
    ),
    `printf '%s' '${token}' > ${MARKER_A}`,
    `printf '%s' '${token}' > ${MARKER_B}`,
  ].join("; ");
}

function parseKeyValues(stdout: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of stdout.split("\n")) {
    const i = line.indexOf("=");
    if (i <= 0) continue;
    const key = line.slice(0, i).trim();
    if (key) out[key] = line.slice(i + 1).trim();
  }
  return out;
}

/**
 * The kind of a failure, from its message alone: the provider package rewrites the SDK's
 * errors ("Rate limit exceeded" becomes "E2B quota exceeded…"), and a command's transport error
 * comes back as exit 127 with the message as stderr, so no status code survives to look at.
 */
export function failureKind(message: string): FailureKind {
  if (/\b429\b|rate limit|quota exceeded|too many requests/i.test(message)) return "http429";
  if (/\b503\b|service (temporarily )?unavailable/i.test(message)) return "http503";
  if (/timed out|timeout|deadline/i.test(message)) return "timeout";
  return "other";
}

/** Rejects after ms with message; the promise itself runs on (theirs cannot cancel it either). */
function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]);
}

export interface IterationHooks {
  /** A sandbox destroy() failed or timed out (it may be left running). */
  onDestroyFailed?: (id: string, err: Error) => void;
}

/** Runs one iteration; never throws: a failure is an Iteration with `error` set. */
export async function runIteration(
  compute: TtiCompute,
  detector: ReuseDetector,
  templateId: string | undefined,
  hooks: IterationHooks = {},
): Promise<Iteration> {
  let sandbox: TtiSandbox | undefined;
  let step: Step = "create";
  let abandoned = false;
  const it: Iteration = { ttiMs: 0 };
  const t0 = performance.now();
  try {
    const creating = compute.sandbox.create(templateId ? { templateId } : undefined);
    // A create that answers after its timeout would leave a sandbox nobody destroys.
    creating.then(
      (late) => {
        if (abandoned) void destroy(late, hooks);
      },
      () => {},
    );
    sandbox = await withTimeout(creating, CREATE_TIMEOUT_MS, "Sandbox creation timed out");
    const t1 = performance.now();
    it.createMs = t1 - t0;

    step = "probe";
    const token = `${detector.nonce}:${Date.now().toString(36)}:${Math.random().toString(36).slice(2, 10)}`;
    const probe = await withTimeout(
      sandbox.runCommand(probeCommand(token)),
      COMMAND_TIMEOUT_MS,
      "Sandbox identity check timed out",
    );
    if (probe.exitCode !== 0)
      throw new Error(
        `Sandbox identity check failed with exit code ${probe.exitCode}: ${probe.stderr || "Unknown error"}`,
      );
    const identity = parseKeyValues(probe.stdout ?? "");
    if (identity.marker_path)
      throw new Error(`Sandbox/container reuse detected: persistent marker at ${identity.marker_path}`);
    // Theirs only warns (BENCH_REUSE_DEBUG); a restored image repeats these by design.
    it.reuseSuspected = detector.check(identity) >= 3;
    const t2 = performance.now();
    it.probeMs = t2 - t1;

    step = "node";
    const node = await withTimeout(
      sandbox.runCommand("node -v"),
      COMMAND_TIMEOUT_MS,
      "First command execution timed out",
    );
    if (node.exitCode !== 0)
      throw new Error(`Command failed with exit code ${node.exitCode}: ${node.stderr || "Unknown error"}`);
    const t3 = performance.now();
    it.nodeMs = t3 - t2;
    it.ttiMs = t3 - t0;
    it.nodeVersion = (node.stdout ?? "").trim();
  } catch (err) {
    if (!sandbox) abandoned = true;
    it.error = (err instanceof Error ? err.message : String(err)).trim();
    it.failure = failureKind(it.error);
    it.failedAt = step;
  } finally {
    if (sandbox) await destroy(sandbox, hooks);
  }
  return it;
}

async function destroy(s: TtiSandbox, hooks: IterationHooks): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      s.destroy(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("Destroy timeout")), DESTROY_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    hooks.onDestroyFailed?.(s.sandboxId, err as Error);
  } finally {
    clearTimeout(timer);
  }
}
