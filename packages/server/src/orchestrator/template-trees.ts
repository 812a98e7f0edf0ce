import { StartFailedError } from "@aenv/edge/errors";
import { type NodePaths, templateTreeKey } from "../node-paths.js";

/**
 * Template trees by content, not by place. A paused sandbox, a snapshot or a fork's spill
 * names the tree it runs on by another node's path; what matters is the template ID and
 * revision in it. Each node finds its own copy of that tree under its own templates dir, and
 * fetches it from the repository when it has none, so a node that joins a cluster empty can
 * resume anything.
 */
export class TemplateTrees {
  constructor(
    private readonly d: {
      paths: NodePaths;
      /** Brings one template revision's tree from the repository; false when it is not there. */
      fetchTree?: (id: string, tree: string) => Promise<boolean>;
    },
  ) {}

  /** Throws unless `rootfs` names a template tree at all (a cheap check before any other). */
  assertNamesTree(rootfs: string, what: string): { id: string; tree: string } {
    const key = templateTreeKey(rootfs);
    if (!key) throw new StartFailedError(`${what} needs ${rootfs}, not a template tree`);
    return key;
  }

  /** This node's path of the tree `rootfs` names (fetched when missing); `what` names the asker in errors. */
  async local(rootfs: string, what: string): Promise<string> {
    const key = this.assertNamesTree(rootfs, what);
    const local = this.d.paths.localTemplateTree(rootfs) as string;
    if (this.d.paths.isTemplateTree(local)) return local;
    const fetched = await this.d.fetchTree?.(key.id, key.tree).catch((err: Error) => {
      throw new StartFailedError(`${what} needs template '${key.id}' tree ${key.tree}, not here: ${err.message}`);
    });
    if (fetched && this.d.paths.isTemplateTree(local)) return local;
    throw new StartFailedError(
      `${what} needs template '${key.id}' tree ${key.tree}: not on this node and not in the repository`,
    );
  }
}
