// The node's heartbeat passes a sandbox's route to Redis when it is new, every route on a full
// beat (every 30 s), and every route at once when its node key was gone (Redis restarted).
// Redis is a stand-in that records each beat's keys; the script itself runs in test/cluster.test.ts.
import assert from "node:assert/strict";
import { mock, test } from "node:test";
import type { NodeInfo } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import pino from "pino";
import { NodeAgent } from "../src/cluster/node-agent.js";

test("beats pass new routes only, all of them every 30 s and after the node key was lost", async () => {
  mock.timers.enable({ apis: ["Date"], now: 1_000_000 });
  try {
    const beats: string[][] = [];
    let nodeKey = false;
    const redis = {
      eval: async (_script: string, n: number, ...args: string[]) => {
        beats.push(args.slice(3, n).map((k) => k.replace("aenv:sbx:", "")));
        const had = nodeKey ? 1 : 0;
        nodeKey = true;
        return [had];
      },
    } as unknown as Redis;
    const owned = ["a", "b"];
    const agent = new NodeAgent({
      redis,
      nodeId: "n1",
      describe: () => ({ checkpointKey: "k" }) as unknown as Omit<NodeInfo, "updatedAt">,
      owned: () => [...owned],
      log: pino({ level: "silent" }),
    });
    await agent.beat();
    assert.deepEqual(beats.at(-1), ["a", "b"], "the first beat is full");
    await agent.beat();
    assert.deepEqual(beats.at(-1), [], "nothing new: no routes");
    owned.push("c");
    await agent.beat();
    assert.deepEqual(beats.at(-1), ["c"], "a new sandbox's route");
    mock.timers.tick(30_000);
    await agent.beat();
    assert.deepEqual(beats.at(-1), ["a", "b", "c"], "a full beat every 30 s");
    nodeKey = false; // Redis restarted: every key gone
    const before = beats.length;
    await agent.beat();
    assert.deepEqual(beats.slice(before), [[], ["a", "b", "c"]], "the key was gone: a full beat at once");
  } finally {
    mock.timers.reset();
  }
});
