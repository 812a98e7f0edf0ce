import { ChunkRepository, type RepositoryOptions } from "./chunk-repository.js";
import { PosixFsBackend } from "./posix-fs-backend.js";

/**
 * The repository in a local folder without a node cache: what server.ts used before
 * openRepository() (open.ts), which builds backend, cache and repository from the config.
 */
export class PosixFsRepository extends ChunkRepository {
  constructor(root: string, opts: RepositoryOptions = {}) {
    super(new PosixFsBackend(root), opts);
  }
}
