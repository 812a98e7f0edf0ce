export * from "./backend.js";
export * from "./chunk-cache.js";
export * from "./chunk-repository.js";
export * from "./gc.js";
export * from "./open.js";
export * from "./posix-fs-backend.js";
export * from "./repository.js";
export * from "./s3-backend.js";
