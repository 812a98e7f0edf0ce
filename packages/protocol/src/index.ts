export * as filesystemPb from "./gen/filesystem/filesystem_pb.js";
export { Filesystem } from "./gen/filesystem/filesystem_pb.js";
export * as processPb from "./gen/process/process_pb.js";
export { Process } from "./gen/process/process_pb.js";
/** The envd version we report: every SDK feature gated at or below it is implemented. */
export const ENVD_VERSION = "0.6.4";
export const ENVD_PORT = 49983;
