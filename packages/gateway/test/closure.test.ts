// What installing and running the gateway brings with it: never the node (@aenv/server, its
// SQLite, S3 client, runsc runtime and envd), only @aenv/protocol, @aenv/edge and the libraries
// they name. Checked twice: the built import graph from the gateway's bin (what it runs), and
// the dependency closure package-lock.json gives its package (what npm installs with it).
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, sep } from "node:path";
import { test } from "node:test";

const ROOT = join(import.meta.dirname, "../../..");
const BIN = join(ROOT, "packages/gateway/bin/aenv-gateway.js");
/** Packages whose presence would mean the node came along (the gateway runs none of them). */
const FORBIDDEN = [/^@aenv\/server$/, /^@aenv\/envd$/, /^better-sqlite3$/, /^@aws-sdk\//, /^@smithy\//];

const forbidden = (name: string) => FORBIDDEN.some((re) => re.test(name));

/** The package a bare specifier names: `@scope/name` or `name`, without a subpath. */
function packageOf(spec: string): string {
  const parts = spec.split("/");
  return (spec.startsWith("@") ? parts.slice(0, 2) : parts.slice(0, 1)).join("/");
}

/** Every module specifier a built ES module names: static imports and re-exports, side-effect and dynamic imports. */
function specifiers(js: string): string[] {
  const out: string[] = [];
  const patterns = [/\b(?:import|export)\s[^'"`;]*?\bfrom\s*["']([^"']+)["']/g, /\bimport\s*\(?\s*["']([^"']+)["']/g];
  for (const re of patterns) for (const m of js.matchAll(re)) out.push(m[1] as string);
  return out;
}

/** The workspace package a file belongs to (`packages/NAME/…`), or undefined outside them. */
function workspaceOf(file: string): string | undefined {
  const rel = relative(join(ROOT, "packages"), file);
  return rel.startsWith("..") ? undefined : rel.split(sep)[0];
}

function dependenciesOf(pkgDir: string): Record<string, string> {
  const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
  };
  return pkg.dependencies ?? {};
}

test("the gateway's package names neither the node nor its libraries", () => {
  const deps = Object.keys(dependenciesOf(join(ROOT, "packages/gateway")));
  assert.deepEqual(deps.filter(forbidden), []);
  assert.ok(deps.includes("@aenv/edge") && deps.includes("@aenv/protocol"), deps.join(", "));
});

test("what the gateway runs stays in @aenv/gateway, @aenv/edge and @aenv/protocol, each import declared", () => {
  assert.ok(existsSync(join(ROOT, "packages/gateway/dist/main.js")), "build first: npm run build");
  const seen = new Set<string>();
  const libraries = new Map<string, string>();
  const queue = [BIN];
  while (queue.length) {
    const file = queue.pop() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    const ws = workspaceOf(file);
    assert.ok(ws === "gateway" || ws === "edge" || ws === "protocol", `the gateway reaches ${relative(ROOT, file)}`);
    const require = createRequire(file);
    for (const spec of specifiers(readFileSync(file, "utf8"))) {
      if (spec.startsWith("node:")) continue;
      if (spec.startsWith(".")) {
        queue.push(join(dirname(file), spec));
        continue;
      }
      const name = packageOf(spec);
      assert.ok(!forbidden(name), `${relative(ROOT, file)} imports ${spec}`);
      // A library the file's own package does not declare would be there only by hoisting.
      const declared = dependenciesOf(join(ROOT, "packages", ws));
      assert.ok(name in declared, `${relative(ROOT, file)} imports ${name}, which packages/${ws} does not depend on`);
      if (name.startsWith("@aenv/")) queue.push(require.resolve(spec));
      else libraries.set(name, relative(ROOT, file));
    }
  }
  // What it runs of the edge: the shared modules, not a copy of the node's.
  assert.ok([...seen].some((f) => workspaceOf(f) === "edge"));
  assert.ok(libraries.has("fastify") && libraries.has("ioredis"), [...libraries.keys()].join(", "));
});

interface LockEntry {
  resolved?: string;
  link?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

test("what npm installs with the gateway (package-lock.json's closure) has no node library", () => {
  const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>;
  };
  /** Where npm put `name` as seen from the package at `from`: its own node_modules, then each parent's. */
  const locate = (name: string, from: string): string | undefined => {
    for (
      let dir = from;
      ;
      dir = dir.includes("/node_modules/") ? dir.slice(0, dir.lastIndexOf("/node_modules/")) : ""
    ) {
      const at = dir ? `${dir}/node_modules/${name}` : `node_modules/${name}`;
      const entry = lock.packages[at];
      if (entry) return entry.link && entry.resolved ? entry.resolved : at;
      if (!dir) return undefined;
    }
  };
  const closure = new Map<string, string>();
  const queue = ["packages/gateway"];
  while (queue.length) {
    const at = queue.pop() as string;
    const e = lock.packages[at];
    assert.ok(e, `package-lock.json has no ${at}`);
    const optionalPeers = new Set(
      Object.entries(e.peerDependenciesMeta ?? {})
        .filter(([, m]) => m.optional)
        .map(([n]) => n),
    );
    const names = [
      ...Object.keys(e.dependencies ?? {}),
      ...Object.keys(e.optionalDependencies ?? {}),
      ...Object.keys(e.peerDependencies ?? {}).filter((n) => !optionalPeers.has(n)),
    ];
    for (const name of names) {
      const where = locate(name, at);
      if (!where) {
        // An optional dependency npm skipped on this platform.
        assert.ok(name in (e.optionalDependencies ?? {}), `${at} needs ${name}, which the lock does not place`);
        continue;
      }
      if (closure.has(where)) continue;
      closure.set(where, name);
      queue.push(where);
    }
  }
  const names = new Set(closure.values());
  assert.deepEqual([...names].filter(forbidden), []);
  assert.ok(names.has("@aenv/edge") && names.has("fastify"), `closure: ${[...names].sort().join(", ")}`);
});
