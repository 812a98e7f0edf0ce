import type { SandboxRecord } from "../state/store.js";

/** What happened to a sandbox, as its clients see it (hibernation's saves and wakes are not). */
export type LifecycleEventKind = "created" | "killed" | "paused" | "resumed" | "updated" | "forked";

export interface LifecycleEvent {
  kind: LifecycleEventKind;
  sandboxId: string;
  templateId: string;
  /**
   * One run of the sandbox: its runtime container's ID, new whenever it is started or restored
   * (a resume from an image, a move to another node); a resume in place keeps it.
   */
  executionId: string;
  metadata: Record<string, string>;
  /** The sandbox's API key (absent: the operator's): only its webhooks, and the operator's, hear of it. */
  owner?: string;
  /** `forked`: the sandbox the child was forked from. */
  parentId?: string;
  at: number;
}

type Listener = (e: LifecycleEvent) => void;

/**
 * The lifecycle modules announce what a client would call an event here, once it is done and
 * persisted; listeners (webhooks) take it from there. A listener that throws is its own
 * problem: the lifecycle step already happened.
 */
export class LifecycleEvents {
  private readonly listeners: Listener[] = [];

  on(fn: Listener): void {
    this.listeners.push(fn);
  }

  emit(kind: LifecycleEventKind, rec: SandboxRecord, extra: { parentId?: string } = {}): void {
    if (!this.listeners.length) return;
    const e: LifecycleEvent = {
      kind,
      sandboxId: rec.id,
      templateId: rec.templateId,
      executionId: rec.runtimeId,
      ...(rec.owner ? { owner: rec.owner } : {}),
      metadata: { ...rec.metadata },
      ...extra,
      at: Date.now(),
    };
    for (const fn of this.listeners) {
      try {
        fn(e);
      } catch {
        // See the class comment.
      }
    }
  }
}
