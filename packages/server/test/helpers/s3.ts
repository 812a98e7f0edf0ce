/**
 * A real S3-compatible server on loopback for tests and benchmarks: s3rver (npm), storing
 * objects in a temp folder. stop()/restart() keep the port and the data, to test a store
 * that goes away mid-upload and comes back.
 */
import { mkdtempSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
import type { S3BackendOptions } from "../../src/storage/repository/s3-backend.js";

interface S3rverInstance {
  run(): Promise<{ address: string; port: number }>;
  close(): Promise<void>;
  httpServer?: Server;
}
type S3rverCtor = new (opts: { port: number; address: string; silent: boolean; directory: string }) => S3rverInstance;

// s3rver ships CommonJS without types.
const S3rver = createRequire(import.meta.url)("s3rver") as S3rverCtor;

export interface TestS3 {
  endpoint: string;
  port: number;
  bucket: string;
  /** Options for an S3Backend on this server (prefix left to the caller). */
  backendOptions(prefix?: string): S3BackendOptions;
  /**
   * Stops the server: requests in progress finish, later ones are refused (ECONNREFUSED).
   * Connections are not cut mid-request because s3rver, unlike S3 or MinIO, writes objects
   * in place and would keep a truncated one.
   */
  stop(): Promise<void>;
  /** Starts it again on the same port with the same objects. */
  restart(): Promise<void>;
  /** Stops it and removes its folder. */
  close(): Promise<void>;
}

export const S3_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

export async function startS3(bucket = "aenv-test"): Promise<TestS3> {
  const dir = mkdtempSync(join(tmpdir(), "aenv-s3rver-"));
  let srv: S3rverInstance | undefined;
  let port = 0;
  const start = async () => {
    srv = new S3rver({ port, address: "127.0.0.1", silent: true, directory: dir });
    port = (await srv.run()).port;
  };
  const stop = async () => {
    if (!srv) return;
    const s = srv;
    srv = undefined;
    const closed = s.close();
    // Keep-alive connections that go idle after close() would hold it open for seconds.
    const t = setInterval(() => s.httpServer?.closeIdleConnections(), 20);
    try {
      await closed;
    } finally {
      clearInterval(t);
    }
  };
  await start();
  const endpoint = `http://127.0.0.1:${port}`;
  const client = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials: S3_CREDENTIALS });
  await client.send(new CreateBucketCommand({ Bucket: bucket }));
  client.destroy();
  return {
    endpoint,
    port,
    bucket,
    backendOptions: (prefix = "") => ({
      endpoint,
      bucket,
      region: "us-east-1",
      prefix,
      forcePathStyle: true,
      credentials: S3_CREDENTIALS,
      partSizeBytes: 5 * 1024 * 1024,
      maxAttempts: 2,
    }),
    stop,
    restart: start,
    close: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
