import type { RecordStore } from "@aenv/edge/record-store";
import { type ApiKeyRecord, type KeyUse, OPERATOR, Tenants } from "@aenv/edge/tenants";
import type { FastifyInstance } from "fastify";

/** Tenants over records held in memory: the operator's key `key`, others made by the test. */
function memoryStore<T extends { id: string }>(): RecordStore<T> {
  const m = new Map<string, T>();
  return {
    list: async () => [...m.values()],
    get: async (id) => m.get(id),
    put: async (r) => void m.set(r.id, r),
    delete: async (id) => m.delete(id),
  };
}

export function memoryTenants(key: string): Tenants {
  return new Tenants(memoryStore<ApiKeyRecord>(), memoryStore<KeyUse>(), key);
}

/** Routes registered without the key check run as the operator (the unit tests of routes alone). */
export function asOperator(app: FastifyInstance): void {
  app.decorateRequest("tenant", null);
  app.addHook("onRequest", async (req) => {
    req.tenant = OPERATOR;
  });
}
