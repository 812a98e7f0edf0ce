import { ApiKeyIdParams, ApiKeyUpdate, NewApiKey } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { Tenants } from "./tenants.js";

/**
 * /api-keys (E2B's team keys, with aenv's `limits`), the operator's key only (tenancy.ts
 * refuses others): create (the key shown once), list, rename or re-limit, revoke.
 */
export async function apiKeyRoutes(app: FastifyInstance, o: { tenants: Tenants }): Promise<void> {
  const { tenants } = o;
  const id = (params: unknown) => ApiKeyIdParams.parse(params).apiKeyID;

  app.post("/api-keys", async (req, reply) => {
    const b = NewApiKey.parse(req.body ?? {});
    return reply.status(201).send(await tenants.create(b.name, b.limits));
  });
  app.get("/api-keys", async () => tenants.list());
  app.patch("/api-keys/:apiKeyID", async (req) => {
    const b = ApiKeyUpdate.parse(req.body ?? {});
    return tenants.update(id(req.params), {
      ...(b.name !== undefined ? { name: b.name } : {}),
      ...(b.limits !== undefined ? { limits: b.limits } : {}),
    });
  });
  app.delete("/api-keys/:apiKeyID", async (req, reply) => {
    await tenants.revoke(id(req.params));
    return reply.status(204).send();
  });
}
