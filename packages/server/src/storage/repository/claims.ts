/**
 * Create-if-absent markers (`claims/<name>.json`): the repository's own guard that one paused
 * sandbox's image is resumed by one node only, whatever Redis locks did or did not hold. The
 * first node to claim a pause (sandbox ID + its pause tag) owns what follows it; a node that
 * comes back with an older local copy of that pause finds the claim and drops its copy.
 */
import type { RepositoryBackend } from "./backend.js";
import { assertId, CLAIMS } from "./layout.js";

export interface Claim {
  holder: string;
  at: number;
}

/** True when this caller made the claim (or already held it: a retried resume on one node). */
export async function claim(backend: RepositoryBackend, name: string, holder: string): Promise<boolean> {
  assertId(name);
  const body = Buffer.from(JSON.stringify({ holder, at: Date.now() } satisfies Claim));
  if (await backend.putIfAbsent(`${CLAIMS}${name}.json`, body)) return true;
  return (await claimOf(backend, name))?.holder === holder;
}

/** Who claimed `name`, if anyone. */
export async function claimOf(backend: RepositoryBackend, name: string): Promise<Claim | undefined> {
  assertId(name);
  const raw = await backend.get(`${CLAIMS}${name}.json`);
  if (!raw) return undefined;
  try {
    const c = JSON.parse(raw.toString()) as Partial<Claim>;
    return { holder: typeof c.holder === "string" ? c.holder : "", at: typeof c.at === "number" ? c.at : 0 };
  } catch {
    // written whole (link / conditional put), so unreadable means someone else wrote it
    return { holder: "", at: 0 };
  }
}
