import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  type ListObjectsV2CommandOutput,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import {
  assertKey,
  BackendError,
  BackendUnavailableError,
  describeError,
  type ObjectInfo,
  type RepositoryBackend,
} from "./backend.js";

export interface S3BackendOptions {
  bucket: string;
  /** Required: S3-compatible stores sign with it and a guessed one fails in confusing ways. */
  region: string;
  /** e.g. http://127.0.0.1:9000; absent means AWS itself. */
  endpoint?: string;
  /** Key prefix inside the bucket ("" or "a/b"), so several repositories can share a bucket. */
  prefix?: string;
  /** Path-style URLs (http://host/bucket/key), what MinIO, Ceph and s3rver usually need. */
  forcePathStyle?: boolean;
  /** Tests only; otherwise the SDK's default chain (env, ~/.aws, SSO, web identity, IMDS). */
  credentials?: S3ClientConfig["credentials"];
  /** Multipart part size for objects larger than it (default 8 MiB, S3's minimum is 5 MiB). */
  partSizeBytes?: number;
  /** Attempts per request including retries (default 3). */
  maxAttempts?: number;
}

type SdkError = Error & { name: string; $metadata?: { httpStatusCode?: number }; code?: string };

const statusOf = (err: unknown) => (err as SdkError)?.$metadata?.httpStatusCode;
const isMissing = (err: unknown) =>
  statusOf(err) === 404 || ["NoSuchKey", "NotFound"].includes((err as SdkError)?.name ?? "");

/**
 * s3 backend: keys live under `prefix/` in one bucket. PutObject and CompleteMultipartUpload
 * are atomic in S3 (an object appears whole or not at all), and lib-storage's Upload aborts a
 * failed multipart upload, so a dead connection mid-upload leaves nothing visible.
 */
export class S3Backend implements RepositoryBackend {
  readonly description: string;
  readonly client: S3Client;
  private readonly prefix: string;

  constructor(private readonly opts: S3BackendOptions) {
    if (!opts.region) throw new BackendUnavailableError("s3 repository: a region is required (AENV_S3_REGION)");
    if (!opts.bucket) throw new BackendUnavailableError("s3 repository: a bucket is required (AENV_S3_BUCKET)");
    const p = (opts.prefix ?? "").replace(/^\/+|\/+$/g, "");
    this.prefix = p ? `${p}/` : "";
    this.description = `s3 ${opts.endpoint ?? `(aws ${opts.region})`} ${opts.bucket}/${this.prefix}`;
    this.client = new S3Client({
      region: opts.region,
      endpoint: opts.endpoint,
      forcePathStyle: opts.forcePathStyle ?? false,
      credentials: opts.credentials,
      maxAttempts: opts.maxAttempts ?? 3,
      // A blackholed endpoint must fail, not hang a commit or the start-up check.
      requestHandler: { connectionTimeout: 5_000, requestTimeout: 120_000 },
    });
  }

  private k(key: string): string {
    assertKey(key);
    return this.prefix + key;
  }

  private fail(op: string, key: string, err: unknown): BackendError {
    return new BackendError(`${this.description}: ${op} ${key} failed: ${describeError(err)}`, { cause: err });
  }

  async put(key: string, body: Uint8Array | Readable): Promise<void> {
    try {
      await new Upload({
        client: this.client,
        params: { Bucket: this.opts.bucket, Key: this.k(key), Body: body },
        partSize: this.opts.partSizeBytes ?? 8 * 1024 * 1024,
        queueSize: 4,
        leavePartsOnError: false,
      }).done();
    } catch (err) {
      throw this.fail("writing", key, err);
    }
  }

  /**
   * Conditional writes (`If-None-Match: *`) are honoured by AWS S3, MinIO and Ceph; some
   * S3-compatible servers (s3rver) ignore the header and overwrite. Probed once: where they
   * are ignored, putIfAbsent is a check-then-put (a race can let two callers win; the
   * cluster's Redis lock is then the only guard) and says so in the log once.
   */
  conditionalWrites: boolean | undefined;
  private probing: Promise<boolean> | undefined;

