/** POST /init — the host sets token, env vars, default user and workdir (204). */
import type { IncomingMessage, ServerResponse } from "node:http";
import { checkToken } from "../auth.js";
import type { Env } from "../env.js";
import { log } from "../log.js";
import type { InitBody } from "../state.js";
import { inSandbox, installSudoLinks } from "../sudo/install.js";
import { HttpError, readBody, sendEmpty } from "./respond.js";

function optString(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new HttpError(400, `'${field}' must be a string`);
  return v;
}

export function parseInitBody(raw: Buffer): InitBody {
  if (raw.length === 0) return {};
  let json: unknown;
  try {
    json = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new HttpError(400, "invalid JSON body");
  }
  if (json === null || typeof json !== "object" || Array.isArray(json))
    throw new HttpError(400, "body must be a JSON object");
  const o = json as Record<string, unknown>;
  let envVars: Record<string, string> | undefined;
  if (o.envVars !== undefined && o.envVars !== null) {
    if (typeof o.envVars !== "object" || Array.isArray(o.envVars))
      throw new HttpError(400, "'envVars' must be an object");
    envVars = {};
    for (const [k, v] of Object.entries(o.envVars as Record<string, unknown>)) {
      if (typeof v !== "string") throw new HttpError(400, `envVars.${k} must be a string`);
      envVars[k] = v;
    }
  }
  return {
    envVars,
    accessToken: optString(o.accessToken, "accessToken"),
    defaultUser: optString(o.defaultUser, "defaultUser"),
    defaultWorkdir: optString(o.defaultWorkdir, "defaultWorkdir"),
    timestamp: optString(o.timestamp, "timestamp"),
  };
}

export async function handleInit(env: Env, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const header = req.headers["x-access-token"];
  const auth = checkToken(env.state.accessToken, Array.isArray(header) ? header[0] : header);
  if (!auth.ok) throw new HttpError(401, auth.message);
  const body = parseInitBody(await readBody(req));
  if (body.defaultUser && !(await env.users.lookup(body.defaultUser))) {
    log("warn", "init: default user does not exist (yet)", { user: body.defaultUser });
  }
  env.state.applyInit(body);
  // A sandbox restored from an image taken before its template had them gets them now.
  if (inSandbox()) installSudoLinks();
  log("info", "initialized", {
    envVars: Object.keys(body.envVars ?? {}).length,
    token: body.accessToken ? "set" : "unchanged",
    defaultUser: env.state.defaultUser,
    defaultWorkdir: env.state.defaultWorkdir,
  });
  sendEmpty(res, 204);
}
