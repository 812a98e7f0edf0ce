// Whoever can write the repository but lacks the cluster's key cannot make a node act on an
// entry of its own: unsigned, foreign-keyed, tampered and moved manifests, announcements and
// claims are refused (reported once) or, for claims, never read as "you hold it"; GC still
// keeps the chunks of a manifest it cannot verify; the key is configured like the API key.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConfigError, resolveRepositoryKey } from "../src/config.js";
import { ChunkRepository, runGc } from "../src/storage/repository/chunk-repository.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import { RepositoryKey } from "../src/storage/repository/signing.js";
import type { UntrustedManifestError } from "../src/storage/repository/trust.js";

const root = mkdtempSync("/var/tmp/aenv-signing-test-");
after(() => rmSync(root, { recursive: true, force: true }));
const ours = new RepositoryKey("the cluster's key 0123456789abcdef0123");
const theirs = new RepositoryKey("someone else's key 0123456789abcdef0123");

let seq = 0;
function setup() {
  const dir = join(root, `r${++seq}`);
  const src = join(dir, "src");
  mkdirSync(src, { recursive: true });
  mkdirSync(join(dir, "repo"));
  writeFileSync(join(src, "memory"), Buffer.alloc(100_000, 7));
  const backend = new PosixFsBackend(join(dir, "repo"));
  const refused: string[] = [];
  const repo = new ChunkRepository(backend, ours, {
    onUntrusted: (e: UntrustedManifestError) => refused.push(e.message),
  });
  return { backend, repo, refused, src };
}

const unsealed = (raw: Buffer) => JSON.parse(JSON.parse(raw.toString()).body) as Record<string, unknown>;

test("a manifest that is unsigned, signed with another key, tampered with or moved is refused and reported", async () => {
  const { backend, repo, refused, src } = setup();
  const { manifest } = await repo.commit("snap_real", src, { kind: "snapshot" });
  assert.deepEqual(await repo.get("snap_real"), manifest);
  const raw = (await backend.get("manifests/snap_real.json")) as Buffer;

  await backend.put("manifests/snap_plain.json", Buffer.from(JSON.stringify({ ...manifest, id: "snap_plain" })));
  await backend.put("manifests/snap_foreign.json", theirs.seal("manifest", "manifests/snap_foreign.json", manifest));
  const env = JSON.parse(raw.toString()) as { body: string };
  const tampered = { ...env, body: env.body.replace('"kind":"snapshot"', '"kind":"snapshot","names":["base"]') };
  await backend.put("manifests/snap_tampered.json", Buffer.from(JSON.stringify(tampered)));
  // Signed for its own key: copied under another ID, it does not verify there.
  await backend.put("manifests/snap_moved.json", raw);

  for (const [id, why] of [
    ["snap_plain", /not signed/],
    ["snap_foreign", /does not match/],
    ["snap_tampered", /does not match/],
    ["snap_moved", /does not match/],
  ] as const) {
    await assert.rejects(repo.get(id), why, id);
  }
  assert.deepEqual(
    (await repo.list()).map((m) => m.id),
    ["snap_real"],
  );
  assert.equal(refused.length, 4, refused.join("\n"));
  // A listing sees them again; each is reported once.
  await repo.list();
  assert.equal(refused.length, 4);
});

test("an unsigned announcement is ignored; a forged claim never says 'you hold it'", async () => {
  const { backend, repo, refused } = setup();
  await repo.announce("snap_ok", ["ok"]);
  await backend.put("pending/snap_fake.json", Buffer.from(JSON.stringify({ id: "snap_fake", names: ["base"], at: 1 })));
  assert.deepEqual(
    (await repo.announced()).map((a) => a.id),
    ["snap_ok"],
  );
  assert.ok(refused.some((m) => /pending\/snap_fake/.test(m)));

  // A claim in the victim node's name, written without the key: it still blocks others…
  await backend.put("claims/sbx-1.0.json", Buffer.from(JSON.stringify({ holder: "node-a", at: Date.now() })));
  assert.equal(await repo.claim("sbx-1.0", "node-a"), false);
  assert.equal(await repo.claimHolder("sbx-1.0"), "");
  // …and a real one is honoured.
  assert.equal(await repo.claim("sbx-2.0", "node-a"), true);
  assert.equal(await repo.claim("sbx-2.0", "node-a"), true);
  assert.equal(await repo.claim("sbx-2.0", "node-b"), false);
  assert.equal(unsealed((await backend.get("claims/sbx-2.0.json")) as Buffer).holder, "node-a");
});

test("GC keeps the chunks of a manifest it cannot verify (one written before signing)", async () => {
  const { backend, repo, src } = setup();
  const { manifest } = await repo.commit("snap_old", src, { kind: "snapshot" });
  await backend.put("manifests/snap_old.json", Buffer.from(JSON.stringify(manifest)));
  const r = await runGc(repo);
  assert.equal(r.chunksDeleted, 0);
  assert.ok(r.chunksLive > 0);
});

test("the repository key: AENV_REPOSITORY_KEY, else generated once into DATA/secrets (0600); short keys refused", () => {
  const data = join(root, "data");
  const first = resolveRepositoryKey(data, {});
  assert.ok(first.length >= 32);
  const file = join(data, "secrets", "repository-key");
  assert.equal(readFileSync(file, "utf8").trim(), first);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.equal(resolveRepositoryKey(data, {}), first, "kept across starts");
  const given = "x".repeat(40);
  assert.equal(resolveRepositoryKey(data, { AENV_REPOSITORY_KEY: given }), given);
  assert.throws(() => resolveRepositoryKey(data, { AENV_REPOSITORY_KEY: "short" }), ConfigError);
  // Subkeys per kind: a claim's MAC is not a manifest's.
  const claim = ours.seal("claim", "manifests/snap_x.json", { id: "snap_x" });
  assert.throws(() => ours.open("manifest", "manifests/snap_x.json", claim), /does not match/);
});
