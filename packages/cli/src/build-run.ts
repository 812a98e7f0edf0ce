import { BuildError, type BuildInfo, Template, type TemplateClass } from "e2b";
import type { ResolvedConfig } from "./config.js";
import { CliError } from "./errors.js";
import { buildLogSink } from "./progress/build-log.js";

export interface BuildRequest {
  name: string;
  cpuCount?: number;
  memoryMB?: number;
  /** Return once the build has started instead of following it. */
  detach?: boolean;
  /** Spec file line per build step, to point errors at the line. */
  stepLines?: number[];
  file?: string;
}

/** Adds the spec file's line to a server error like `step 3 (RUN …) exited with code 1`. */
export function locateStepError(message: string, stepLines: number[] | undefined, file = "spec"): string {
  const m = /^step (\d+)/.exec(message);
  const line = m && stepLines ? stepLines[Number(m[1]) - 1] : undefined;
  return line ? `${message} (${file} line ${line})` : message;
}

/** Builds through the SDK's Template API against this server, streaming logs to stderr. */
export async function runBuild(cfg: ResolvedConfig, template: TemplateClass, req: BuildRequest): Promise<BuildInfo> {
  if (!cfg.apiKey) throw new CliError("no API key: run 'aenv auth' or set AENV_API_KEY");
  const conn = {
    apiUrl: cfg.apiUrl,
    apiKey: cfg.apiKey,
    ...(req.cpuCount ? { cpuCount: req.cpuCount } : {}),
    ...(req.memoryMB ? { memoryMB: req.memoryMB } : {}),
  };
  try {
    if (req.detach) return await Template.buildInBackground(template, req.name, conn);
    const sink = buildLogSink();
    try {
      return await Template.build(template, req.name, {
        ...conn,
        // The SDK's own start/end markers add nothing to the server's log.
        onBuildLogs: (e) => {
          if (e.message !== "Build started" && e.message !== "Waiting for logs..." && e.message !== "Build finished")
            sink(e);
        },
      });
    } finally {
      sink.close();
    }
  } catch (e) {
    if (e instanceof BuildError)
      throw new CliError(`build failed: ${locateStepError(e.message, req.stepLines, req.file)}`);
    throw e;
  }
}
