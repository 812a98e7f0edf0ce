// The deployment files, checked without a container engine or a cluster (the fast part of
// scripts/test-deploy.sh, which also builds and runs the image and the compose stack):
// scripts parse, the systemd units pass `systemd-analyze verify` and keep their stop and
// hardening settings, the install script installs into a scratch prefix and uninstalls, the
// kustomize base renders and validates against the Kubernetes API schemas, and the compose
// file and Containerfile describe what docs/deployment.md says. Each check is shown to fail
// on a broken copy.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { parse } from "yaml";
import { validateManifests } from "./deploy/kubernetes.js";
import { ROOT } from "./helpers/server.js";

const scratch = mkdtempSync("/var/tmp/aenv-deploy-test-");
after(() => rmSync(scratch, { recursive: true, force: true }));

const has = (cmd: string) => spawnSync("sh", ["-c", `command -v ${cmd}`]).status === 0;
const read = (p: string) => readFileSync(join(ROOT, p), "utf8");

/** `systemd-analyze verify`: any output is a problem (it only warns about bad values). */
function verifyUnits(files: string[]): string {
  const r = spawnSync("systemd-analyze", ["verify", ...files], { encoding: "utf8" });
  return `${r.status === 0 ? "" : `exit ${r.status}\n`}${r.stdout}${r.stderr}`.trim();
}

/** The units as install.sh writes them, into DIR, with stub executables under DIR/opt. */
function renderUnits(dir: string, edit: (unit: string) => string = (u) => u): string[] {
  mkdirSync(join(dir, "opt/bin"), { recursive: true });
  for (const b of ["aenv-server", "aenv-gateway"]) {
    writeFileSync(join(dir, "opt/bin", b), "#!/bin/sh\n");
    chmodSync(join(dir, "opt/bin", b), 0o755);
  }
  return ["aenv-server.service", "aenv-gateway.service"].map((u) => {
    const text = read(`deploy/systemd/${u}`)
      .replaceAll("/opt/aenv", join(dir, "opt"))
      .replaceAll("/etc/aenv", join(dir, "etc"));
    writeFileSync(join(dir, u), edit(text));
    return join(dir, u);
  });
}

/** A unit's settings: key -> values, in order. */
function settings(unit: string): Map<string, string[]> {
  const m = new Map<string, string[]>();
  for (const line of unit.split("\n")) {
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (kv) m.set(kv[1] as string, [...(m.get(kv[1] as string) ?? []), kv[2] as string]);
  }
  return m;
}

describe("scripts", () => {
  test("every shell script parses (bash -n / sh -n)", () => {
    for (const f of ["scripts/install.sh", "scripts/test-deploy.sh", "scripts/setup.sh", "deploy/docker/build.sh"]) {
      assert.equal(spawnSync("bash", ["-n", join(ROOT, f)]).status, 0, f);
    }
    assert.equal(spawnSync("sh", ["-n", join(ROOT, "deploy/docker/entrypoint.sh")]).status, 0);
    const broken = join(scratch, "broken.sh");
    writeFileSync(broken, "if true; then\n echo x\n");
    assert.notEqual(spawnSync("bash", ["-n", broken]).status, 0, "a broken script is refused");
  });
});

describe("systemd units", { skip: !has("systemd-analyze") && "no systemd-analyze" }, () => {
  test("systemd-analyze verify passes on both units, silently", () => {
    const dir = join(scratch, "units");
    assert.equal(verifyUnits(renderUnits(dir)), "");
  });

  test("verify fails on a broken copy (a bad value, a missing program)", () => {
    const bad = renderUnits(join(scratch, "bad1"), (u) => u.replace("KillMode=process", "KillMode=procss"));
    assert.match(verifyUnits(bad), /kill mode/i);
    const missing = renderUnits(join(scratch, "bad2"), (u) =>
      u.replace(/^ExecStart=\S+/m, "ExecStart=/nonexistent/aenv"),
    );
    assert.match(verifyUnits(missing), /not executable/);
  });

  test("the node stops by draining (its own SIGTERM) and restarts on failure; the gateway is unprivileged", () => {
    const node = settings(read("deploy/systemd/aenv-server.service"));
    assert.deepEqual(node.get("KillSignal"), ["SIGTERM"]);
    assert.deepEqual(node.get("KillMode"), ["process"], "only the server is signalled; it stops its sandboxes");
    assert.deepEqual(node.get("Restart"), ["on-failure"]);
    assert.ok(/^\d+min$/.test(node.get("TimeoutStopSec")?.[0] ?? ""), "minutes to drain");
    const caps = (node.get("CapabilityBoundingSet")?.[0] ?? "").split(" ");
    for (const c of ["CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_SETFCAP"]) assert.ok(caps.includes(c), c);
    assert.ok(!caps.includes("CAP_SYS_MODULE"));
    assert.deepEqual(node.get("NoNewPrivileges"), ["yes"]);
    assert.equal(node.get("ProtectSystem"), undefined, "no private mount namespace for the node");
    const gw = settings(read("deploy/systemd/aenv-gateway.service"));
    assert.deepEqual(gw.get("User"), ["aenv"]);
    assert.deepEqual(gw.get("CapabilityBoundingSet"), [""]);
    assert.deepEqual(gw.get("Restart"), ["on-failure"]);
    assert.match(gw.get("ExecStart")?.[0] ?? "", /--listen \$\{AENV_GATEWAY_LISTEN\}/);
  });
});

