// What tests that write into a snapshot repository by hand need: the key every test server
// signs its entries with, and the repository's own sealing, so a planted entry is either
// signed (it reaches the checks behind the signature) or deliberately not.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  RepositoryKey,
  type SealedKind,
  unverifiedBody,
} from "../../packages/server/src/storage/repository/signing.js";

/** AENV_REPOSITORY_KEY of every test server (startServer), so servers sharing a repository agree. */
export const TEST_REPOSITORY_KEY = "aenv-test-repository-key-0123456789abcdef";

const key = new RepositoryKey(TEST_REPOSITORY_KEY);

/** Writes `value` under `<repo>/<objectKey>`, signed with the test key unless `unsigned`. */
export function plant(
  repo: string,
  kind: SealedKind,
  objectKey: string,
  value: unknown,
  opts: { unsigned?: boolean; key?: string } = {},
): void {
  const file = join(repo, objectKey);
  mkdirSync(join(file, ".."), { recursive: true });
  const signer = opts.key ? new RepositoryKey(opts.key) : key;
  writeFileSync(file, opts.unsigned ? JSON.stringify(value) : signer.seal(kind, objectKey, value));
}

/** A manifest as stored (its signature not checked). */
export function readEntry<T = unknown>(repo: string, objectKey: string): T {
  return unverifiedBody(readFileSync(join(repo, objectKey))) as T;
}
