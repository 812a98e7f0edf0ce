import { InvalidRequestError, NotFoundError, StartFailedError } from "@aenv/edge/errors";
import { owns, type Requester } from "@aenv/edge/tenants";
import type { SnapshotRecord } from "../state/store.js";
import { type Template, usable } from "../state/template-catalog.js";
import type { NodeContext } from "./node-context.js";
import type { Snapshots } from "./snapshots.js";
import type { TemplateTrees } from "./template-trees.js";

/** What a templateID names: a snapshot (restored) or a template (warm image or boot). */
export type SandboxSource = { kind: "snapshot"; snap: SnapshotRecord } | { kind: "template"; tpl: Template };

/**
 * Turns a client's templateID (a template's ID, name or name:tag, or a snapshot's ID or name)
 * into what a sandbox starts from, here or fetched from the shared repository; checks it can
 * start on this node.
 */
export class Sources {
  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: {
      snapshots: Snapshots;
      /** This node's copy of the template tree a snapshot runs on (fetched when missing). */
      trees: Pick<TemplateTrees, "local" | "assertNamesTree">;
      /** Brings a template another server committed to the repository onto this node. */
      fetchTemplate?: (ref: string) => Promise<Template | undefined>;
    },
  ) {}

  /**
   * `requester`: only its own snapshots, and templates it owns, the operator's (no owner) or
   * public ones, answer; anything else is as unknown as a name nothing has.
   */
  async resolve(ref: string, requester?: Requester): Promise<SandboxSource> {
    const visible = (owner: string | undefined) => !requester || owns(requester, owner);
    const localTpl = this.ctx.templates.get(ref);
    // A template's name or alias is never a snapshot's: whatever a snapshot calls itself
    // (a manifest from elsewhere included), a template of that name here wins.
    const snap = localTpl ? undefined : await this.uses.snapshots.find(ref, { visible });
    if (snap) {
      this.uses.trees.assertNamesTree(snap.rootfs, `snapshot '${snap.id}'`);
      if (snap.imageKey && snap.imageKey !== this.ctx.checkpointKey) {
        throw new InvalidRequestError(
          `snapshot '${snap.id}' was taken on another runtime (${snap.imageKey}, here ${this.ctx.checkpointKey})`,
        );
      }
      // The rootfs may come from another node: this node's copy of the same template tree is
      // what is mounted, never a path from the repository.
      const rootfs = await this.uses.trees.local(snap.rootfs, `snapshot '${snap.id}'`);
      return { kind: "snapshot", snap: { ...snap, rootfs } };
    }
    const tpl = localTpl ?? (await this.fetchTemplate(ref));
    if (!tpl || !(tpl.owner === undefined || tpl.public || visible(tpl.owner))) {
      throw new NotFoundError(`template '${ref}' not found`);
    }
    if (!usable(tpl)) throw new InvalidRequestError(`template '${ref}' has no finished build yet (${tpl.buildStatus})`);
    return { kind: "template", tpl };
  }

  private async fetchTemplate(ref: string): Promise<Template | undefined> {
    if (!this.uses.fetchTemplate) return undefined;
    try {
      return await this.uses.fetchTemplate(ref);
    } catch (err) {
      throw new StartFailedError(
        `template '${ref}' could not be fetched from the repository: ${(err as Error).message}`,
      );
    }
  }
}
