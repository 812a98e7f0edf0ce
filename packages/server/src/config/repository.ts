/** Where chunks and manifests are kept (a folder or S3), their cache, GC and commit timing. */

import { ConfigError } from "@aenv/edge/config-values";
import { NodePaths } from "../node-paths.js";
import type { Reader } from "./reader.js";
import { resolveRepositoryKey } from "./secrets.js";

export interface S3Config {
  /** Absent: AWS itself. */
  endpoint?: string;
  bucket: string;
  /** Required with backend s3. */
  region: string;
  prefix: string;
  forcePathStyle: boolean;
}

export interface RepositoryConfig {
  backend: "posix_fs" | "s3";
  /** posix_fs: the folder (possibly on a shared filesystem). */
  path: string;
  s3: S3Config;
  /** zstd level of new chunks. */
  compressionLevel: number;
  /** Chunks uploaded/fetched in parallel. */
  concurrency: number;
  /** Node-local chunk cache. */
  cacheDir: string;
  cacheMaxBytes: number;
  /** Also put committed chunks into the cache (a local resume then fetches nothing). */
  cacheOnCommit: boolean;
  /** Periodic GC every this many seconds; 0 disables it. */
  gcIntervalS: number;
  /** Unreferenced chunks younger than this survive a GC. */
  gcGraceS: number;
  /** Commit built templates too, so servers sharing the repository can start them. */
  commitTemplates: boolean;
  /** A paused sandbox is committed once it has stayed paused this long (0: at once). */
  pauseCommitDelayS: number;
  /** Secret every node sharing the repository signs and checks its entries with (signing.ts). */
  key: string;
}

export function repositoryConfig(r: Reader, dataDir: string, env: NodeJS.ProcessEnv): RepositoryConfig {
  const backend = r.str("AENV_REPOSITORY_BACKEND", "repository.backend") ?? "posix_fs";
  if (backend !== "posix_fs" && backend !== "s3") {
    throw new ConfigError(`repository backend must be posix_fs or s3, got "${backend}" (AENV_REPOSITORY_BACKEND)`);
  }
  const s3: S3Config = {
    endpoint: r.str("AENV_S3_ENDPOINT", "repository.s3.endpoint") || undefined,
    bucket: r.str("AENV_S3_BUCKET", "repository.s3.bucket") ?? "",
    region: r.str("AENV_S3_REGION", "repository.s3.region") ?? "",
    prefix: r.str("AENV_S3_PREFIX", "repository.s3.prefix") ?? "",
    forcePathStyle: r.bool("AENV_S3_FORCE_PATH_STYLE", "repository.s3.force_path_style", false),
  };
  if (backend === "s3") {
    // No guessing (AWS_REGION, us-east-1): a wrong region fails later in confusing ways.
    if (!s3.region) {
      throw new ConfigError(
        "repository backend s3 needs an explicit region: set AENV_S3_REGION or [repository.s3] region",
      );
    }
    if (!s3.bucket) {
      throw new ConfigError("repository backend s3 needs a bucket: set AENV_S3_BUCKET or [repository.s3] bucket");
    }
  }
  const compressionLevel = r.int("AENV_REPOSITORY_COMPRESSION_LEVEL", "repository.compression_level", 3);
  if (compressionLevel < 1 || compressionLevel > 19) {
    throw new ConfigError(`repository compression level must be 1..19, got ${compressionLevel}`);
  }
  const paths = new NodePaths(dataDir);
  return {
    backend,
    path: r.str("AENV_REPOSITORY_PATH", "repository.path") ?? paths.repository,
    s3,
    compressionLevel,
    concurrency: Math.max(1, r.int("AENV_REPOSITORY_CONCURRENCY", "repository.concurrency", 16)),
    cacheDir: r.str("AENV_CACHE_DIR", "cache.dir") ?? paths.cache,
    cacheMaxBytes: r.size("AENV_CACHE_MAX_BYTES", "cache.max_bytes", 10 * 1024 ** 3),
    cacheOnCommit: r.bool("AENV_CACHE_ON_COMMIT", "cache.cache_on_commit", false),
    gcIntervalS: r.int("AENV_GC_INTERVAL", "gc.interval_secs", 3600),
    gcGraceS: r.int("AENV_GC_GRACE", "gc.grace_secs", 900),
    commitTemplates: r.bool("AENV_COMMIT_TEMPLATES", "repository.commit_templates", true),
    pauseCommitDelayS: r.int("AENV_PAUSE_COMMIT_DELAY", "repository.pause_commit_delay_secs", 60),
    key: resolveRepositoryKey(dataDir, env),
  };
}
