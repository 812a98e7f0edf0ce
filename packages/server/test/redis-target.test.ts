/** The cluster's Redis settings: a URL or Sentinel, for a node (loadConfig), checked at start (a gateway's flags: packages/gateway/test). */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { describeRedisTarget, isRedisUnavailable, parseRedisTarget } from "@aenv/edge/redis-target";
import { ConfigError, loadConfig } from "../src/config.js";

const dir = mkdtempSync("/var/tmp/aenv-redis-target-test-");
after(() => rmSync(dir, { recursive: true, force: true }));
const env = { AENV_API_KEY: "k" };

describe("parseRedisTarget", () => {
  test("nothing set: no cluster", () => {
    assert.equal(parseRedisTarget({}), undefined);
  });

  test("a URL", () => {
    assert.deepEqual(parseRedisTarget({ url: "redis://10.0.0.5:6379" }), { kind: "url", url: "redis://10.0.0.5:6379" });
  });

  test("sentinels and a master name, IPv6 included", () => {
    assert.deepEqual(
      parseRedisTarget({
        sentinels: "10.0.0.1:26379, s2.example:26380,[::1]:26381",
        masterName: "aenv",
        password: "p",
      }),
      {
        kind: "sentinel",
        sentinels: [
          { host: "10.0.0.1", port: 26379 },
          { host: "s2.example", port: 26380 },
          { host: "::1", port: 26381 },
        ],
        masterName: "aenv",
        password: "p",
      },
    );
  });

  const refused: Array<[string, Parameters<typeof parseRedisTarget>[0], RegExp]> = [
    ["both a URL and sentinels", { url: "redis://a:1", sentinels: "a:2", masterName: "m" }, /both set: give one/],
    ["sentinels without a master name", { sentinels: "a:26379" }, /needs --cluster-master/],
    ["a master name without sentinels", { masterName: "m" }, /needs --cluster-sentinels/],
    ["an entry without a port", { sentinels: "a:26379,b", masterName: "m" }, /expects HOST:PORT.*got "b"/],
    ["a port out of range", { sentinels: "a:70000", masterName: "m" }, /got "a:70000"/],
    ["an entry listed twice", { sentinels: "a:1,a:1", masterName: "m" }, /lists a:1 twice/],
    ["a master name with spaces", { sentinels: "a:1", masterName: "my master" }, /not a Sentinel master name/],
    ["not a URL", { url: "10.0.0.5:6379" }, /--cluster expects redis:\/\/HOST:PORT/],
    ["a password beside a URL", { url: "redis://a:1", password: "p" }, /a URL carries its password/],
  ];
  for (const [what, input, message] of refused) {
    test(`refused: ${what}`, () => assert.throws(() => parseRedisTarget(input), message));
  }

  test("logs name the target without its password", () => {
    assert.equal(
      describeRedisTarget({ kind: "url", url: "redis://:secret@10.0.0.5:6379/2" }),
      "redis://10.0.0.5:6379/2",
    );
    const s = parseRedisTarget({ sentinels: "a:1,b:2", masterName: "m", password: "secret" });
    assert.ok(s);
    assert.equal(describeRedisTarget(s), "sentinel m via a:1,b:2");
  });

  test("connection trouble is 'unavailable'; a script's error is not", () => {
    const reply = (m: string) => Object.assign(new Error(m), { name: "ReplyError" });
    assert.equal(isRedisUnavailable(new Error("Connection is closed.")), true);
    assert.equal(isRedisUnavailable(reply("READONLY You can't write against a read only replica.")), true);
    assert.equal(isRedisUnavailable(reply("LOADING Redis is loading the dataset in memory")), true);
    assert.equal(isRedisUnavailable(reply("ERR Error running script (call to f_x): attempt to index nil")), false);
  });
});

describe("node configuration", () => {
  test("sentinels from the environment, the file, and flags over both", () => {
    const cfg = loadConfig(
      { dataDir: dir },
      { ...env, AENV_CLUSTER_SENTINELS: "127.0.0.1:1,127.0.0.1:2", AENV_CLUSTER_MASTER: "aenv", AENV_NODE_ID: "n1" },
    );
    assert.deepEqual(cfg.cluster?.redis, {
      kind: "sentinel",
      sentinels: [
        { host: "127.0.0.1", port: 1 },
        { host: "127.0.0.1", port: 2 },
      ],
      masterName: "aenv",
    });
    assert.equal(cfg.repository.pauseCommitDelayS, 1, "a Sentinel cluster is a cluster");
    const file = join(dir, "aenv.toml");
    writeFileSync(file, `data_dir = "${dir}"\n[cluster]\nsentinels = "s1:26379"\nmaster_name = "m"\nnode_id = "n2"\n`);
    assert.deepEqual(loadConfig({ config: file }, env).cluster?.redis, {
      kind: "sentinel",
      sentinels: [{ host: "s1", port: 26379 }],
      masterName: "m",
    });
    const flags = loadConfig({ config: file, clusterSentinels: "s9:9", clusterMaster: "other" }, env);
    assert.deepEqual(flags.cluster?.redis, {
      kind: "sentinel",
      sentinels: [{ host: "s9", port: 9 }],
      masterName: "other",
    });
  });

  test("a URL as before; a bad combination is a ConfigError naming what to fix", () => {
    assert.deepEqual(loadConfig({ dataDir: dir, cluster: "redis://127.0.0.1:6379", nodeId: "n" }, env).cluster?.redis, {
      kind: "url",
      url: "redis://127.0.0.1:6379",
    });
    assert.throws(
      () => loadConfig({ dataDir: dir, cluster: "redis://127.0.0.1:6379" }, { ...env, AENV_CLUSTER_SENTINELS: "a:1" }),
      (err: unknown) => err instanceof ConfigError && /both set/.test(err.message),
    );
    assert.throws(
      () => loadConfig({ dataDir: dir }, { ...env, AENV_CLUSTER_SENTINELS: "a:1" }),
      (err: unknown) => err instanceof ConfigError && /AENV_CLUSTER_MASTER/.test(err.message),
    );
  });
});
