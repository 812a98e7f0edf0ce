import assert from "node:assert/strict";
import { test } from "node:test";
import type { RecordStore } from "../src/record-store.js";
import { type ApiKeyRecord, type KeyUse, Tenants } from "../src/tenants.js";

/** One store two processes share (a cluster's Redis hash), counting its reads. */
function sharedStore<T extends { id: string }>() {
  const m = new Map<string, T>();
  const store: RecordStore<T> & { lists: number } = {
    lists: 0,
    list: async () => {
      store.lists++;
      await new Promise((r) => setTimeout(r, 5)); // a store read takes a moment
      return [...m.values()];
    },
    get: async (id) => m.get(id),
    put: async (r) => void m.set(r.id, r),
    delete: async (id) => m.delete(id),
  };
  return store;
}

const OP = "operator key 0123456789abcdef";

test("keys made on another process moments apart are known at once, however many requests use them first", async () => {
  const keys = sharedStore<ApiKeyRecord>();
  const uses = sharedStore<KeyUse>();
  const gateway = new Tenants(keys, uses, OP); // where keys are made
  const node = new Tenants(keys, uses, OP); // where they are then used
  const a = await gateway.create("a", undefined);
  assert.equal((await node.resolve(a.key))?.name, "a");
  // A second key made right after the node's last miss, used by six requests at once.
  const b = await gateway.create("b", undefined);
  const vouched = await Promise.all(Array.from({ length: 6 }, () => node.resolve(b.key, { vouched: true })));
  assert.deepEqual(
    vouched.map((t) => t?.name),
    Array(6).fill("b"),
  );
  // Unvouched, misses still wait for the one read in flight rather than fail beside it.
  const c = await gateway.create("c", undefined);
  await new Promise((r) => setTimeout(r, 120));
  const plain = await Promise.all(Array.from({ length: 6 }, () => node.resolve(c.key)));
  assert.deepEqual(
    plain.map((t) => t?.name),
    Array(6).fill("c"),
  );
});

test("unknown keys cost at most one store read a while, unless a gateway vouches for them", async () => {
  const keys = sharedStore<ApiKeyRecord>();
  const node = new Tenants(keys, sharedStore<KeyUse>(), OP);
  await node.resolve(`e2b_${"0".repeat(40)}`);
  const before = keys.lists;
  for (let i = 0; i < 20; i++) assert.equal(await node.resolve(`e2b_${String(i).padStart(40, "1")}`), undefined);
  assert.ok(keys.lists - before <= 1, `${keys.lists - before} reads`);
});
