/**
 * Entries whose content a node acts on — manifests (snapshots, paused sandboxes, templates),
 * commit announcements and resume claims — are stored sealed: an HMAC-SHA256 over the entry's
 * key and body, with a key every node sharing the repository holds. Whoever can write the
 * folder or bucket but lacks the key can delete entries or put back old ones it copied, but
 * cannot make a node act on content of its own.
 *
 * The configured secret is never used as a MAC key itself: one subkey per kind of entry is
 * derived from it (HKDF-SHA256), so a MAC made for one kind never verifies as another, and
 * the object key is part of what is signed, so an entry moved to another key is refused.
 * Leases and GC locks stay unsigned: a forged one only keeps chunks or delays commits.
 */
import { createHmac, hkdfSync, timingSafeEqual } from "node:crypto";
import { UntrustedManifestError } from "./trust.js";

export type SealedKind = "manifest" | "announcement" | "claim";

const KINDS: readonly SealedKind[] = ["manifest", "announcement", "claim"];
/** Changing it (or the envelope) makes every node refuse every existing entry. */
const SALT = "aenv snapshot repository v1";

/** What is stored: the entry's JSON as a string (signed byte for byte) and its MAC. */
interface Envelope {
  sealed: 1;
  mac: string;
  body: string;
}

const isEnvelope = (v: unknown): v is Envelope => {
  const e = v as Partial<Envelope> | null;
  return (
    typeof e === "object" && e !== null && e.sealed === 1 && typeof e.mac === "string" && typeof e.body === "string"
  );
};

export class RepositoryKey {
  private readonly subkeys = new Map<SealedKind, Buffer>();

  constructor(secret: string) {
    if (secret.length < 32) throw new Error("the repository key must be at least 32 characters");
    for (const kind of KINDS) {
      this.subkeys.set(kind, Buffer.from(hkdfSync("sha256", secret, SALT, `aenv ${kind}`, 32)));
    }
  }

  private mac(kind: SealedKind, key: string, body: string): Buffer {
    return createHmac("sha256", this.subkeys.get(kind) as Buffer)
      .update(`${key}\n`)
      .update(body)
      .digest();
  }

  /** The bytes to store under `key`. */
  seal(kind: SealedKind, key: string, value: unknown): Buffer {
    const body = JSON.stringify(value);
    const env: Envelope = { sealed: 1, mac: this.mac(kind, key, body).toString("hex"), body };
    return Buffer.from(JSON.stringify(env));
  }

  /** The value stored under `key`, once its MAC checks out; an UntrustedManifestError otherwise. */
  open(kind: SealedKind, key: string, raw: Buffer): unknown {
    let env: unknown;
    try {
      env = JSON.parse(raw.toString("utf8"));
    } catch {
      throw new UntrustedManifestError(key, "not valid JSON");
    }
    if (!isEnvelope(env)) throw new UntrustedManifestError(key, "not signed (written without the repository key)");
    const want = this.mac(kind, key, env.body);
    const got = Buffer.from(env.mac, "hex");
    if (got.length !== want.length || !timingSafeEqual(got, want)) {
      throw new UntrustedManifestError(key, "signature does not match this cluster's repository key");
    }
    try {
      return JSON.parse(env.body);
    } catch {
      throw new UntrustedManifestError(key, "signed body is not valid JSON");
    }
  }
}

/**
 * The entry's value without checking its MAC, sealed or not: only for what errs on the safe
 * side (GC keeps every chunk any manifest-shaped entry names). Throws on unreadable JSON.
 */
export function unverifiedBody(raw: Buffer): unknown {
  const v: unknown = JSON.parse(raw.toString("utf8"));
  return isEnvelope(v) ? JSON.parse(v.body) : v;
}
