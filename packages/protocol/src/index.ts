export * as filesystemPb from "./gen/filesystem/filesystem_pb.js";
export { Filesystem } from "./gen/filesystem/filesystem_pb.js";
export * as processPb from "./gen/process/process_pb.js";
export { Process } from "./gen/process/process_pb.js";
/** The envd version we report: every SDK feature gated at or below it is implemented. */
export const ENVD_VERSION = "0.6.4";
export const ENVD_PORT = 49983;
export type { EnvdInitBody, EnvdLayerStats, EnvdMetrics } from "./envd-http.js";
export {
  ENVD_ACCESS_CHECK_PATH,
  ENVD_FS_LAYER_APPLY_PATH,
  ENVD_FS_LAYER_CAPTURE_PATH,
  ENVD_HEAP_REDUCE_PATH,
  ENVD_QUIESCE_PATH,
  SANDBOX_LOWER_DIR,
} from "./envd-http.js";
export { computeFileSignature, type FileOp } from "./file-signature.js";
export {
  AUTO_RESUME_HEADER,
  E2B_SANDBOX_ID_HEADER,
  E2B_SANDBOX_PORT_HEADER,
  FORK_SPILL,
  GATEWAY_PROOF_HEADER,
  IDEMPOTENCY,
  idempotencyKeyOf,
  PARTIAL_HEADER,
  SANDBOX_ID_HEADER,
  TARGET_PORT_HEADER,
  TOTAL_RUNNING_HEADER,
  TRAFFIC_PORT_HEADER,
  TRAFFIC_TOKEN_HEADER,
  WEBHOOK_HEADERS,
} from "./headers.js";
export type * from "./rest.js";
export { DEFAULT_TEAM_ID, ERROR_CODES } from "./rest.js";
// Request schemas (zod) are a separate entry, @aenv/protocol/rest: envd bundles this one.
