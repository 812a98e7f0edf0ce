// Lifecycle webhooks through a real aenv-server on the simulated runtime, driven by the
// unmodified e2b SDK: registration as E2B's API has it, events delivered signed to a local
// receiver, retries while the receiver fails, pending deliveries kept across a restart of the
// server, and receivers at private or metadata addresses refused unless the operator allows.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { after, before, describe, test } from "node:test";
import { WEBHOOK_EVENT_TYPES } from "@aenv/protocol/rest";
import { Sandbox } from "e2b";
import { type SimServer, simSdk, startSimServer } from "./helpers/sim-server.js";

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  json: { id: string; type: string; sandboxId: string; [k: string]: unknown };
}

/** A webhook receiver on loopback: records what it accepted; answers `failNext` requests 503. */
class Receiver {
  readonly got: Received[] = [];
  failNext = 0;
  refused = 0;
  private server: Server | undefined;
  port = 0;

  async listen(port = 0): Promise<void> {
    this.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        if (this.failNext > 0) {
          this.failNext--;
          this.refused++;
          res.writeHead(503).end();
          return;
        }
        this.got.push({ headers: req.headers, body, json: JSON.parse(body) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => this.server?.listen(port, "127.0.0.1", r));
    const a = this.server.address();
    this.port = typeof a === "object" && a ? a.port : 0;
  }

  close(): Promise<void> {
    return new Promise((r) => {
      this.server?.closeAllConnections();
      this.server?.close(() => r());
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** Until `pred` holds of what was received, at most 15 s. */
  async until(pred: (got: Received[]) => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (!pred(this.got)) {
      if (Date.now() > deadline) {
        throw new Error(`${what}: got ${JSON.stringify(this.got.map((g) => [g.json.type, g.json.sandboxId]))}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** What E2B's docs tell a receiver to compute, written out here so the server's own code is not trusted. */
function expectedSignature(secret: string, body: string): string {
  return createHash("sha256")
    .update(secret + body)
    .digest("base64")
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

const SECRET = "a-webhook-secret-of-some-length";
const ALL = [...WEBHOOK_EVENT_TYPES];

let server: SimServer;
const receiver = new Receiver();

/** `key` "" sends none. */
async function call(method: string, path: string, body?: unknown, key: string = server.apiKey) {
  const r = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(key ? { "x-api-key": key } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  return { status: r.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
}

const env = { AENV_ALLOW_PRIVATE_WEBHOOKS: "1", AENV_WEBHOOK_RETRY_MS: "100" };

before(async () => {
  await receiver.listen();
  server = await startSimServer(154, env);
});

after(async () => {
  await server?.stop();
  await receiver.close();
});

describe("registration", () => {
  test("create, list, read, update and delete as E2B's API does; bad bodies are 400s", async () => {
    const made = await call("POST", "/events/webhooks", {
      name: "hook",
      url: receiver.url,
      events: ["sandbox.lifecycle.created"],
      signatureSecret: SECRET,
    });
    assert.equal(made.status, 201);
    const w = made.body as { id: string; enabled: boolean; teamID: string };
    assert.equal(w.enabled, true);
    assert.equal(typeof w.teamID, "string");
    assert.ok(!JSON.stringify(made.body).includes(SECRET), "the secret is never answered");
    try {
      const listed = await call("GET", "/events/webhooks");
      assert.ok((listed.body as unknown as Array<{ id: string }>).some((x) => x.id === w.id));
      const patched = await call("PATCH", `/events/webhooks/${w.id}`, {
        name: "renamed",
        enabled: false,
        events: ["sandbox.lifecycle.killed"],
      });
      assert.equal(patched.status, 200);
      const got = await call("GET", `/events/webhooks/${w.id}`);
      assert.deepEqual(
        { name: got.body?.name, enabled: got.body?.enabled, events: got.body?.events, url: got.body?.url },
        { name: "renamed", enabled: false, events: ["sandbox.lifecycle.killed"], url: receiver.url },
      );
      assert.ok(!JSON.stringify(got.body).includes(SECRET));
    } finally {
      assert.equal((await call("DELETE", `/events/webhooks/${w.id}`)).status, 200);
    }
    assert.equal((await call("GET", `/events/webhooks/${w.id}`)).status, 404);
    assert.equal((await call("DELETE", `/events/webhooks/${w.id}`)).status, 404);
    assert.equal((await call("GET", `/events/webhooks/${w.id}/deliveries`)).status, 404);

    const base = { name: "x", url: receiver.url, events: ["sandbox.lifecycle.created"], signatureSecret: SECRET };
    for (const [why, body] of [
      ["no url", { ...base, url: undefined }],
      ["ftp url", { ...base, url: "ftp://127.0.0.1/x" }],
      ["not a url", { ...base, url: "hook" }],
      ["unknown event", { ...base, events: ["sandbox.lifecycle.exploded"] }],
      ["no events", { ...base, events: [] }],
      ["short secret", { ...base, signatureSecret: "short" }],
      ["no secret", { ...base, signatureSecret: undefined }],
      ["name not a string", { ...base, name: 5 }],
    ] as const) {
      const r = await call("POST", "/events/webhooks", body);
      assert.equal(r.status, 400, why);
      assert.equal(typeof r.body?.message, "string", why);
    }
    assert.equal((await call("GET", "/events/webhooks", undefined, "")).status, 401);
    assert.equal((await call("POST", "/events/webhooks", base, "e2b_wrong")).status, 401);
    assert.equal((await call("PATCH", "/events/webhooks/nope", { enabled: true })).status, 404);
    const w2 = (await call("POST", "/events/webhooks", base)).body as { id: string };
    try {
      assert.equal((await call("GET", `/events/webhooks/${w2.id}/deliveries?limit=0`)).status, 400);
      assert.equal((await call("GET", `/events/webhooks/${w2.id}/deliveries?deliveryStatus=lost`)).status, 400);
      assert.equal((await call("PATCH", `/events/webhooks/${w2.id}`, { url: "gopher://x" })).status, 400);
    } finally {
      await call("DELETE", `/events/webhooks/${w2.id}`);
    }
  });

  test("receivers at loopback, private or metadata addresses are refused unless the operator allows them", async () => {
    const strict = await startSimServer(155);
    try {
      const ask = (url: string) =>
        fetch(`${strict.url}/events/webhooks`, {
          method: "POST",
          headers: { "x-api-key": strict.apiKey, "content-type": "application/json" },
          body: JSON.stringify({ name: "x", url, events: ["sandbox.lifecycle.created"], signatureSecret: SECRET }),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as { message: string } }));
      for (const url of [
        receiver.url,
        "http://localhost:9/x",
        "http://10.1.2.3/x",
        "http://[::1]:9/x",
        "http://[::ffff:127.0.0.1]:9/x",
        "http://169.254.169.254/latest/meta-data",
      ]) {
        const r = await ask(url);
        assert.equal(r.status, 400, url);
        assert.match(r.body.message, /refused/, url);
      }
      // Allowed private receivers still never include metadata addresses.
      const meta = await call("POST", "/events/webhooks", {
        name: "x",
        url: "http://169.254.169.254/x",
        events: ["sandbox.lifecycle.created"],
        signatureSecret: SECRET,
      });
      assert.equal(meta.status, 400);
      assert.match(String(meta.body?.message), /metadata/);
    } finally {
      await strict.stop();
    }
  });
});

describe("delivery", () => {
  let hookId = "";
  let onlyKilled = "";
  let disabled = "";

  before(async () => {
    const mk = async (events: string[], enabled = true) =>
      (
        (
          await call("POST", "/events/webhooks", {
            name: "e",
            url: receiver.url,
            events,
            enabled,
            signatureSecret: SECRET,
          })
        ).body as { id: string }
      ).id;
    hookId = await mk(ALL);
    onlyKilled = await mk(["sandbox.lifecycle.killed"]);
    disabled = await mk(ALL, false);
  });

  test("a sandbox's lifecycle reaches the receiver signed, in E2B's payload, per subscription", async () => {
    const sdk = simSdk(server);
    const s = await Sandbox.create({ ...sdk, metadata: { run: "hooks" } });
    await s.setTimeout(120_000);
    await s.pause();
    const back = await Sandbox.connect(s.sandboxId, sdk);
    const [child] = await forkOne(s.sandboxId);
    await back.kill();
    await Sandbox.kill(child as string, sdk);
    const mine = (g: Received[], hook: string) =>
      g.filter((x) => x.headers["e2b-webhook-id"] === hook && x.json.sandboxId === s.sandboxId);
    await receiver.until(
      (g) => mine(g, hookId).some((x) => x.json.type === "sandbox.lifecycle.killed"),
      "the parent's killed event",
    );
    const types = mine(receiver.got, hookId).map((x) => x.json.type);
    for (const t of [
      "sandbox.lifecycle.created",
      "sandbox.lifecycle.updated",
      "sandbox.lifecycle.paused",
      "sandbox.lifecycle.resumed",
      "sandbox.lifecycle.killed",
    ]) {
      assert.ok(types.includes(t), `${t} in ${types}`);
    }
    assert.ok(types.indexOf("sandbox.lifecycle.created") < types.indexOf("sandbox.lifecycle.paused"));
    await receiver.until(
      (g) => g.some((x) => x.json.sandboxId === child && x.json.type === "sandbox.lifecycle.forked"),
      "the child's forked event",
    );
    const forked = receiver.got.find((x) => x.json.sandboxId === child && x.json.type === "sandbox.lifecycle.forked");
    assert.equal(
      (forked?.json.eventData as { parent_sandbox_id?: string } | undefined)?.parent_sandbox_id,
      s.sandboxId,
    );

    for (const g of mine(receiver.got, hookId)) {
      assert.equal(g.headers["e2b-signature-version"], "v1");
      assert.equal(g.headers["e2b-signature"], expectedSignature(SECRET, g.body));
      assert.equal(typeof g.headers["e2b-delivery-id"], "string");
      assert.equal(g.json.version, "v1");
      assert.equal(g.json.sandboxTemplateId, "base");
      assert.equal(typeof g.json.sandboxExecutionId, "string");
      assert.equal(typeof g.json.sandboxTeamId, "string");
      assert.ok(!Number.isNaN(Date.parse(String(g.json.timestamp))));
      assert.deepEqual((g.json.eventData as { sandbox_metadata: unknown }).sandbox_metadata, { run: "hooks" });
    }
    // Only what each webhook subscribed to, and nothing to a disabled one.
    await receiver.until((g) => mine(g, onlyKilled).length === 1, "the killed-only webhook's event");
    assert.deepEqual(
      mine(receiver.got, onlyKilled).map((x) => x.json.type),
      ["sandbox.lifecycle.killed"],
    );
    assert.equal(receiver.got.filter((x) => x.headers["e2b-webhook-id"] === disabled).length, 0);
    const d = await call("GET", `/events/webhooks/${hookId}/deliveries?deliveryStatus=delivered`);
    const rows = d.body as unknown as Array<{ sandboxID: string; status: string; eventType: string }>;
    assert.ok(rows.some((r) => r.sandboxID === s.sandboxId && r.eventType === "sandbox.lifecycle.killed"));
    assert.ok(rows.every((r) => r.status === "delivered"));
  });

  test("a receiver that fails is retried with the same event and delivery IDs until it accepts", async () => {
    receiver.failNext = 3;
    const before = receiver.got.length;
    const s = await Sandbox.create(simSdk(server));
    await receiver.until(
      (g) => g.slice(before).some((x) => x.json.sandboxId === s.sandboxId && x.headers["e2b-webhook-id"] === hookId),
      "the retried created event",
    );
    assert.equal(receiver.refused, 3);
    const rows = (await call("GET", `/events/webhooks/${hookId}/deliveries?eventType=sandbox.lifecycle.created`))
      .body as unknown as Array<{ sandboxID: string; attempts: number; status: string; id: string; eventID: string }>;
    const row = rows.find((r) => r.sandboxID === s.sandboxId);
    assert.ok(row && row.status === "delivered" && row.attempts >= 2, JSON.stringify(row));
    const got = receiver.got.find((x) => x.json.sandboxId === s.sandboxId && x.headers["e2b-webhook-id"] === hookId);
    assert.equal(got?.headers["e2b-delivery-id"], row.id);
    assert.equal(got?.json.id, row.eventID);
    await s.kill();
  });

  test("deliveries pending when the server stops are sent after it starts again", async () => {
    const port = receiver.port;
    await receiver.close();
    const s = await Sandbox.create({ ...simSdk(server), metadata: { run: "restart" } });
    await s.kill();
    // Both events are queued (and failing: nothing listens) before the stop.
    const pending = async () =>
      (
        (await call("GET", `/events/webhooks/${hookId}/deliveries?deliveryStatus=pending`)).body as unknown as Array<{
          sandboxID: string;
        }>
      ).filter((r) => r.sandboxID === s.sandboxId).length;
    for (let i = 0; i < 100 && (await pending()) < 2; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(await pending(), 2);
    await server.stop({ keep: true });
    await receiver.listen(port);
    server = await startSimServer(154, env, { dir: server.dir });
    await receiver.until(
      (g) =>
        ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"].every((t) =>
          g.some(
            (x) => x.json.sandboxId === s.sandboxId && x.json.type === t && x.headers["e2b-webhook-id"] === hookId,
          ),
        ),
      "both events after the restart",
    );
  });
});

/** POST /sandboxes/{id}/fork (aenv's fork) for one child: its ID. */
async function forkOne(id: string): Promise<string[]> {
  const r = await call("POST", `/sandboxes/${id}/fork`, { count: 1 });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return (r.body as unknown as Array<{ sandbox: { sandboxID: string } }>).map((c) => c.sandbox.sandboxID);
}
