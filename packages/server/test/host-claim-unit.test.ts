import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { HostClaim, HostClaimError } from "../src/network/host-claim.js";
import { SELF, startOf } from "../src/util/process-identity.js";

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
    assert.match(readFileSync(join(dir, `${n.name}.pid`), "utf8"), new RegExp(`^${process.pid} \\d+ \\d+\n$`));
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

/** A claim file left by a process that has exited. */
async function staleClaim(name = "net-zz"): Promise<string> {
  const other = otherProcess();
  const text = `${other.pid} ${startOf(other.pid)} ${SELF.ns}\n`;
  await other.stop();
  writeFileSync(join(dir, `${name}.pid`), text);
  return text;
}

test("a symlink planted where the claim's temporary file goes is not written through", async () => {
  const victim = join(dir, "victim");
  writeFileSync(victim, "precious");
  symlinkSync(victim, join(dir, `.net-zz.${process.pid}.tmp`));
  const claim = new HostClaim(dir);
  claim.take(names);
  claim.release();
  assert.equal(readFileSync(victim, "utf8"), "precious");
  rmSync(victim);
});

test("a claim folder others can write, or a symlink, is refused", () => {
  const lax = mkdtempSync(join(tmpdir(), "aenv-claim-lax-"));
  try {
    chmodSync(lax, 0o777);
    assert.throws(
      () => new HostClaim(lax).take(names),
      (e) => e instanceof HostClaimError && /mode 777/.test(e.message),
    );
    chmodSync(lax, 0o700);
    const link = `${lax}.link`;
    symlinkSync(lax, link);
    try {
      assert.throws(
        () => new HostClaim(link).take(names),
        (e) => e instanceof HostClaimError && /a symlink/.test(e.message),
      );
    } finally {
      rmSync(link);
    }
    assert.equal(existsSync(join(lax, "net-zz.pid")), false);
  } finally {
    rmSync(lax, { recursive: true, force: true });
  }
});

test("a mutex left by a server killed while replacing a claim does not keep later starts out", async () => {
  await staleClaim();
  // Left by a process that is gone (the current layout)...
  writeFileSync(join(dir, "net-zz.pid.replacing"), await staleClaim("dead-mutex"));
  let claim = new HostClaim(dir);
  claim.take(names);
  claim.release();
  assert.equal(existsSync(join(dir, "net-zz.pid.replacing")), false);
  // ...and an empty folder of the older layout, untouched for long.
  await staleClaim();
  mkdirSync(join(dir, "net-zz.pid.replacing"));
  const old = new Date(Date.now() - 120_000);
  utimesSync(join(dir, "net-zz.pid.replacing"), old, old);
  claim = new HostClaim(dir);
  claim.take(names);
  claim.release();
  rmSync(join(dir, "dead-mutex.pid"), { force: true });
});

test("a mutex of a live process is respected", async () => {
  const other = otherProcess();
  try {
    await staleClaim();
    writeFileSync(join(dir, "net-zz.pid.replacing"), `${other.pid} ${startOf(other.pid)} ${SELF.ns}\n`);
    assert.throws(() => new HostClaim(dir).take(names), /being claimed by another server starting now/);
  } finally {
    await other.stop();
    rmSync(join(dir, "net-zz.pid.replacing"), { force: true });
    rmSync(join(dir, "net-zz.pid"), { force: true });
  }
});

test("a claim of a server in another PID namespace is not judged by a PID that means nothing here", async () => {
  const other = otherProcess();
  await other.stop();
  writeFileSync(join(dir, "net-zz.pid"), `${other.pid} 5 1${SELF.ns}\n`);
  try {
    assert.throws(
      () => new HostClaim(dir).take(names),
      /in use by another server on this host \(pid \d+ in another PID namespace\)/,
    );
  } finally {
    rmSync(join(dir, "net-zz.pid"), { force: true });
  }
});
