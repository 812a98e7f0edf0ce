import { ConflictError } from "@aenv/edge/errors";
import type { SandboxRecord } from "../state/store.js";
import type { NodeContext } from "./node-context.js";
import { clampTimeoutS } from "./records.js";

/**
 * A sandbox's TTL as clients set it: kept in its record (endAt, or what a pause has left),
 * persisted through the state module. Expiry is Lifetimes' job; a resume extends with this.
 */

/** Sets the TTL to now + timeout (may shorten). */
export function setTtl(ctx: NodeContext, id: string, timeoutS: number): void {
  const l = ctx.registry.mustGet(id);
  const t = clampTimeoutS(ctx.cfg, timeoutS);
  // A sandbox saved by hibernation is running to its client: its TTL is endAt.
  if (l.rec.state === "paused" && !l.rec.pause.idleSaved) ctx.states.pausedTtl(l.rec, t * 1000);
  else {
    l.rec.endAt = Date.now() + t * 1000;
    ctx.states.save(l.rec);
  }
}

/** Extends a running sandbox's TTL to at least now + timeout; never shortens. */
export function extendTtl(ctx: NodeContext, id: string, timeoutS: number | undefined): SandboxRecord {
  const l = ctx.registry.mustGet(id);
  if (l.rec.state === "paused" && !l.rec.pause.idleSaved) throw new ConflictError(`sandbox '${id}' is paused`);
  const t = clampTimeoutS(ctx.cfg, timeoutS);
  l.rec.endAt = Math.max(l.rec.endAt, Date.now() + t * 1000);
  ctx.states.save(l.rec);
  return l.rec;
}
