import { tenantOf } from "@aenv/edge/tenancy";
import { ownerOf, owns } from "@aenv/edge/tenants";
import { NewWebhook, WebhookDeliveriesQuery, WebhookIdParams, WebhookUpdate } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { Webhooks } from "../../events/webhooks.js";

/** /events/webhooks (E2B's): register, list, read, update, delete; and this node's deliveries. */
export async function webhookRoutes(app: FastifyInstance, o: { webhooks: Webhooks }): Promise<void> {
  const { webhooks } = o;
  const id = (params: unknown) => WebhookIdParams.parse(params).webhookID;

  app.post("/events/webhooks", async (req, reply) =>
    reply.status(201).send(await webhooks.create(NewWebhook.parse(req.body ?? {}), ownerOf(tenantOf(req)).owner)),
  );
  app.get("/events/webhooks", async (req) => {
    const t = tenantOf(req);
    return webhooks.list((owner) => owns(t, owner));
  });
  app.get("/events/webhooks/:webhookID", async (req) => webhooks.get(id(req.params)));
  app.patch("/events/webhooks/:webhookID", async (req) =>
    webhooks.update(id(req.params), WebhookUpdate.parse(req.body ?? {})),
  );
  app.delete("/events/webhooks/:webhookID", async (req, reply) => {
    await webhooks.delete(id(req.params));
    return reply.status(200).send();
  });
  app.get("/events/webhooks/:webhookID/deliveries", async (req) =>
    webhooks.deliveries(id(req.params), WebhookDeliveriesQuery.parse(req.query)),
  );
}
