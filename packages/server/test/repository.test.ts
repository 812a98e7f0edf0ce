/**
 * The snapshot repository (storage/repository/): the conformance suite over the folder backend
 * (helpers/repository-conformance.ts; S3 runs it in repository-s3-backend.test.ts, in the full
 * suite: it needs an S3 server). The cache, fault and chunking tests are in
 * repository-cache.test.ts and repository-faults.test.ts.
 *
 *   node --import tsx --test packages/server/test/repository*.test.ts
 */
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import { backendConformance } from "./helpers/repository-conformance.js";
import { fresh } from "./helpers/repository-kit.js";

backendConformance({ name: "posix_fs", make: () => new PosixFsBackend(fresh("repo")) });
