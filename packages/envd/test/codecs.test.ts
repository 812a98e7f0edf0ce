/**
 * Both Connect codecs (proto3 JSON and the binary format, as the Python SDK sends it) and
 * the client stream (StreamInput), through connect-es's own client with the messages
 * generated from packages/protocol/proto.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Filesystem, Process, processPb } from "@aenv/protocol";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { type Harness, needsRoot, startHarness, TOKEN } from "./helpers.js";

const auth = { headers: { "X-Access-Token": TOKEN, Authorization: "Basic cm9vdDo=" } };

describe("Connect codecs", { skip: needsRoot }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  for (const binary of [true, false]) {
    const codec = binary ? "binary" : "JSON";
    const transport = () => createConnectTransport({ baseUrl: h.envdUrl, httpVersion: "1.1", useBinaryFormat: binary });

    it(`${codec}: unary, server stream and client stream`, async () => {
      const proc = createClient(Process, transport());
      const fs = createClient(Filesystem, transport());
      const dir = await fs.stat({ path: h.workdir }, auth);
      assert.equal(dir.entry?.type, 2); // FILE_TYPE_DIRECTORY
      assert.ok(dir.entry?.modifiedTime?.seconds);

      // cat echoes what StreamInput writes to its stdin, then exits at EOF
      const events = proc.start(
        { process: { cmd: "/bin/cat", envs: { A: "1" } }, stdin: true, tag: `cat-${codec}` },
        auth,
      );
      const it = events[Symbol.asyncIterator]();
      const first = (await it.next()).value as processPb.StartResponse;
      assert.equal(first.event?.event.case, "start");
      const pid = first.event?.event.case === "start" ? first.event.event.value.pid : 0;
      assert.ok(pid > 0);

      const listed = await proc.list({}, auth);
      const mine = listed.processes.find((p) => p.pid === pid);
      assert.equal(mine?.tag, `cat-${codec}`);
      assert.deepEqual(mine?.config?.envs, { A: "1" });

      async function* input() {
        yield create(processPb.StreamInputRequestSchema, {
          event: { case: "start", value: { process: { selector: { case: "pid", value: pid } } } },
        });
        yield create(processPb.StreamInputRequestSchema, { event: { case: "keepalive", value: {} } });
        for (const part of ["hello ", "wörld\n"]) {
          yield create(processPb.StreamInputRequestSchema, {
            event: { case: "data", value: { input: { input: { case: "stdin", value: Buffer.from(part) } } } },
          });
        }
      }
      await proc.streamInput(input(), auth);
      await proc.closeStdin({ process: { selector: { case: "pid", value: pid } } }, auth);

      let out = "";
      let exit: number | undefined;
      for (let r = await it.next(); !r.done; r = await it.next()) {
        const ev = (r.value as processPb.StartResponse).event?.event;
        if (ev?.case === "data" && ev.value.output.case === "stdout")
          out += Buffer.from(ev.value.output.value).toString();
        if (ev?.case === "end") exit = ev.value.exitCode;
      }
      assert.equal(out, "hello wörld\n");
      assert.equal(exit, 0);
    });

    it(`${codec}: StreamInput must name its process first, and errors carry their code`, async () => {
      const proc = createClient(Process, transport());
      async function* dataOnly() {
        yield create(processPb.StreamInputRequestSchema, {
          event: { case: "data", value: { input: { input: { case: "stdin", value: Buffer.from("x") } } } },
        });
      }
      const err = await proc.streamInput(dataOnly(), auth).catch((e: unknown) => e);
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.FailedPrecondition);
      const missing = await proc
        .sendSignal({ process: { selector: { case: "pid", value: 999_999 } }, signal: processPb.Signal.SIGKILL }, auth)
        .catch((e: unknown) => e);
      assert.ok(missing instanceof ConnectError);
      assert.equal(missing.code, Code.NotFound);
      const noauth = await proc.list({}).catch((e: unknown) => e);
      assert.ok(noauth instanceof ConnectError);
      assert.equal(noauth.code, Code.Unauthenticated);
    });
  }
});
