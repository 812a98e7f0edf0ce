import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

/** Changing it makes every node refuse every secret a cluster holds. */
const SALT = "aenv secrets v1";
const PREFIX = "v1:";

/**
 * A secret's value as a cluster keeps it in Redis: AES-256-GCM under a key derived (HKDF-SHA256)
 * from the repository key every node of the cluster holds, with the secret's ID as associated
 * data, so a sealed value moved to another secret does not open. Whoever reads Redis (gateways,
 * an operator's redis-cli, a backup) sees no value; whoever can write it can delete secrets,
 * not make a node send a value of their own choosing to a host.
 */
export class SecretSealer {
  private readonly key: Buffer;

  constructor(repositoryKey: string) {
    if (repositoryKey.length < 32) throw new Error("the repository key must be at least 32 characters");
    this.key = Buffer.from(hkdfSync("sha256", repositoryKey, SALT, "aenv secret values", 32));
  }

  seal(id: string, value: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv("aes-256-gcm", this.key, iv);
    c.setAAD(Buffer.from(id));
    const body = Buffer.concat([c.update(value, "utf8"), c.final()]);
    return PREFIX + Buffer.concat([iv, c.getAuthTag(), body]).toString("base64");
  }

  /** The value, or an error when it was sealed under another key or for another secret, or altered. */
  open(id: string, sealed: string): string {
    if (!sealed.startsWith(PREFIX)) throw new Error("not a sealed secret value");
    const raw = Buffer.from(sealed.slice(PREFIX.length), "base64");
    if (raw.length < 28) throw new Error("sealed secret value too short");
    const d = createDecipheriv("aes-256-gcm", this.key, raw.subarray(0, 12));
    d.setAAD(Buffer.from(id));
    d.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString("utf8");
  }
}
