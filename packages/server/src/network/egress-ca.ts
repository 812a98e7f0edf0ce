import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { exec } from "../util/exec.js";

const MAX_CACHED = 2000;
/** Leaves live 30 days; a cached one is replaced after a week. */
const LEAF_REUSE_MS = 7 * 24 * 3600_000;

/**
 * The certificate authority of this node's egress proxy. Sandboxes whose network rules
 * transform HTTPS requests trust it; the proxy signs a certificate for each name it
 * intercepts. Kept in the data dir (0700): the key never enters a sandbox. Nodes that share
 * one CA folder (`network.egress_ca_dir`) can resume each other's sandboxes without
 * re-installing it.
 */
export class EgressCa {
  readonly certPem: string;
  /** SHA-256 of the CA certificate: what a sandbox record notes as installed. */
  readonly fingerprint: string;
  private readonly leaves = new Map<string, { at: number; p: Promise<{ key: string; cert: string }> }>();

  private constructor(
    private readonly dir: string,
    certPem: string,
  ) {
    this.certPem = certPem;
    this.fingerprint = createHash("sha256").update(certPem).digest("hex");
  }

  static async open(dir: string): Promise<EgressCa> {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const key = join(dir, "ca.key");
    const cert = join(dir, "ca.crt");
    const leafKey = join(dir, "leaf.key");
    if (!existsSync(cert) || !existsSync(key)) {
      await exec("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
      await exec("openssl", [
        ...["req", "-x509", "-new", "-key", key, "-days", "3650", "-out", cert],
        ...["-subj", "/O=aenv/CN=aenv egress proxy CA"],
        ...["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
      ]);
    }
    if (!existsSync(leafKey)) {
      await exec("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", leafKey]);
    }
    return new EgressCa(dir, readFileSync(cert, "utf8"));
  }

  /** A certificate for one host name (already checked to be a plain DNS name), cached. */
  leafFor(host: string): Promise<{ key: string; cert: string }> {
    const name = host.toLowerCase();
    const hit = this.leaves.get(name);
    if (hit && Date.now() - hit.at < LEAF_REUSE_MS) return hit.p;
    this.leaves.delete(name);
    if (this.leaves.size >= MAX_CACHED) this.leaves.delete(this.leaves.keys().next().value as string);
    const p = this.sign(name);
    this.leaves.set(name, { at: Date.now(), p });
    p.catch(() => this.leaves.delete(name));
    return p;
  }

  private async sign(name: string): Promise<{ key: string; cert: string }> {
    if (!/^[a-z0-9._-]{1,253}$/.test(name)) throw new Error(`not a host name: ${name}`);
    const tmp = mkdtempSync(join(this.dir, "sign-"));
    try {
      const csr = join(tmp, "leaf.csr");
      const ext = join(tmp, "ext.cnf");
      const out = join(tmp, "leaf.crt");
      writeFileSync(ext, `subjectAltName=DNS:${name}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n`);
      await exec("openssl", ["req", "-new", "-key", join(this.dir, "leaf.key"), "-subj", `/CN=${name}`, "-out", csr]);
      await exec("openssl", [
        ...["x509", "-req", "-in", csr, "-CA", join(this.dir, "ca.crt"), "-CAkey", join(this.dir, "ca.key")],
        ...["-set_serial", `0x${randomBytes(12).toString("hex")}`, "-days", "30", "-extfile", ext, "-out", out],
      ]);
      return { key: readFileSync(join(this.dir, "leaf.key"), "utf8"), cert: readFileSync(out, "utf8") };
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
}
