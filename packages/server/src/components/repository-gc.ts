import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { type ChunkRepository, runGc } from "../storage/repository/chunk-repository.js";
import type { Component } from "./component.js";

/** Chunks no manifest references go, safe against commits in flight (storage/repository/gc.ts). */
export function startRepositoryGc(cfg: ServerConfig, repository: ChunkRepository, log: Logger): Component {
  const gcTimer =
    cfg.repository.gcIntervalS > 0
      ? setInterval(() => {
          runGc(repository, { graceMs: cfg.repository.gcGraceS * 1000 })
            .then((r) => log.info({ component: "repository", ...r }, "repository garbage collected"))
            .catch((err) => log.warn({ err }, "repository gc failed"));
        }, cfg.repository.gcIntervalS * 1000)
      : undefined;
  gcTimer?.unref();
  return {
    stop() {
      if (gcTimer) clearInterval(gcTimer);
    },
  };
}
