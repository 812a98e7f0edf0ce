/** The Linux user an RPC acts as (Authorization: Basic base64("name:")). */
import type { HandlerContext } from "@connectrpc/connect";
import { type Env, resolveUser } from "../env.js";
import { type User, usernameFromBasicAuth } from "../users.js";
import { invalidUser } from "./errors.js";

export async function rpcUser(env: Env, ctx: HandlerContext): Promise<User> {
  const requested = usernameFromBasicAuth(ctx.requestHeader.get("authorization"));
  const user = await resolveUser(env, requested);
  if (!user) {
    throw invalidUser(requested ?? (await env.users.defaultUserName(env.state.defaultUser)));
  }
  return user;
}
