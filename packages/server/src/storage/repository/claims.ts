/**
 * Create-if-absent markers (`claims/<name>.json`): the repository's own guard that one paused
 * sandbox's image is resumed by one node only, whatever Redis locks did or did not hold. The
 * first node to claim a pause (sandbox ID + its pause tag) owns what follows it; a node that
 * comes back with an older local copy of that pause finds the claim and drops its copy.
 */
import type { RepositoryBackend } from "./backend.js";
import { assertId, CLAIMS } from "./layout.js";
import type { RepositoryKey } from "./signing.js";

export interface Claim {
  holder: string;
  at: number;
}

/** True when this caller made the claim (or already held it: a retried resume on one node). */
export async function claim(
  backend: RepositoryBackend,
  key: RepositoryKey,
  name: string,
  holder: string,
): Promise<boolean> {
  assertId(name);
  const k = `${CLAIMS}${name}.json`;
  if (await backend.putIfAbsent(k, key.seal("claim", k, { holder, at: Date.now() } satisfies Claim))) return true;
  return (await claimOf(backend, key, name))?.holder === holder;
}

/** Who claimed `name`, if anyone. */
export async function claimOf(
  backend: RepositoryBackend,
  key: RepositoryKey,
  name: string,
): Promise<Claim | undefined> {
  assertId(name);
  const k = `${CLAIMS}${name}.json`;
  const raw = await backend.get(k);
  if (!raw) return undefined;
  try {
    const c = key.open("claim", k, raw) as Partial<Claim>;
    return { holder: typeof c.holder === "string" ? c.holder : "", at: typeof c.at === "number" ? c.at : 0 };
  } catch {
    // Written whole (link / conditional put): unreadable or unsigned means someone without the
    // key wrote it. It still blocks (nobody resumes that pause) but never says "you hold it".
    return { holder: "", at: 0 };
  }
}
