/** Repository configuration: config file (TOML), environment overrides, start-up failures. */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { ConfigError, FILE_KEYS, loadConfig, parseBytes } from "../src/config.js";
import { BackendUnavailableError } from "../src/storage/repository/backend.js";
import { openRepository } from "../src/storage/repository/open.js";

const dir = mkdtempSync("/var/tmp/aenv-config-test-");
after(() => rmSync(dir, { recursive: true, force: true }));
const env = { AENV_API_KEY: "k" };
const quiet = { info: () => {}, warn: () => {}, error: () => {} };

test("defaults: posix_fs under DATA/repository, 10 GiB cache under DATA/cache", () => {
  const cfg = loadConfig({ dataDir: dir }, env);
  assert.equal(cfg.repository.backend, "posix_fs");
  assert.equal(cfg.repository.path, join(dir, "repository"));
  assert.equal(cfg.repository.cacheDir, join(dir, "cache"));
  assert.equal(cfg.repository.cacheMaxBytes, 10 * 1024 ** 3);
  assert.equal(cfg.port, 8000);
});

test("the TOML file sets every section; env overrides the file; flags override env", () => {
  const file = join(dir, "aenv.toml");
  writeFileSync(
    file,
    `listen = "127.0.0.1:9000"
data_dir = "${dir}"
log_level = "debug"
[sandbox]
max_sandboxes = 7
[api]
body_limit_bytes = "2MiB"
[repository]
backend = "s3"
compression_level = 5
[repository.s3]
endpoint = "http://127.0.0.1:9"
bucket = "snaps"
region = "eu-west-1"
prefix = "node/a"
force_path_style = true
[cache]
max_bytes = "512MiB"
[gc]
interval_secs = 60
`,
  );
  const cfg = loadConfig({ config: file }, { ...env, AENV_S3_BUCKET: "other", AENV_CACHE_MAX_BYTES: "1G" });
  assert.equal(cfg.port, 9000);
  assert.equal(cfg.logLevel, "debug");
  assert.equal(cfg.maxSandboxes, 7);
  assert.equal(cfg.bodyLimitBytes, 2 * 1024 * 1024);
  assert.equal(cfg.configFile, file);
  assert.deepEqual(cfg.repository.s3, {
    endpoint: "http://127.0.0.1:9",
    bucket: "other",
    region: "eu-west-1",
    prefix: "node/a",
    forcePathStyle: true,
  });
  assert.equal(cfg.repository.compressionLevel, 5);
  assert.equal(cfg.repository.cacheMaxBytes, 1024 ** 3);
  assert.equal(cfg.repository.gcIntervalS, 60);
  assert.equal(loadConfig({ config: file, listen: "0.0.0.0:1" }, env).port, 1);
  // AENV_CONFIG_PATH names the file when --config is absent
  assert.equal(loadConfig({}, { ...env, AENV_CONFIG_PATH: file }).repository.s3.bucket, "snaps");
});

test("s3 without a region, unknown keys, bad values: one clear line each", () => {
  assert.throws(
    () => loadConfig({ dataDir: dir }, { ...env, AENV_REPOSITORY_BACKEND: "s3", AENV_S3_BUCKET: "b" }),
    (e: unknown) => e instanceof ConfigError && /explicit region/.test(e.message) && !e.message.includes("\n"),
  );
  assert.throws(() => loadConfig({ dataDir: dir }, { ...env, AENV_REPOSITORY_BACKEND: "ftp" }), /posix_fs or s3/);
  assert.throws(() => loadConfig({ dataDir: dir }, { ...env, AENV_CACHE_MAX_BYTES: "lots" }), /AENV_CACHE_MAX_BYTES/);
  assert.throws(() => loadConfig({ dataDir: dir }, { ...env, AENV_S3_FORCE_PATH_STYLE: "maybe" }), /true or false/);
  const typo = join(dir, "typo.toml");
  writeFileSync(typo, "[cache]\nmax_byte = 1\n");
  assert.throws(() => loadConfig({ config: typo }, env), /unknown key 'cache.max_byte'/);
  const bad = join(dir, "bad.toml");
  writeFileSync(bad, "[cache\n");
  assert.throws(() => loadConfig({ config: bad }, env), ConfigError);
  assert.equal(parseBytes("1.5KiB", "x"), 1536);
  assert.equal(parseBytes("10GB", "x"), 1e10);
});

test('runtime.envd: "native" (the only envd) is accepted, "node" refused with what to do', () => {
  assert.doesNotThrow(() => loadConfig({ dataDir: dir }, { ...env, AENV_ENVD: "native" }));
  const file = join(dir, "envd.toml");
  writeFileSync(file, '[runtime]\nenvd = "node"\n');
  assert.throws(() => loadConfig({ config: file }, env), /the Node envd was removed.*Remove the setting/);
  assert.throws(() => loadConfig({ dataDir: dir }, { ...env, AENV_ENVD: "node" }), ConfigError);
});

test("openRepository builds a working repository, and fails at start with one line", async () => {
  const cfg = loadConfig({ dataDir: dir }, env);
  const repo = await openRepository(cfg, quiet);
  assert.equal(repo.cache.maxBytes, 10 * 1024 ** 3);
  assert.deepEqual(await repo.list(), []);
  const dead = loadConfig(
    { dataDir: dir },
    {
      ...env,
      AENV_REPOSITORY_BACKEND: "s3",
      AENV_S3_BUCKET: "b",
      AENV_S3_REGION: "us-east-1",
      AENV_S3_ENDPOINT: "http://127.0.0.1:1",
      AWS_ACCESS_KEY_ID: "x",
      AWS_SECRET_ACCESS_KEY: "y",
    },
  );
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
  process.env.AWS_ACCESS_KEY_ID = "x"; // the SDK's default chain reads process.env
  process.env.AWS_SECRET_ACCESS_KEY = "y";
  try {
    await assert.rejects(openRepository(dead, quiet), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /^repository s3 bucket 'b' at http:\/\/127\.0\.0\.1:1: endpoint unreachable/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
  } finally {
    if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
    else process.env.AWS_ACCESS_KEY_ID = saved.id;
    if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
    else process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
  }
});

test("docs/configuration.md documents exactly the keys the config file accepts", () => {
  const doc = readFileSync(join(import.meta.dirname, "..", "..", "..", "docs", "configuration.md"), "utf8");
  const documented = [...doc.matchAll(/^\| `([a-z0-9_.]+)` \|/gm)].map((m) => m[1] as string).sort();
  assert.deepEqual(documented, Object.keys(FILE_KEYS).sort());
  // And every one of them is accepted in a file.
  for (const key of Object.keys(FILE_KEYS)) {
    const kind = FILE_KEYS[key];
    const value = kind === "string" ? '"x"' : kind === "bool" ? "true" : "1";
    const parts = key.split(".");
    const leaf = parts.pop() as string;
    const file = join(dir, `one-${key}.toml`);
    writeFileSync(file, `${parts.length ? `[${parts.join(".")}]\n` : ""}${leaf} = ${value}\n`);
    assert.doesNotThrow(() => {
      try {
        loadConfig({ config: file, dataDir: dir }, env);
      } catch (err) {
        // Values may be refused (a made-up path, an s3 backend without a bucket); keys may not.
        if (err instanceof ConfigError && /unknown key/.test(err.message)) throw err;
      }
    }, key);
  }
});
