/** Process environment: PATH, HOME, USER, LOGNAME, sandbox env vars, request envs (later wins). */
import type { User } from "../users.js";

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export function buildProcessEnv(
  user: User,
  sandboxEnv: Iterable<[string, string]>,
  requestEnv: Record<string, string>,
): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH || DEFAULT_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
  };
  for (const [k, v] of sandboxEnv) env[k] = v;
  for (const [k, v] of Object.entries(requestEnv)) env[k] = v;
  return env;
}
