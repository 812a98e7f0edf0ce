/**
 * The snapshot repository's conformance suite (helpers/repository-conformance.ts) over the S3
 * backend, against a real S3 server on loopback (s3rver): in the full suite, not the fast tier.
 */
import { S3Backend } from "../src/storage/repository/s3-backend.js";
import { backendConformance } from "./helpers/repository-conformance.js";
import { s3Prefix, useS3 } from "./helpers/repository-kit.js";

const s3 = useS3();

backendConformance({ name: "s3", make: () => new S3Backend(s3().backendOptions(s3Prefix("repo"))) });
