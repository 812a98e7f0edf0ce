import { paginate } from "@aenv/edge/list-filter";
import { tenantOf } from "@aenv/edge/tenancy";
import { ownerOf } from "@aenv/edge/tenants";
import { NewSecret, SecretIdParams, SecretListQuery, SecretUpdate } from "@aenv/protocol/rest";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { SecretScope, SecretStore } from "../../secrets/store.js";

/** The caller's secrets (names are each key's own); the operator's calls see every key's. */
function scopeOf(req: FastifyRequest): SecretScope {
  const t = tenantOf(req);
  return t.admin ? { all: true } : { owner: t.id };
}

/** /secrets: create, list, get, update, delete. No answer ever carries a value; bindings are shown. */
export async function secretRoutes(app: FastifyInstance, o: { secrets: SecretStore }): Promise<void> {
  const { secrets } = o;

  app.post("/secrets", async (req, reply) => {
    const b = NewSecret.parse(req.body ?? {});
    const { owner } = ownerOf(tenantOf(req));
    return reply.status(201).send(await secrets.create(b.name, b.value, b.metadata, b.allowedHosts, owner));
  });

  app.get("/secrets", async (req, reply) => {
    const q = SecretListQuery.parse(req.query);
    return paginate(await secrets.list(scopeOf(req)), q, (t) => void reply.header("x-next-token", t));
  });

  app.get("/secrets/:secretID", async (req) => secrets.get(SecretIdParams.parse(req.params).secretID, scopeOf(req)));

  app.post("/secrets/:secretID", async (req) => {
    const { secretID } = SecretIdParams.parse(req.params);
    const b = SecretUpdate.parse(req.body ?? {});
    return secrets.update(secretID, scopeOf(req), b.value, b.metadata, b.allowedHosts);
  });

  app.delete("/secrets/:secretID", async (req, reply) => {
    await secrets.delete(SecretIdParams.parse(req.params).secretID, scopeOf(req));
    return reply.status(204).send();
  });
}
