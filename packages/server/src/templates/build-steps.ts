/**
 * A build's steps: the base tree, the COPY contexts staged, and each step run in the build
 * sandbox through envd. builder.ts runs them in order and owns the build's record and template.
 */
import { mkdirSync, rmSync } from "node:fs";
import { join, posix } from "node:path";
import { envdProcess, type ProcessSpec } from "../orchestrator/envd-process.js";
import { DEFAULT_PATH, type TemplateStore, usable } from "../state/template-catalog.js";
import type { Credentials } from "../storage/images/auth.js";
import { exec } from "../util/exec.js";
import { LineSplitter, type LogEntry } from "./build-log.js";
import type { ContextFiles } from "./context-files.js";
import { inSandbox } from "./in-sandbox.js";
import { registryCredentials } from "./registry-access.js";
import type { BuildStart, BuildStep } from "./spec.js";

/** What a build needs from the image machinery: a tree and its config. */
export interface ImageProvider {
  /** Pulls (layers cached) and unpacks `ref` into the new folder `dest`. */
  /** `credentials`: the build's own for the image's registry (never stored, never logged). */
  pullInto(
    ref: string,
    dest: string,
    onLog: (message: string) => void,
    credentials?: Credentials,
  ): Promise<{ ref: string; digest: string; env: Record<string, string>; workdir?: string; user?: string }>;
}

/** Where the staged COPY contexts are mounted in the build sandbox. */
export const STAGING_MOUNT = "/.aenv-build";
const RUN_TIMEOUT_MS = 30 * 60_000;

/** What the steps so far set: the environment, build args, user and folder later steps run with. */
export interface StepContext {
  env: Record<string, string>;
  args: Record<string, string>;
  user: string;
  workdir: string;
  userSet?: string;
  workdirSet?: string;
  bash: boolean;
  /** A base template's start and ready commands: kept unless the build sets its own. */
  startCmd?: string;
  readyCmd?: string;
}

/** A build failure, with the step it failed in (the build status names it). */
export class StepFailure extends Error {
  constructor(
    message: string,
    readonly step: string,
  ) {
    super(message);
  }
}

export type StepLog = (level: LogEntry["level"], message: string, step?: string) => void;

/** The starting tree: an image unpacked, or a copy of another template's tree. */
export async function baseTree(
  d: { images: ImageProvider; templates: TemplateStore },
  spec: BuildStart,
  dest: string,
  onLog: (m: string) => void,
): Promise<StepContext & { imageDigest?: string }> {
  if (spec.fromImage) {
    onLog(`FROM ${spec.fromImage}`);
    const credentials = await registryCredentials(spec.fromImageRegistry);
    const img = await d.images.pullInto(spec.fromImage, dest, onLog, credentials);
    return {
      env: { ...img.env },
      args: {},
      user: "root",
      workdir: img.workdir || "/",
      ...(img.user && img.user !== "root" && img.user !== "0" ? { userSet: img.user } : {}),
      ...(img.workdir && img.workdir !== "/" ? { workdirSet: img.workdir } : {}),
      bash: false,
      imageDigest: img.digest,
    };
  }
  const from = d.templates.get(spec.fromTemplate ?? "base");
  if (!from || !usable(from)) throw new Error(`base template '${spec.fromTemplate ?? "base"}' not found`);
  onLog(`FROM template ${from.name} (revision ${from.revision})`);
  await exec("cp", ["-a", "--reflink=auto", from.rootfs, dest], { timeoutMs: 30 * 60_000 });
  // A template on top of another keeps what runs in it (code-interpreter-v1's service).
  const run = { startCmd: from.startCmd, readyCmd: from.readyCmd };
  return { env: { ...from.env }, args: {}, user: "root", workdir: "/", bash: false, ...run };
}