  private probeConditionalWrites(): Promise<boolean> {
    this.probing ??= (async () => {
      const key = this.k(`claims/.probe-${randomBytes(6).toString("hex")}`);
      const put = (body: string) =>
        this.client.send(new PutObjectCommand({ Bucket: this.opts.bucket, Key: key, Body: body, IfNoneMatch: "*" }));
      try {
        await put("1");
        const honoured = await put("2").then(
          () => false,
          (err) => statusOf(err) === 412 || statusOf(err) === 409,
        );
        this.conditionalWrites = honoured;
        if (!honoured) this.onWarning?.(`${this.description}: the server ignores conditional writes (If-None-Match)`);
        return honoured;
      } finally {
        await this.client.send(new DeleteObjectCommand({ Bucket: this.opts.bucket, Key: key })).catch(() => {});
      }
    })();
    this.probing.catch(() => (this.probing = undefined));
    return this.probing;
  }

  /** Where a degraded guarantee is reported (the repository's logger). */
  onWarning?: (message: string) => void;

  async putIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    try {
      if (!(await this.probeConditionalWrites())) {
        if (await this.head(key)) return false;
        await this.put(key, body);
        return true;
      }
      await this.client.send(
        new PutObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key), Body: body, IfNoneMatch: "*" }),
      );
      return true;
    } catch (err) {
      // 412: the key exists; 409: a conditional write of the same key raced this one.
      if (statusOf(err) === 412 || statusOf(err) === 409) return false;
      throw this.fail("creating", key, err);
    }
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
      if (!r.Body) return Buffer.alloc(0);
      return Buffer.from(await r.Body.transformToByteArray());
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw this.fail("reading", key, err);
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
      return { key, size: r.ContentLength ?? 0, modified: r.LastModified ?? new Date(0) };
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw this.fail("stat", key, err);
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    let token: string | undefined;
    do {
      let r: ListObjectsV2CommandOutput;
      try {
        r = await this.client.send(
          new ListObjectsV2Command({
            Bucket: this.opts.bucket,
            Prefix: this.prefix + prefix,
            ContinuationToken: token,
          }),
        );
      } catch (err) {
        throw this.fail("listing", prefix || "/", err);
      }
      for (const o of r.Contents ?? []) {
        if (!o.Key?.startsWith(this.prefix)) continue;
        yield { key: o.Key.slice(this.prefix.length), size: o.Size ?? 0, modified: o.LastModified ?? new Date(0) };
      }
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
  }

  async delete(key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.opts.bucket, Key: this.k(key) }));
    } catch (err) {
      if (isMissing(err)) return;
      throw this.fail("deleting", key, err);
    }
  }

  async check(): Promise<void> {
    const where = `s3 bucket '${this.opts.bucket}' at ${this.opts.endpoint ?? `AWS ${this.opts.region}`}`;
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.opts.bucket }));
    } catch (err) {
      const status = statusOf(err);
      const name = (err as SdkError)?.name ?? "";
      let why: string;
      if (status === 404 || name === "NotFound" || name === "NoSuchBucket") why = "the bucket does not exist";
      else if (status === 403) why = "access denied (check the credentials and the bucket policy)";
      else if (status === 301) why = "the bucket is in another region (check AENV_S3_REGION)";
      else if (name === "CredentialsProviderError") why = "no AWS credentials found (env, ~/.aws, instance role)";
      else if (status) why = describeError(err);
      else why = `endpoint unreachable: ${describeError(err)}`;
      throw new BackendUnavailableError(`repository ${where}: ${why}`, { cause: err });
    }
    const probe = `.aenv-check/${randomBytes(6).toString("hex")}`;
    try {
      await this.put(probe, Buffer.from("ok"));
      await this.delete(probe);
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause ?? err;
      throw new BackendUnavailableError(`repository ${where}: cannot write objects: ${describeError(cause)}`, {
        cause: err,
      });
    }
  }

  destroy(): void {
    this.client.destroy();
  }
}
