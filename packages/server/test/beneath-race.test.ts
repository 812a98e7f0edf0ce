/**
 * The posix_fs repository backend against a writer of the repository folder that swaps a
 * folder for a link at the moment the backend has found it (the `resolved` seam), and a fuzz
 * pass over both sandbox- and writer-facing file code (the volume content API and the
 * backend): random operations on random paths while links to a host folder are planted and
 * folders swapped between operations. Whatever happens, nothing outside the root changes and
 * every failure is a typed error, never a crash.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, describe, test } from "node:test";
import { ConflictError, InvalidRequestError, NotFoundError, TooLargeError } from "@aenv/edge/errors";
import { BackendError } from "../src/storage/repository/backend.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import type { VolumeBackend } from "../src/storage/volumes/backend.js";
import { VolumeContent } from "../src/storage/volumes/content.js";

const base = mkdtempSync(join(tmpdir(), "aenv-beneath-"));
after(() => rmSync(base, { recursive: true, force: true }));
let n = 0;

/** A root to attack and a host folder beside it holding one file. */
function arena(): { root: string; host: string } {
  const dir = join(base, String(n++));
  const root = join(dir, "root");
  const host = join(dir, "host");
  mkdirSync(root, { recursive: true });
  mkdirSync(host);
  writeFileSync(join(host, "keep"), "host file");
  return { root, host };
}

/** Every file under a folder with its content hash and mode, to compare before and after. */
function fingerprint(dir: string): string {
  const h = createHash("sha256");
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = join(d, name);
      const st = statSync(p);
      h.update(`${p} ${st.mode} ${st.uid} ${st.gid}\n`);
      if (st.isDirectory()) walk(p);
      else h.update(readFileSync(p));
    }
  };
  walk(dir);
  return h.digest("hex");
}

test("posix_fs: a write creates a missing repository root, as a mkdir -p would", async () => {
  const { root } = arena();
  const b = new PosixFsBackend(join(root, "not", "yet"));
  await b.put("leases/x.json", Buffer.from("{}"));
  assert.equal((await b.get("leases/x.json"))?.toString(), "{}");
  assert.equal(await b.get("nothing/here"), undefined);
});

describe("posix_fs repository under a racing writer", () => {
  const attacks: [string, (b: PosixFsBackend) => Promise<unknown>][] = [
    ["put", (b) => b.put("chunks/ab/evil", Buffer.from("attacker"))],
    ["put of a stream", (b) => b.put("chunks/ab/evil", Readable.from([Buffer.from("attacker")]))],
    ["putIfAbsent", (b) => b.putIfAbsent("chunks/ab/evil", Buffer.from("attacker"))],
    ["delete", (b) => b.delete("chunks/ab/keep")],
    ["get", (b) => b.get("chunks/ab/keep")],
  ];
  for (const [name, op] of attacks) {
    test(`${name}: a folder swapped for a link after it was found touches nothing outside`, async () => {
      const { root, host } = arena();
      mkdirSync(join(root, "chunks", "ab"), { recursive: true });
      writeFileSync(join(root, "chunks", "ab", "keep"), "repository's own");
      const before = fingerprint(host);
      const b = new PosixFsBackend(root, {
        resolved: () => {
          renameSync(join(root, "chunks", "ab"), join(root, "chunks", "ab.moved"));
          symlinkSync(host, join(root, "chunks", "ab"));
        },
      });
      const got = await op(b).catch((err) => err);
      assert.equal(fingerprint(host), before, "the host folder changed");
      assert.ok(existsSync(join(host, "keep")));
      assert.notDeepEqual(got, Buffer.from("host file"), "a host file was read");
    });
  }
});

