import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import { VolumeCatalog } from "../storage/volumes/catalog.js";
import { Ext4ImageBackend } from "../storage/volumes/ext4-image.js";
import { LocalDirBackend } from "../storage/volumes/local-dir.js";
import type { Component } from "./component.js";

export interface Volumes extends Component {
  volumes: VolumeCatalog;
}

/** The node's volumes, loaded, on the configured backend. */
export async function openVolumes(cfg: ServerConfig, paths: NodePaths, log: Logger): Promise<Volumes> {
  const volumes = new VolumeCatalog(
    paths.volumes,
    (id) => paths.volume(id),
    cfg.volumes.backend === "ext4"
      ? new Ext4ImageBackend((id) => paths.volume(id), cfg.volumes.maxSizeBytes)
      : new LocalDirBackend((id) => paths.volume(id), cfg.volumes.maxSizeBytes),
    log.child({ component: "volumes" }),
  );
  await volumes.load();
  return { volumes, stop: () => volumes.close() };
}
