// The webhook dispatcher alone: events keep reaching receivers while the store that holds the
// webhooks (a cluster's Redis) cannot be read, matched against the last list it answered.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { DeliveryLog } from "../src/events/delivery-log.js";
import type { WebhookRecord, WebhookStore } from "../src/events/webhook-store.js";
import { Webhooks } from "../src/events/webhooks.js";
import type { LifecycleEvent } from "../src/orchestrator/lifecycle-events.js";

test("events are delivered while the webhook store is out, to the webhooks it last listed", async () => {
  const got: string[] = [];
  const receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      got.push((JSON.parse(body) as { sandboxId: string }).sandboxId);
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  const port = (receiver.address() as { port: number }).port;
  const hook: WebhookRecord = {
    id: "w1",
    name: "w",
    url: `http://127.0.0.1:${port}/`,
    enabled: true,
    events: ["sandbox.lifecycle.created"],
    secret: "a-secret-of-length",
    createdAt: new Date().toISOString(),
  };
  let out = false;
  const store: WebhookStore = {
    list: async () => {
      if (out) throw new Error("redis is unreachable");
      return [hook];
    },
    get: async () => hook,
    put: async () => {},
    delete: async () => true,
  };
  const dir = mkdtempSync("/tmp/aenv-webhooks-unit-");
  const w = new Webhooks({
    store,
    deliveries: new DeliveryLog(join(dir, "d.db")),
    cfg: { allowPrivate: true, retryFirstMs: 50, windowS: 60 },
    log: pino({ level: "silent" }),
  });
  w.start();
  const event = (id: string): LifecycleEvent => ({
    kind: "created",
    sandboxId: id,
    templateId: "base",
    executionId: `${id}-x`,
    metadata: {},
    at: Date.now(),
  });
  const until = async (id: string) => {
    for (let i = 0; i < 100 && !got.includes(id); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(got.includes(id), `${id} delivered: ${got}`);
  };
  try {
    w.publish(event("s1"));
    await until("s1");
    out = true;
    // Past the dispatcher's one-second cache of the list: the store is asked again and fails.
    await new Promise((r) => setTimeout(r, 1100));
    w.publish(event("s2"));
    await until("s2");
  } finally {
    await w.stop();
    receiver.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
