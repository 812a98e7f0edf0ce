import { NewSecret, SecretIdParams, SecretListQuery, SecretUpdate } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { SecretStore } from "../../secrets/store.js";
import { paginate } from "../list-filter.js";

/** /secrets: create, list, get, update, delete. No answer ever carries a value; bindings are shown. */
export async function secretRoutes(app: FastifyInstance, o: { secrets: SecretStore }): Promise<void> {
  const { secrets } = o;

  app.post("/secrets", async (req, reply) => {
    const b = NewSecret.parse(req.body ?? {});
    return reply.status(201).send(secrets.create(b.name, b.value, b.metadata, b.allowedHosts));
  });

  app.get("/secrets", async (req, reply) => {
    const q = SecretListQuery.parse(req.query);
    return paginate(secrets.list(), q, (t) => void reply.header("x-next-token", t));
  });

  app.get("/secrets/:secretID", async (req) => secrets.get(SecretIdParams.parse(req.params).secretID));

  app.post("/secrets/:secretID", async (req) => {
    const { secretID } = SecretIdParams.parse(req.params);
    const b = SecretUpdate.parse(req.body ?? {});
    return secrets.update(secretID, b.value, b.metadata, b.allowedHosts);
  });

  app.delete("/secrets/:secretID", async (req, reply) => {
    secrets.delete(SecretIdParams.parse(req.params).secretID);
    return reply.status(204).send();
  });
}
