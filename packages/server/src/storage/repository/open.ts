import type { ServerConfig } from "../../config.js";
import { BackendUnavailableError, type RepositoryBackend } from "./backend.js";
import { ChunkCache } from "./chunk-cache.js";
import { ChunkRepository, type RepositoryOptions } from "./chunk-repository.js";
import { PosixFsBackend } from "./posix-fs-backend.js";
import { S3Backend } from "./s3-backend.js";
import { checkZstd } from "./zstd.js";

/** The slice of a pino logger this needs. */
export interface RepoLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export function createBackend(cfg: Pick<ServerConfig, "repository">): RepositoryBackend {
  const r = cfg.repository;
  if (r.backend === "s3") {
    return new S3Backend({
      bucket: r.s3.bucket,
      region: r.s3.region,
      endpoint: r.s3.endpoint,
      prefix: r.s3.prefix,
      forcePathStyle: r.s3.forcePathStyle,
    });
  }
  return new PosixFsBackend(r.path);
}

/**
 * Builds backend + node cache + repository from the configuration and proves they work
 * (zstd present, backend reachable and writable). Rejects with a BackendUnavailableError
 * whose message is one line, meant for a fatal log at start.
 */
export async function openRepository(
  cfg: Pick<ServerConfig, "repository">,
  log: RepoLogger,
  extra: Pick<RepositoryOptions, "hooks"> = {},
): Promise<ChunkRepository> {
  const r = cfg.repository;
  try {
    await checkZstd();
  } catch (err) {
    throw new BackendUnavailableError(`repository: ${(err as Error).message}`, { cause: err });
  }
  const backend = createBackend(cfg);
  await backend.check();
  if (backend instanceof S3Backend) {
    backend.onWarning = (message) =>
      log.warn({ backend: backend.description }, `${message}: claims fall back to check-then-put`);
  }
  const cache = new ChunkCache({ dir: r.cacheDir, maxBytes: r.cacheMaxBytes });
  await cache.init();
  log.info(
    {
      backend: backend.description,
      cacheDir: r.cacheDir,
      cacheMaxBytes: r.cacheMaxBytes,
      cacheUsedBytes: cache.usedBytes,
    },
    "snapshot repository ready",
  );
  return new ChunkRepository(backend, {
    cache,
    compressionLevel: r.compressionLevel,
    concurrency: r.concurrency,
    cacheOnCommit: r.cacheOnCommit,
    gcGraceMs: r.gcGraceS * 1000,
    onUntrusted: (err) =>
      log.error({ backend: backend.description, entry: err.entry }, `${err.message}; treated as unusable`),
    ...extra,
  });
}
