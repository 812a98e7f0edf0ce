import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { InvalidRequestError, TooLargeError, UnauthorizedError } from "@aenv/edge/errors";
import { renameDurableSync } from "../util/durable-write.js";

const HASH_RE = /^[A-Za-z0-9]{1,128}$/;
const TEMPLATE_ID_RE = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/;
const LINK_TTL_S = 3600;

/**
 * COPY contexts of template builds: tarballs the SDK uploads by content hash before it starts
 * a build. The upload link is signed (like a presigned S3 URL), because the SDK sends no API
 * key with the PUT.
 *
 * Stored per template, never shared between templates: the hash is the client's word, and it
 * cannot be checked against what arrives. E2B's SDK hashes the COPY line (source and
 * destination, which the upload does not carry) and each entry's stat mode and size — for
 * folders, the size the client's filesystem reports, which no tarball records — so nothing
 * the server holds recomputes it. Keyed by template, an uploader only ever supplies contexts
 * to builds of a template it could rebuild anyway; no build of another template uses them.
 */
export class ContextFiles {
  constructor(
    private readonly dir: string,
    private readonly secret: string,
    private readonly maxBytes: number,
  ) {}

  path(templateId: string, hash: string): string {
    if (!HASH_RE.test(hash)) throw new InvalidRequestError(`invalid files hash '${hash}'`);
    if (!TEMPLATE_ID_RE.test(templateId)) throw new InvalidRequestError(`invalid template ID '${templateId}'`);
    return join(this.dir, templateId, `${hash}.tar`);
  }

  has(templateId: string, hash: string): boolean {
    return existsSync(this.path(templateId, hash));
  }

  private sign(templateId: string, hash: string, exp: number): string {
    return createHmac("sha256", this.secret).update(`${templateId}\n${hash}\n${exp}`).digest("hex");
  }

  /** E2B `{present, url}`: where the SDK PUTs the tarball when it is not stored yet. */
  link(templateId: string, hash: string, baseUrl: string): { present: boolean; url?: string } {
    if (this.has(templateId, hash)) return { present: true };
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

  /** Streams an upload to disk; visible under its template and hash only once complete. */
  async store(templateId: string, hash: string, body: Readable, declaredLength: number | undefined): Promise<number> {
    const final = this.path(templateId, hash);
    if (declaredLength !== undefined && declaredLength > this.maxBytes) {
      throw new TooLargeError(`upload of ${declaredLength} bytes is over the limit of ${this.maxBytes}`);
    }
    mkdirSync(dirname(final), { recursive: true });
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
