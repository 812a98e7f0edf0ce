import { CleanupStack } from "./cleanup-stack.js";
import type { NodeContext } from "./node-context.js";
import type { Live } from "./registry.js";

/**
 * A new sandbox admitted (its share of the node held from here) and the undo of its start
 * begun: a rollback forgets its record (persisted from the first step of its start on) and
 * gives its share back. Throws, with nothing to undo, when it does not fit.
 */
export function admitForStart(ctx: Pick<NodeContext, "registry" | "states" | "log">, live: Live): CleanupStack {
  const { registry, states } = ctx;
  const id = live.rec.id;
  registry.addAdmitted(live);
  const undo = new CleanupStack(ctx.log, { sandboxID: id });
  undo.defer("admission", () => registry.remove(id));
  undo.defer("record", () => states.forget(id));
  return undo;
}

/**
 * A paused sandbox admitted to start again (its share held from here) and the undo of its
 * resume begun: a rollback gives the share back and saves its record as it is then (paused,
 * without a slot), so a failed resume leaves it paused and resumable.
 */
export function admitForResume(ctx: Pick<NodeContext, "registry" | "states" | "log">, live: Live): CleanupStack {
  const { registry, states } = ctx;
  registry.admit(live);
  const undo = new CleanupStack(ctx.log, { sandboxID: live.rec.id });
  undo.defer("admission", () => registry.release(live));
  undo.defer("record", () => states.save(live.rec));
  return undo;
}

/**
 * Its runtime and network slot (the runner's to stop and remove), pushed before a start
 * brings them up: a start that fails part way leaves any of them. The sandbox's folder goes
 * too unless `keepDir` (a resumed sandbox's pause image is in it).
 */
export function deferRuntime(
  undo: CleanupStack,
  ctx: Pick<NodeContext, "runner">,
  live: Live,
  o: { keepDir?: boolean } = {},
): void {
  undo.defer("runtime", () => ctx.runner.stopRuntime(live, !o.keepDir));
}