/** A small seeded generator, so a failing run can be replayed from its seed. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const NAMES = ["a", "b", "c", "..", ".", "", "link", "f", "a/b", "x\0y", "ä", "%2e%2e", "-"];

function randomPath(r: () => number, sep = "/"): string {
  const len = 1 + Math.floor(r() * 4);
  return Array.from({ length: len }, () => NAMES[Math.floor(r() * NAMES.length)]).join(sep);
}

/** What a racer does between operations: plant links to the host, swap folders for them. */
function mischief(r: () => number, root: string, host: string): void {
  const dirs = [root];
  const collect = (d: string, depth: number) => {
    if (depth > 3) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) {
        dirs.push(join(d, e.name));
        collect(join(d, e.name), depth + 1);
      }
    }
  };
  collect(root, 0);
  const d = dirs[Math.floor(r() * dirs.length)] as string;
  const name = ["a", "b", "c", "link", "f"][Math.floor(r() * 5)] as string;
  try {
    const target = join(d, name);
    if (r() < 0.5 && existsSync(target)) renameSync(target, `${target}.old${Math.floor(r() * 1e6)}`);
    symlinkSync(r() < 0.5 ? host : join(host, "keep"), target);
  } catch {
    // the name is taken: nothing planted this time
  }
  if (r() < 0.3) {
    try {
      mkdirSync(join(d, name === "a" ? "b" : "a"));
    } catch {
      // already there (as a folder or a link)
    }
  }
}

const typed = (err: unknown) =>
  err instanceof NotFoundError ||
  err instanceof InvalidRequestError ||
  err instanceof ConflictError ||
  err instanceof TooLargeError ||
  err instanceof BackendError ||
  // assertKey's refusal of a malformed key
  (err instanceof Error && /key/i.test(err.message));

describe("fuzz: random operations and planted links", () => {
  test("the volume content API never leaves the volume", async () => {
    const { root, host } = arena();
    const before = fingerprint(host);
    const be: VolumeBackend = {
      name: "fuzz",
      create: async () => {},
      root: () => root,
      free: async () => 1 << 20,
      remove: async () => {},
      attach: async () => {},
      detach: async () => {},
    };
    const c = new VolumeContent(be, 1 << 20);
    const seed = Number(process.env.AENV_FUZZ_SEED ?? 20261203);
    const r = rng(seed);
    for (let i = 0; i < 1500; i++) {
      const p = randomPath(r);
      const ops = [
        () => c.write("v", p, Readable.from([Buffer.from(`w${i}`)]), { force: r() < 0.5, mode: 0o777, uid: 1000 }),
        () => c.makeDir("v", p, { force: r() < 0.5, mode: 0o777, uid: 1000 }),
        () => c.setMetadata("v", p, { mode: 0o777, uid: 1000, gid: 1000 }),
        () => c.remove("v", p),
        () => c.list("v", p, 1 + Math.floor(r() * 3)),
        () => c.stat("v", p),
        () =>
          c.read("v", p).then(async ({ stream }) => {
            for await (const chunk of stream) assert.notEqual(String(chunk), "host file", `read a host file at ${p}`);
          }),
      ];
      const op = ops[Math.floor(r() * ops.length)] as () => Promise<unknown>;
      await op().catch((err) => {
        assert.ok(typed(err), `seed ${seed} step ${i} ${p}: untyped ${(err as Error).stack}`);
      });
      mischief(r, root, host);
    }
    assert.equal(fingerprint(host), before, `seed ${seed}: the host folder changed`);
  });

  test("the posix_fs backend never leaves the repository", async () => {
    const { root, host } = arena();
    const before = fingerprint(host);
    const b = new PosixFsBackend(root);
    const seed = Number(process.env.AENV_FUZZ_SEED ?? 20261203) + 1;
    const r = rng(seed);
    for (let i = 0; i < 1500; i++) {
      const key = randomPath(r);
      const ops = [
        () => b.put(key, Buffer.from(`p${i}`)),
        () => b.putIfAbsent(key, Buffer.from(`p${i}`)),
        () => b.get(key).then((got) => assert.notEqual(got?.toString(), "host file", `read a host file at ${key}`)),
        () => b.head(key),
        () => b.delete(key),
        async () => {
          for await (const o of b.list(key)) assert.ok(!o.key.includes(".."), o.key);
        },
      ];
      const op = ops[Math.floor(r() * ops.length)] as () => Promise<unknown>;
      await op().catch((err) => {
        assert.ok(typed(err), `seed ${seed} step ${i} ${key}: untyped ${(err as Error).stack}`);
      });
      mischief(r, root, host);
    }
    assert.equal(fingerprint(host), before, `seed ${seed}: the host folder changed`);
  });
});
