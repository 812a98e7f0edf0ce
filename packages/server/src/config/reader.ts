/** One setting read from its AENV_* variable, else its config file key, else a default. */

import { ConfigError, parseBool, parseBytes, parseInt10 } from "@aenv/edge/config-values";
import type { Value } from "./file.js";

export interface Reader {
  /** A string; an empty variable counts as unset. `envName` undefined: the file key alone. */
  str(envName: string | undefined, key: string): string | undefined;
  /** Older variables keep their lenient parsing (a bad value falls back to the default). */
  num(envName: string, key: string, d: number): number;
  int(envName: string, key: string, d: number): number;
  bool(envName: string, key: string, d: boolean): boolean;
  /** A positive number (a multiplier). */
  factor(envName: string, key: string, d: number): number;
  /** Bytes, with units (10GiB). */
  size(envName: string, key: string, d: number): number;
}

export function settingsReader(env: NodeJS.ProcessEnv, file: ReadonlyMap<string, Value>): Reader {
  const fileValue = <T>(key: string) => file.get(key) as T | undefined;
  return {
    str(envName, key) {
      const e = envName ? env[envName] : undefined;
      return e !== undefined && e !== "" ? e : fileValue<string>(key);
    },
    num(envName, key, d) {
      const v = env[envName];
      if (v && Number.isFinite(Number(v))) return Number(v);
      return fileValue<number>(key) ?? d;
    },
    int(envName, key, d) {
      const v = env[envName];
      return v ? parseInt10(v, envName) : (fileValue<number>(key) ?? d);
    },
    bool(envName, key, d) {
      const v = env[envName];
      return v ? parseBool(v, envName) : (fileValue<boolean>(key) ?? d);
    },
    factor(envName, key, d) {
      const v = env[envName];
      if (!v) return fileValue<number>(key) ?? d;
      const n = Number(v);
      if (!Number.isFinite(n) || n <= 0) throw new ConfigError(`${envName}: expected a positive number, got "${v}"`);
      return n;
    },
    size(envName, key, d) {
      const v = env[envName];
      return v ? parseBytes(v, envName) : (fileValue<number>(key) ?? d);
    },
  };
}
