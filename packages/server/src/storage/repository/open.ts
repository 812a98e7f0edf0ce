import type { ServerConfig } from "../../config.js";
import { BackendUnavailableError, type RepositoryBackend } from "./backend.js";
import { ChunkCache } from "./chunk-cache.js";
import { ChunkRepository, type RepositoryOptions } from "./chunk-repository.js";
import { PosixFsBackend } from "./posix-fs-backend.js";
import { RepositoryKey } from "./signing.js";
import { checkZstd } from "./zstd.js";

/** The slice of a pino logger this needs. */
export interface RepoLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** The s3 backend's module (the AWS SDK, ~0.2 s to load) is loaded only where it is configured. */
export async function createBackend(
  cfg: Pick<ServerConfig, "repository">,
  onS3Warning?: (backend: string, message: string) => void,
): Promise<RepositoryBackend> {
  const r = cfg.repository;
  if (r.backend === "s3") {
    const { S3Backend } = await import("./s3-backend.js");
    const backend = new S3Backend({
      bucket: r.s3.bucket,
      region: r.s3.region,
      endpoint: r.s3.endpoint,
      prefix: r.s3.prefix,
      forcePathStyle: r.s3.forcePathStyle,
    });
    backend.onWarning = (message) => onS3Warning?.(backend.description, message);
    return backend;
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
  const backend = await createBackend(cfg, (description, message) =>
    log.warn({ backend: description }, `${message}: claims fall back to check-then-put`),
  );
  await backend.check();
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
  return new ChunkRepository(backend, new RepositoryKey(r.key), {
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
