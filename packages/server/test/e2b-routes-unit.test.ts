// docs/e2b-api.md against E2B's published API as the pinned e2b SDK carries it: the SDK's types
// (generated from E2B's openapi.yml and envd.yaml) name every route; the document must list
// exactly those, and a real server (simulated runtime) must route each REST route it marks
// works or differs and none it marks not offered. envd's routes are checked against the path
// cases of envd's HTTP handler. So the document cannot drift from the SDK or from the code.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { type SimServer, startSimServer } from "./helpers/sim-server.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "../../..");
const STATUSES = ["works", "differs", "not offered"] as const;
type Status = (typeof STATUSES)[number];

/** `METHOD path` of every operation in one `interface <name> { "/path": { get: …` block. */
function sdkRoutes(types: string, name: string): string[] {
  const start = types.indexOf(`interface ${name} {`);
  assert.ok(start >= 0, `no interface ${name} in the SDK's types`);
  const out: string[] = [];
  let path = "";
  for (const line of types.slice(start).split("\n").slice(1)) {
    if (line.startsWith("}")) break;
    const p = /^ {2}"(\/[^"]*)": \{/.exec(line);
    if (p) path = p[1] as string;
    const m = /^ {4}(get|put|post|delete|patch)\??: (.*)$/.exec(line);
    if (m && path && !(m[2] as string).startsWith("never")) out.push(`${(m[1] as string).toUpperCase()} ${path}`);
  }
  return out.sort();
}

/** The rows of the table under `heading`: `METHOD path` → status. */
function docRows(doc: string, heading: string): Map<string, Status> {
  const section = doc.slice(doc.indexOf(heading)).split("\n## ")[0] as string;
  const rows = new Map<string, Status>();
  for (const line of section.split("\n")) {
    const m = /^\| (GET|POST|PUT|PATCH|DELETE) \| (\/\S*) \| ([a-z ]+) \|/.exec(line);
    if (!m) continue;
    const status = m[3] as Status;
    assert.ok(STATUSES.includes(status), `${m[1]} ${m[2]}: status "${status}"`);
    rows.set(`${m[1]} ${m[2]}`, status);
  }
  return rows;
}

const sdkTypes = readFileSync(
  createRequire(import.meta.url)
    .resolve("e2b")
    .replace(/index\.js$/, "index.d.ts"),
  "utf8",
);
const doc = readFileSync(join(ROOT, "docs/e2b-api.md"), "utf8");
const rest = docRows(doc, "## REST API");
const envd = docRows(doc, "## envd");

let server: SimServer;
before(async () => {
  server = await startSimServer(152);
});
after(() => server?.stop());

test("the document lists exactly the SDK's REST and envd routes", () => {
  assert.deepEqual([...rest.keys()].sort(), sdkRoutes(sdkTypes, "paths"));
  assert.deepEqual([...envd.keys()].sort(), sdkRoutes(sdkTypes, "paths$1"));
});

test("a server routes every REST route the document offers, and none it does not", async () => {
  const wrong: string[] = [];
  for (const [route, status] of rest) {
    const [method, path] = route.split(" ") as [string, string];
    const body = method === "GET" || method === "DELETE" ? undefined : "{}";
    const r = await fetch(`${server.url}${path.replace(/\{[^}]+\}/g, "nosuch")}`, {
      method,
      headers: { "x-api-key": server.apiKey, ...(body ? { "content-type": "application/json" } : {}) },
      body,
    });
    const text = await r.text();
    const routed = !(r.status === 404 && text.includes('"no route '));
    if (routed !== (status !== "not offered"))
      wrong.push(`${route}: ${status}, answered ${r.status} ${text.slice(0, 80)}`);
  }
  assert.deepEqual(wrong, []);
});

test("envd handles every path the document offers, and none it does not", () => {
  const handler = readFileSync(join(ROOT, "packages/envd/native/internal/server/routes.go"), "utf8");
  const handled = new Set([...handler.matchAll(/case "(\/[^"]*)":/g)].map((m) => m[1]));
  for (const [route, status] of envd) {
    const path = route.split(" ")[1] as string;
    assert.equal(handled.has(path), status !== "not offered", `${route}: ${status}`);
  }
});
