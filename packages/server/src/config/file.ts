/** The TOML config file: every key it may hold, and its reading into flat dotted keys. */
import { readFileSync } from "node:fs";
import { ConfigError, parseBytes } from "@aenv/edge/config-values";
import { parse as parseToml } from "smol-toml";

export type Kind = "string" | "int" | "number" | "bool" | "size";
export type Value = string | number | boolean;

/** Every key the config file may hold (docs/configuration.md documents each). */
export const FILE_KEYS: Readonly<Record<string, Kind>> = {
  listen: "string",
  data_dir: "string",
  templates_dir: "string",
  domain: "string",
  log_level: "string",
  "runtime.debug_log": "string",
  "runtime.driver": "string",
  "runtime.sim_latency_scale": "number",
  "runtime.platform": "string",
  "runtime.runsc": "string",
  "runtime.stale_warm_image_secs": "int",
  "runtime.envd": "string",
  "network.slot_cidr": "string",
  "network.net_prefix": "string",
  "network.warm_slots": "int",
  "network.denied_ranges": "string",
  "network.egress_hosts": "string",
  "network.egress_upstream_ca_file": "string",
  "network.secrets_require_binding": "bool",
  "network.egress_ca_dir": "string",
  "network.egress_proxy_allowed": "string",
  "sandbox.default_timeout_secs": "int",
  "sandbox.max_timeout_secs": "int",
  "sandbox.max_sandboxes": "int",
  "sandbox.dead_check_interval_secs": "int",
  "sandbox.metrics_interval_secs": "int",
  "sandbox.hibernate_after_secs": "int",
  "sandbox.warm_pool_min": "int",
  "sandbox.start_concurrency": "int",
  "sandbox.create_concurrency": "int",
  "sandbox.create_queue_ms": "int",
  "sandbox.warm_pool_max": "int",
  "sandbox.hibernate_cpu_percent": "int",
  "sandbox.hibernate_save_after_secs": "int",
  "sandbox.pause_waits_for_image": "bool",
  "sandbox.pause_image_delay_ms": "int",
  "sandbox.max_memory_mb": "int",
  "sandbox.max_cpus": "int",
  "sandbox.memory_overcommit": "number",
  "sandbox.cpu_overcommit": "number",
  "sandbox.enforce_disk_size": "bool",
  "sandbox.max_disk_size_mb": "int",
  "sandbox.max_console_bytes": "int",
  "sandbox.paused_max_age_secs": "int",
  "sandbox.paused_max_bytes": "size",
  "api.body_limit_bytes": "size",
  "api.headers_timeout_secs": "int",
  "api.request_timeout_secs": "int",
  "api.keep_alive_timeout_secs": "int",
  "api.idle_timeout_secs": "int",
  "api.max_connections": "int",
  "api.max_connections_per_client": "int",
  "proxy.tunnel_idle_timeout_secs": "int",
  "repository.backend": "string",
  "repository.path": "string",
  "repository.compression_level": "int",
  "repository.concurrency": "int",
  "repository.s3.endpoint": "string",
  "repository.s3.bucket": "string",
  "repository.s3.region": "string",
  "repository.s3.prefix": "string",
  "repository.s3.force_path_style": "bool",
  "repository.commit_templates": "bool",
  "repository.pause_commit_delay_secs": "int",
  "cluster.redis": "string",
  "cluster.sentinels": "string",
  "cluster.master_name": "string",
  "cluster.node_id": "string",
  "cluster.advertise_url": "string",
  "cluster.p2p": "bool",
  "cache.dir": "string",
  "cache.max_bytes": "size",
  "cache.cache_on_commit": "bool",
  "gc.interval_secs": "int",
  "gc.grace_secs": "int",
  "images.insecure_registries": "string",
  "images.auth_file": "string",
  "images.upload_limit_bytes": "size",
  "images.allow_host_sources": "bool",
  "images.allow_private_registries": "bool",
  "webhooks.allow_private": "bool",
  "webhooks.retry_first_ms": "int",
  "webhooks.window_secs": "int",
  "images.fetch_timeout_secs": "int",
  "images.max_manifest_bytes": "size",
  "images.max_image_bytes": "size",
  "images.max_unpacked_bytes": "size",
  "images.max_unpacked_entries": "int",
  "images.build_timeout_secs": "int",
  "images.cache_max_bytes": "size",
  "images.on_demand": "string",
  "images.lazy": "bool",
  "volumes.max_size_bytes": "size",
  "volumes.backend": "string",
};

/** Reads a TOML config file into flat dotted keys, refusing unknown keys and wrong types. */
export function readConfigFile(path: string): Map<string, Value> {
  let doc: Record<string, unknown>;
  try {
    doc = parseToml(readFileSync(path, "utf8")) as Record<string, unknown>;
  } catch (err) {
    const msg = (err as Error).message.split("\n")[0];
    throw new ConfigError(`config file ${path}: ${msg}`);
  }
  const out = new Map<string, Value>();
  const walk = (obj: Record<string, unknown>, prefix: string) => {
    for (const [k, v] of Object.entries(obj)) {
      const key = prefix + k;
      if (v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Date)) {
        walk(v as Record<string, unknown>, `${key}.`);
        continue;
      }
      const kind = FILE_KEYS[key];
      if (!kind) throw new ConfigError(`config file ${path}: unknown key '${key}'`);
      const ok =
        (kind === "string" && typeof v === "string") ||
        (kind === "int" && typeof v === "number" && Number.isInteger(v) && v >= 0) ||
        (kind === "number" && typeof v === "number" && Number.isFinite(v) && v > 0) ||
        (kind === "bool" && typeof v === "boolean") ||
        (kind === "size" && (typeof v === "string" || (typeof v === "number" && Number.isInteger(v))));
      if (!ok)
        throw new ConfigError(
          `config file ${path}: '${key}' must be ${kind === "int" ? "a whole number" : kind === "number" ? "a positive number" : `a ${kind}`}`,
        );
      out.set(key, kind === "size" ? parseBytes(v as string | number, `${key} in ${path}`) : (v as Value));
    }
  };
  walk(doc, "");
  return out;
}
