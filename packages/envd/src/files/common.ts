/** Shared bits of GET/POST /files: auth (token or signature) and the acting user. */
import type { IncomingMessage } from "node:http";
import { checkFilesAuth, type FileOp } from "../auth.js";
import { type Env, resolveUser } from "../env.js";
import { HttpError } from "../http/respond.js";
import type { User } from "../users.js";

export async function authorizeFiles(
  env: Env,
  req: IncomingMessage,
  query: URLSearchParams,
  op: FileOp,
): Promise<User> {
  const header = req.headers["x-access-token"];
  const auth = checkFilesAuth(env.state.accessToken, Array.isArray(header) ? header[0] : header, query, op);
  if (!auth.ok) throw new HttpError(401, auth.message);
  const requested = query.get("username") || undefined;
  const user = await resolveUser(env, requested);
  if (!user) throw new HttpError(401, `invalid username: '${requested ?? ""}'`);
  return user;
}