describe("install.sh", () => {
  test("installs into a scratch prefix, verifies, and uninstalls keeping the data dir unless --purge", () => {
    const s = join(scratch, "install");
    const args = [
      "--prefix",
      `${s}/opt/aenv`,
      "--sysconfdir",
      `${s}/etc/aenv`,
      "--unitdir",
      `${s}/units`,
      "--data-dir",
      `${s}/data`,
      "--no-user",
      "--no-deps",
      "--no-template",
    ];
    const run = (a: string[]) => execFileSync("bash", [join(ROOT, "scripts/install.sh"), ...a], { encoding: "utf8" });
    const out = run(args);
    for (const f of [
      "opt/aenv/bin/aenv-server",
      "opt/aenv/bin/aenv-gateway",
      "opt/aenv/bin/aenv",
      "opt/aenv/app/packages/server/dist/main.js",
      "opt/aenv/app/packages/gateway/dist/main.js",
      "opt/aenv/app/node_modules/fastify/package.json",
      "etc/aenv/config.toml",
      "etc/aenv/aenv.env",
      "units/aenv-server.service",
      "units/aenv-gateway.service",
    ]) {
      assert.ok(existsSync(join(s, f)), f);
    }
    assert.ok(!existsSync(join(s, "opt/aenv/app/node_modules/typescript")), "dev dependencies pruned");
    assert.match(readFileSync(join(s, "etc/aenv/aenv.env"), "utf8"), /^AENV_API_KEY=e2b_[0-9a-f]{48}$/m);
    assert.match(readFileSync(join(s, "etc/aenv/aenv.env"), "utf8"), /^AENV_REPOSITORY_KEY=[0-9a-f]{64}$/m);
    assert.equal(statSync(join(s, "etc/aenv/aenv.env")).mode & 0o777, 0o600, "the key file is root's only");
    assert.match(readFileSync(join(s, "units/aenv-gateway.service"), "utf8"), /^DynamicUser=yes$/m);
    assert.match(
      readFileSync(join(s, "units/aenv-server.service"), "utf8"),
      new RegExp(`ExecStart=${s}/opt/aenv/bin/`),
    );
    if (has("systemd-analyze")) assert.match(out, /systemd-analyze verify: ok/);
    // The installed wrapper runs the installed app.
    assert.match(execFileSync(`${s}/opt/aenv/bin/aenv-server`, ["--help"], { encoding: "utf8" }), /aenv-server/);
    assert.match(execFileSync(`${s}/opt/aenv/bin/aenv-gateway`, ["--help"], { encoding: "utf8" }), /aenv-gateway/);
    mkdirSync(join(s, "data/sandboxes"), { recursive: true });
    run(["--uninstall", "--prefix", `${s}/opt/aenv`]);
    assert.ok(!existsSync(join(s, "opt/aenv")));
    assert.ok(!existsSync(join(s, "units/aenv-server.service")));
    assert.ok(existsSync(join(s, "data/sandboxes")), "the data dir is kept");
    assert.ok(existsSync(join(s, "etc/aenv/aenv.env")), "the config is kept");
    run([...args]);
    run(["--uninstall", "--purge", "--prefix", `${s}/opt/aenv`]);
    assert.ok(!existsSync(join(s, "data")) && !existsSync(join(s, "etc/aenv")), "--purge removes data and config");
  });
});

