/** The node's generated secrets: the API key and the repository key, kept under DATA/secrets. */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "@aenv/edge/config-values";
import { NodePaths } from "../node-paths.js";
import { writePrivateFile } from "../util/private-file.js";

/** Keys the e2b SDK accepts as they are (releases since 2.27 check; E2B_VALIDATE_API_KEY=false skips it). */
export const E2B_KEY_FORM = /^e2b_[0-9a-f]+$/;

/** The API key: AENV_API_KEY, else one generated on first start into DATA/secrets/api-key (0600). */
export function resolveApiKey(dataDir: string, env: NodeJS.ProcessEnv): string {
  if (env.AENV_API_KEY) return env.AENV_API_KEY;
  const dir = new NodePaths(dataDir).secrets;
  const file = join(dir, "api-key");
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  // E2B's key form: some SDK releases refuse any other before sending a request.
  const key = `e2b_${randomBytes(24).toString("hex")}`;
  writePrivateFile(file, `${key}\n`);
  return key;
}

/** Shorter secrets are refused: the repository key is all that stands between its writers and the hosts. */
const MIN_REPOSITORY_KEY = 32;

/**
 * The repository key: AENV_REPOSITORY_KEY, else one generated on first start into
 * DATA/secrets/repository-key (0600). Nodes sharing a repository need the same one.
 */
export function resolveRepositoryKey(dataDir: string, env: NodeJS.ProcessEnv): string {
  const given = env.AENV_REPOSITORY_KEY?.trim();
  if (given !== undefined && given !== "") {
    if (given.length < MIN_REPOSITORY_KEY) {
      throw new ConfigError(`AENV_REPOSITORY_KEY must be at least ${MIN_REPOSITORY_KEY} characters`);
    }
    return given;
  }
  const file = join(new NodePaths(dataDir).secrets, "repository-key");
  if (existsSync(file)) {
    const key = readFileSync(file, "utf8").trim();
    if (key.length < MIN_REPOSITORY_KEY)
      throw new ConfigError(`${file} must hold at least ${MIN_REPOSITORY_KEY} characters`);
    return key;
  }
  const key = randomBytes(32).toString("hex");
  writePrivateFile(file, `${key}\n`);
  return key;
}
