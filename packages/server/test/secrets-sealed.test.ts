/**
 * A cluster's secrets: values sealed (AES-256-GCM under a key derived from the repository key,
 * the secret's ID bound in), shared by every node through one store. The store here is a map
 * in memory standing in for the Redis hash; test/sim-cluster.test.ts runs the same through a
 * gateway, real nodes and a real Redis.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { RecordStore } from "@aenv/edge/record-store";
import { type SealedSecretRecord, SealedSecretRecords } from "../src/secrets/sealed-records.js";
import { SecretSealer } from "../src/secrets/sealing.js";
import { SecretStore } from "../src/secrets/store.js";

const KEY = "cluster repository key 0123456789abcdef0123";

/** What a Redis hash holds: JSON by ID, with a version every change moves (as RedisRecordStore's). */
class MemoryRecords<T extends { id: string }> implements RecordStore<T> {
  readonly raw = new Map<string, string>();
  lists = 0;
  private v = 0;
  async version() {
    return String(this.v);
  }
  async list() {
    this.lists++;
    return [...this.raw.values()].map((v) => JSON.parse(v) as T);
  }
  async get(id: string) {
    const v = this.raw.get(id);
    return v ? (JSON.parse(v) as T) : undefined;
  }
  async put(r: T) {
    this.raw.set(r.id, JSON.stringify(r));
    this.v++;
  }
  async delete(id: string) {
    this.v++;
    return this.raw.delete(id);
  }
  /** A write that bypasses the store (another cluster's, a restore): the version moves too. */
  plant(id: string, json: string) {
    this.raw.set(id, json);
    this.v++;
  }
}

describe("sealed secrets", () => {
  test("a value opens only with the cluster's key, for the secret it was sealed for, unaltered", () => {
    const s = new SecretSealer(KEY);
    const sealed = s.seal("sec_1", "s3cr3t value");
    assert.equal(s.open("sec_1", sealed), "s3cr3t value");
    assert.doesNotMatch(sealed, /s3cr3t/);
    assert.notEqual(s.seal("sec_1", "s3cr3t value"), sealed, "a fresh IV each time");
    assert.throws(() => s.open("sec_2", sealed), "moved to another secret");
    assert.throws(() => new SecretSealer(`${KEY}-other`).open("sec_1", sealed), "another cluster's key");
    const raw = Buffer.from(sealed.slice(3), "base64");
    raw[raw.length - 1] = (raw[raw.length - 1] as number) ^ 1;
    assert.throws(() => s.open("sec_1", `v1:${raw.toString("base64")}`), "altered");
    assert.throws(() => s.open("sec_1", "plain"), "not sealed");
    assert.throws(() => new SecretSealer("short"), /32 characters/);
  });

  test("two nodes share secrets through one store; the store never holds a value in the clear", async () => {
    const shared = new MemoryRecords<SealedSecretRecord>();
    const unopenable: string[] = [];
    const node = () =>
      new SecretStore(new SealedSecretRecords(shared, new SecretSealer(KEY), (id) => unopenable.push(id)));
    const a = node();
    const b = node();
    const made = await a.create("tok", "value-from-a", {}, ["api.test"], "key-a");
    assert.equal(
      (b.use("tok", "api.test", "key-a") as { refused?: string }).refused,
      "missing",
      "before b reads again",
    );
    await b.refresh();
    assert.deepEqual(b.use("tok", "api.test", "key-a"), { value: "value-from-a" });
    // Nothing changed since: the records are not read (nor every value opened) again.
    const lists = shared.lists;
    await b.refresh();
    await b.refresh();
    assert.equal(shared.lists, lists, "an unchanged version skips the read");
    for (const v of shared.raw.values()) assert.doesNotMatch(v, /value-from-a/);
    // A change on b is what a uses after its next read; a name is taken cluster-wide.
    await b.update(made.secretID, { owner: "key-a" }, "value-from-b");
    await assert.rejects(a.create("tok", "again", {}, ["api.test"], "key-a"), /already exists/);
    assert.deepEqual(a.use("tok", "api.test", "key-a"), { value: "value-from-b" });
    // A record sealed under another key is left out (never sent), and reported once.
    const foreign = new SecretSealer(`${KEY}-other`);
    shared.plant(
      "sec_x",
      JSON.stringify({
        id: "sec_x",
        name: "foreign",
        sealedValue: foreign.seal("sec_x", "theirs"),
        version: 1,
        metadata: {},
        allowedHosts: ["api.test"],
        createdAt: 1,
        updatedAt: 1,
      }),
    );
    await a.refresh();
    await a.refresh();
    assert.equal((a.use("foreign", "api.test", undefined) as { refused?: string }).refused, "missing");
    assert.equal((await a.list({ all: true })).length, 1);
    assert.deepEqual(unopenable, ["sec_x"]);
    await a.delete("tok", { owner: "key-a" });
    await b.refresh();
    assert.equal((b.use("tok", "api.test", "key-a") as { refused?: string }).refused, "missing");
  });
});
