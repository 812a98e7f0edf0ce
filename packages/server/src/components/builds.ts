import { createHash } from "node:crypto";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { TemplateStore } from "../state/template-catalog.js";
import { ImageStore } from "../storage/images/index.js";
import { TemplateBuilder } from "../templates/builder.js";
import { ContextFiles } from "../templates/context-files.js";
import { imageProvider } from "../templates/image-provider.js";
import type { TemplateSync } from "../templates/sync.js";
import type { Component } from "./component.js";

export interface Builds extends Component {
  builder: TemplateBuilder;
  files: ContextFiles;
}

export interface BuildsDeps {
  cfg: ServerConfig;
  paths: NodePaths;
  templates: TemplateStore;
  orch: Orchestrator;
  sync?: TemplateSync;
  log: Logger;
}

/** Template builds: their uploaded build contexts, the image store they pull from, the builder. */
export function startBuilds({ cfg, paths, templates, orch, sync, log }: BuildsDeps): Builds {
  const files = new ContextFiles(
    paths.contextFiles,
    createHash("sha256").update(`upload-links\n${cfg.apiKey}`).digest("hex"),
    cfg.images.uploadLimitBytes,
  );
  const builder = new TemplateBuilder({
    templates,
    orch,
    files,
    // Blobs are content-addressed and written atomically: every data dir on the host shares them.
    images: imageProvider(
      new ImageStore({
        dir: paths.imageBlobs,
        insecureRegistries: cfg.images.insecureRegistries,
        allowPrivateRegistries: cfg.images.allowPrivateRegistries,
        fetchTimeoutMs: cfg.images.fetchTimeoutMs,
        maxManifestBytes: cfg.images.maxManifestBytes,
        maxImageBytes: cfg.images.maxImageBytes,
        maxUnpackedBytes: cfg.images.maxUnpackedBytes,
        maxUnpackedEntries: cfg.images.maxUnpackedEntries,
        ...(cfg.images.authFile ? { authFile: cfg.images.authFile } : {}),
        log: (msg) => log.child({ component: "images" }).info(msg),
      }),
    ),
    ...(sync ? { sync } : {}),
    allowHostImageSources: cfg.images.allowHostSources,
    buildTimeoutMs: cfg.images.buildTimeoutMs,
    log: log.child({ component: "builds" }),
  });
  return { builder, files, stop: () => builder.close() };
}
