import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { HostClaim, HostClaimError } from "../src/network/host-claim.js";

const dir = mkdtempSync(join(tmpdir(), "aenv-claim-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const names = [
  { name: "net-zz", what: "network prefix 'zz'" },
  { name: "cidr-10.9.0.0_16", what: "slot range 10.9.0.0/16" },
];

/** A live process that is not this one, standing in for another server. */
function otherProcess() {
  const p = spawn("sleep", ["60"], { stdio: "ignore" });
  const stop = () =>
    new Promise((r) => {
      p.once("exit", r);
      p.kill("SIGKILL");
    });
  return { pid: p.pid as number, stop };
}

test("a name held by a live process is refused, naming it; nothing else is kept", async () => {
  const other = otherProcess();
  try {
    writeFileSync(join(dir, "cidr-10.9.0.0_16.pid"), `${other.pid}\n`);
    const claim = new HostClaim(dir);
    assert.throws(
      () => claim.take(names),
      (e) =>
        e instanceof HostClaimError && e.message.includes(`pid ${other.pid}`) && /slot range 10\.9/.test(e.message),
    );
    // The prefix it had claimed first was given back.
    assert.equal(existsSync(join(dir, "net-zz.pid")), false);
  } finally {
    await other.stop();
  }
});

test("a claim whose process is gone is taken over, and released at the end", async () => {
  const other = otherProcess();
  writeFileSync(join(dir, "net-zz.pid"), `${other.pid}\n`);
  await other.stop();
  const claim = new HostClaim(dir);
  claim.take(names);
  for (const n of names)
    assert.match(readFileSync(join(dir, `${n.name}.pid`), "utf8"), new RegExp(`^${process.pid} \\d+\n$`));
  claim.release();
  for (const n of names) assert.equal(existsSync(join(dir, `${n.name}.pid`)), false);
});

test("a live PID that started after the claim was made (a reused PID) does not hold it", async () => {
  const other = otherProcess();
  try {
    writeFileSync(join(dir, "net-zz.pid"), `${other.pid} 1\n`);
    const claim = new HostClaim(dir);
    claim.take(names);
    claim.release();
  } finally {
    await other.stop();
  }
});

test("a stale claim another server is replacing right now is not taken", async () => {
  const other = otherProcess();
  writeFileSync(join(dir, "net-zz.pid"), `${other.pid}\n`);
  await other.stop();
  mkdirSync(join(dir, "net-zz.pid.replacing"));
  try {
    assert.throws(() => new HostClaim(dir).take(names), /being claimed by another server starting now/);
  } finally {
    rmSync(join(dir, "net-zz.pid.replacing"), { recursive: true });
    rmSync(join(dir, "net-zz.pid"), { force: true });
  }
});
