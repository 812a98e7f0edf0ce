import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { InvalidRequestError, TooLargeError, UnauthorizedError } from "../errors.js";
import { renameDurableSync } from "../util/durable-write.js";

const HASH_RE = /^[A-Za-z0-9]{1,128}$/;
const LINK_TTL_S = 3600;

/**
 * COPY contexts of template builds: tarballs the SDK uploads by content hash before it starts
 * a build. The upload link is signed (like a presigned S3 URL), because the SDK sends no API
 * key with the PUT. Stored once per hash, shared by every template.
 */
export class ContextFiles {
  constructor(
    private readonly dir: string,
    private readonly secret: string,
    private readonly maxBytes: number,
  ) {}

  path(hash: string): string {
    if (!HASH_RE.test(hash)) throw new InvalidRequestError(`invalid files hash '${hash}'`);
    return join(this.dir, `${hash}.tar`);
  }

  has(hash: string): boolean {
    return existsSync(this.path(hash));
  }

  private sign(templateId: string, hash: string, exp: number): string {
    return createHmac("sha256", this.secret).update(`${templateId}\n${hash}\n${exp}`).digest("hex");
  }

  /** E2B `{present, url}`: where the SDK PUTs the tarball when it is not stored yet. */
  link(templateId: string, hash: string, baseUrl: string): { present: boolean; url?: string } {
    if (this.has(hash)) return { present: true };
    const exp = Math.floor(Date.now() / 1000) + LINK_TTL_S;
    const sig = this.sign(templateId, hash, exp);
    return {
      present: false,
      url: `${baseUrl}/templates/${encodeURIComponent(templateId)}/files/${hash}?exp=${exp}&sig=${sig}`,
    };
  }

  verify(templateId: string, hash: string, exp: string | undefined, sig: string | undefined): void {
    const e = Number(exp);
    if (!sig || !Number.isInteger(e)) throw new UnauthorizedError("upload link is not signed");
    if (e < Date.now() / 1000) throw new UnauthorizedError("upload link expired; ask for a new one");
    const want = Buffer.from(this.sign(templateId, hash, e), "hex");
    const got = Buffer.from(sig, "hex");
    if (got.length !== want.length || !timingSafeEqual(got, want))
      throw new UnauthorizedError("bad upload link signature");
  }

  /** Streams an upload to disk; visible under its hash only once complete. */
  async store(hash: string, body: Readable, declaredLength: number | undefined): Promise<number> {
    const final = this.path(hash);
    if (declaredLength !== undefined && declaredLength > this.maxBytes) {
      throw new TooLargeError(`upload of ${declaredLength} bytes is over the limit of ${this.maxBytes}`);
    }
    mkdirSync(this.dir, { recursive: true });
    const tmp = `${final}.tmp-${randomBytes(4).toString("hex")}`;
    let bytes = 0;
    const max = this.maxBytes;
    try {
      await pipeline(
        body,
        async function* (src: AsyncIterable<Buffer>) {
          for await (const chunk of src) {
            bytes += chunk.length;
            if (bytes > max) throw new TooLargeError(`upload is over the limit of ${max} bytes`);
            yield chunk;
          }
        },
        createWriteStream(tmp, { mode: 0o600 }),
      );
      if (declaredLength !== undefined && bytes !== declaredLength) {
        throw new InvalidRequestError(`upload ended after ${bytes} of ${declaredLength} bytes`);
      }
      renameDurableSync(tmp, final);
      return bytes;
    } finally {
      rmSync(tmp, { force: true });
    }
  }
}