describe("kubernetes", { skip: !has("kubectl") && "no kubectl" }, () => {
  const render = () => execFileSync("kubectl", ["kustomize", join(ROOT, "deploy/kubernetes")], { encoding: "utf8" });

  test("the kustomize base renders and validates against the Kubernetes API schemas", async () => {
    const text = render();
    assert.deepEqual(await validateManifests(text), []);
    const objs = text
      .split(/^---$/m)
      .map((d) => parse(d) as { kind: string; metadata: { name: string; namespace?: string } } | null)
      .filter((o) => o !== null);
    assert.deepEqual(objs.map((o) => o.kind).sort(), [
      "ConfigMap",
      "DaemonSet",
      "Deployment",
      "Namespace",
      "PersistentVolumeClaim",
      "Secret",
      "Service",
      "Service",
      "StatefulSet",
    ]);
    for (const o of objs) if (o.kind !== "Namespace") assert.equal(o.metadata.namespace, "aenv", o.kind);
    assert.deepEqual(await validateManifests(read("deploy/kubernetes/optional/ingress.yaml")), []);
  });

  test("nodes: privileged, host network, hostPath data, drain on preStop, long grace, metrics scraped", () => {
    type Pod = {
      hostNetwork: boolean;
      terminationGracePeriodSeconds: number;
      volumes: Array<{ name: string; hostPath?: { path: string }; persistentVolumeClaim?: unknown }>;
      containers: Array<{
        securityContext: { privileged: boolean };
        lifecycle: { preStop: { exec: { command: string[] } } };
        ports: Array<{ containerPort: number }>;
        env: Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;
      }>;
    };
    const ds = parse(read("deploy/kubernetes/node.yaml")) as {
      spec: { template: { metadata: { annotations: Record<string, string> }; spec: Pod } };
    };
    const pod = ds.spec.template.spec;
    const c = pod.containers[0];
    assert.ok(c);
    assert.equal(pod.hostNetwork, true);
    assert.equal(c.securityContext.privileged, true);
    assert.deepEqual(c.lifecycle.preStop.exec.command, ["/opt/aenv/bin/entrypoint", "drain"]);
    // Every node gets the same repository key, from the Secret.
    const repoKey = c.env.find((e) => e.name === "AENV_REPOSITORY_KEY")?.valueFrom?.secretKeyRef;
    assert.deepEqual(repoKey, { name: "aenv-api-key", key: "AENV_REPOSITORY_KEY" });
    assert.match(read("deploy/kubernetes/secret.yaml"), /^ {2}AENV_REPOSITORY_KEY: REPLACE-ME$/m);
    assert.ok(pod.terminationGracePeriodSeconds >= 600);
    assert.equal(pod.volumes.find((v) => v.name === "data")?.hostPath?.path, "/var/lib/aenv");
    assert.ok(pod.volumes.find((v) => v.name === "repository")?.persistentVolumeClaim);
    assert.equal(c.ports[0]?.containerPort, 8000);
    assert.equal(ds.spec.template.metadata.annotations["prometheus.io/path"], "/metrics");
  });

  test("validation fails on a broken copy (unknown field, wrong type, unknown kind)", async () => {
    const text = render();
    const p1 = await validateManifests(text.replace("hostNetwork: true", "hostNetwrk: true"));
    assert.ok(
      p1.some((p) => p.includes("hostNetwrk")),
      p1.join("\n"),
    );
    const p2 = await validateManifests(text.replace("replicas: 2", 'replicas: "two"'));
    assert.ok(p2.length > 0);
    const p3 = await validateManifests(text.replace("kind: DaemonSet", "kind: DaemonSett"));
    assert.ok(p3.some((p) => p.includes("DaemonSett")));
  });
});

describe("compose and image", () => {
  test("compose.yaml: Redis, two privileged nodes on one repository volume, a gateway on 8080", () => {
    type Svc = {
      image: string;
      privileged?: boolean;
      command: string[];
      volumes?: string[];
      ports?: string[];
      stop_grace_period?: string;
      environment?: Record<string, string>;
    };
    const c = parse(read("deploy/compose/compose.yaml"), { merge: true }) as {
      services: Record<string, Svc>;
      volumes: object;
    };
    assert.deepEqual(Object.keys(c.services).sort(), ["gateway", "node-a", "node-b", "redis"]);
    for (const n of ["node-a", "node-b"]) {
      const s = c.services[n] as Svc;
      assert.equal(s.privileged, true);
      assert.ok(s.volumes?.includes("repository:/repository"), n);
      assert.ok(s.command.includes("--cluster") && s.command.includes(n), n);
      assert.equal(s.stop_grace_period, "10m");
      // Every node signs and checks the shared repository with the same key.
      // biome-ignore lint/suspicious/noTemplateCurlyInString: compose's own interpolation syntax
      assert.equal(s.environment?.AENV_REPOSITORY_KEY, "${AENV_REPOSITORY_KEY:?set AENV_REPOSITORY_KEY}", n);
    }
    assert.deepEqual(c.services.gateway?.ports, ["${AENV_GATEWAY_PORT:-8080}:8080"]);
    assert.ok("repository" in c.volumes);
  });

  test("Containerfile: bookworm base, runsc from backports, data volume, both ports", () => {
    const f = read("deploy/docker/Containerfile");
    assert.match(f, /^FROM docker\.io\/library\/debian:bookworm$/m);
    assert.match(f, /-t bookworm-backports runsc/);
    assert.match(f, /^VOLUME \/var\/lib\/aenv$/m);
    assert.match(f, /^EXPOSE 8000 8080$/m);
    assert.match(f, /^STOPSIGNAL SIGTERM$/m);
  });
});