/** Unpacks each COPY step's uploaded context where the build sandbox sees it. */
export async function stageFiles(
  files: ContextFiles,
  templateId: string,
  steps: BuildStep[],
  staging: string,
): Promise<void> {
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  for (const [i, s] of steps.entries()) {
    if (!s.filesHash || !["COPY", "ADD"].includes(s.type.toUpperCase())) continue;
    const dir = join(staging, `copy-${i}`);
    mkdirSync(dir);
    // GNU tar refuses `..` members and strips leading '/'; the tree is ours alone, and the
    // copy into the rootfs happens inside the sandbox.
    const r = await exec("tar", ["-xf", files.path(templateId, s.filesHash), "-C", dir, "--no-same-owner"], {
      allowFail: true,
      timeoutMs: 10 * 60_000,
    });
    if (r.code !== 0) {
      throw new StepFailure(`files of step ${i + 1} are not a readable tar archive: ${r.stderr.trim()}`, String(i + 1));
    }
  }
}

/** Runs a helper command of a step; its output is the step's log, a failure the step's. */
export async function must(ip: string, p: ProcessSpec, step: string, log: StepLog): Promise<void> {
  const out = new LineSplitter((line) => log("info", line, step));
  const r = await envdProcess(ip, p, { onOutput: (_s, text) => out.push(text) });
  out.flush();
  if (r.exitCode !== 0) throw new StepFailure(`step ${step} failed (exit code ${r.exitCode})`, step);
}

/** Step `i` of a build, run in the build sandbox at `ip`; ENV, ARG, WORKDIR and USER change `ctx`. */
export async function runStep(ip: string, i: number, s: BuildStep, ctx: StepContext, log: StepLog): Promise<void> {
  const step = String(i + 1);
  const type = s.type.toUpperCase();
  const [a0 = "", a1 = "", a2 = "", a3 = ""] = s.args;
  log("info", `Step ${step}: ${type} ${s.args.filter(Boolean).join(" ")}`, step);
  switch (type) {
    case "RUN": {
      const user = a1 || ctx.user;
      const env = { PATH: DEFAULT_PATH, ...ctx.env, ...ctx.args };
      const out = new LineSplitter((line) => log("info", line, step));
      let r: { exitCode: number; error?: string };
      try {
        r = await envdProcess(
          ip,
          {
            cmd: ctx.bash ? "/bin/bash" : "/bin/sh",
            args: ["-c", a0],
            envs: env,
            cwd: ctx.workdir,
            user,
            timeoutMs: RUN_TIMEOUT_MS,
          },
          { onOutput: (_stream, text) => out.push(text) },
        );
      } catch (err) {
        throw new StepFailure(`step ${step} (RUN) could not start: ${(err as Error).message}`, step);
      } finally {
        out.flush();
      }
      if (r.exitCode !== 0) {
        throw new StepFailure(`step ${step} (RUN ${a0}) exited with code ${r.exitCode}`, step);
      }
      return;
    }
    case "ENV":
      for (let k = 0; k + 1 < s.args.length; k += 2) ctx.env[s.args[k] as string] = s.args[k + 1] as string;
      return;
    case "ARG":
      if (a0.includes("=")) {
        const [k, ...v] = a0.split("=");
        ctx.args[k as string] = v.join("=");
      } else ctx.args[a0] = a1;
      return;
    case "WORKDIR": {
      const dir = posix.resolve(ctx.workdir, a0);
      await must(ip, inSandbox.mkdir(dir), step, log);
      ctx.workdir = dir;
      ctx.workdirSet = dir;
      return;
    }
    case "USER":
      if (a0 !== "root" && a0 !== "0") await must(ip, inSandbox.ensureUser(a0), step, log);
      ctx.user = a0;
      ctx.userSet = a0;
      return;
    case "COPY":
    case "ADD": {
      const dest = posix.resolve(ctx.workdir, a1) + (a1.endsWith("/") ? "/" : "");
      await must(ip, inSandbox.copy(`${STAGING_MOUNT}/copy-${i}`, a0, dest, a2 || ctx.user, a3), step, log);
      return;
    }
    default:
      log("warn", `${type} is recorded as metadata only`, step);
  }
}
