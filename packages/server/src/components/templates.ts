import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import { TemplateStore } from "../state/template-catalog.js";
import type { ChunkRepository } from "../storage/repository/chunk-repository.js";
import { TemplateSync } from "../templates/sync.js";

/** The node's template catalog (warned about when it lacks the default template). */
export function openTemplateCatalog(cfg: ServerConfig, log: Logger): TemplateStore {
  const templates = new TemplateStore(cfg.templatesDir);
  if (!templates.get("base")) {
    log.warn({ templatesDir: cfg.templatesDir }, "default template 'base' missing: run scripts/build-base-template.sh");
  }
  return templates;
}

/** Templates through the repository, where the configuration commits them. */
export function templateSync(
  cfg: ServerConfig,
  paths: NodePaths,
  templates: TemplateStore,
  repository: ChunkRepository,
  log: Logger,
): TemplateSync | undefined {
  return cfg.repository.commitTemplates
    ? new TemplateSync({
        repository,
        templates,
        stagingDir: paths.commitStaging,
        log: log.child({ component: "templates" }),
      })
    : undefined;
}

/**
 * A node that joins a cluster with templates of its own shares them: any node can then start,
 * resume or fork what runs on them (in the background: a tree is hundreds of MiB).
 */
export function shareLocalTemplates(cfg: ServerConfig, sync: TemplateSync | undefined, log: Logger): void {
  if (sync && cfg.cluster) {
    void sync.commitMissing().catch((err) => log.warn({ err }, "committing local templates to the repository failed"));
  }
}
