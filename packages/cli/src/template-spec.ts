import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Template, type TemplateBuilder, type TemplateClass } from "e2b";
import type { DockerSpec } from "./dockerfile.js";

export interface SpecTemplate {
  template: TemplateClass;
  /** Dockerfile line of each build step (index = server step number - 1); 0 for implicit steps. */
  stepLines: number[];
}

/** `.dockerignore` patterns of the context folder, as the SDK's fileIgnorePatterns. */
export function dockerignore(contextDir: string): string[] {
  const p = join(contextDir, ".dockerignore");
  if (!existsSync(p)) return [];
  return readFileSync(p, "utf8")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
}

/**
 * The SDK builder calls for a parsed spec, with the same conventions as the SDK's own
 * fromDockerfile: steps run as root in /, and sandboxes default to `user` in /home/user
 * unless the file sets USER / WORKDIR.
 */
export function specToTemplate(spec: DockerSpec, contextDir: string, readyOverride?: string): SpecTemplate {
  let t: TemplateBuilder = Template({ fileContextPath: contextDir, fileIgnorePatterns: dockerignore(contextDir) })
    .fromImage(spec.from)
    .setUser("root")
    .setWorkdir("/");
  const stepLines = [0, 0];
  let userSet = false;
  let workdirSet = false;
  for (const s of spec.steps) {
    stepLines.push(s.line);
    switch (s.kind) {
      case "run":
        t = t.runCmd(s.cmd);
        break;
      case "env":
        t = t.setEnvs(s.vars);
        break;
      case "workdir":
        t = t.setWorkdir(s.path);
        workdirSet = true;
        break;
      case "user":
        t = t.setUser(s.user);
        userSet = true;
        break;
      case "copy":
        t = t.copy(s.src, s.dest, { ...(s.user ? { user: s.user } : {}), ...(s.mode ? { mode: s.mode } : {}) });
        break;
    }
  }
  if (!userSet) {
    t = t.setUser("user");
    stepLines.push(0);
  }
  if (!workdirSet) {
    t = t.setWorkdir("/home/user");
    stepLines.push(0);
  }
  const ready = readyOverride ?? spec.readyCmd;
  if (spec.startCmd) return { template: t.setStartCmd(spec.startCmd, ready ?? "sleep 20"), stepLines };
  if (ready) return { template: t.setReadyCmd(ready), stepLines };
  return { template: t, stepLines };
}
