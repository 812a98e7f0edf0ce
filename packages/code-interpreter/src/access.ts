import { ENVD_ACCESS_CHECK_PATH, ENVD_PORT } from "@aenv/protocol";

/** Why a caller may not use the service: the status and envd's own message. */
export interface AccessDenied {
  status: 401 | 503;
  message: string;
}

/**
 * Whether a request's `X-Access-Token` opens this sandbox, asked of envd for every request.
 * envd holds the one token that counts, and it changes without the service knowing (a
 * sandbox started from the template's warm image, a fork child, a snapshot start each get
 * their own through envd's /init), so nothing is cached here: a token that opened the
 * sandbox this memory was captured from must not open this one. Failing closed: an envd that
 * does not answer denies.
 */
export async function checkAccess(token: string | undefined): Promise<AccessDenied | undefined> {
  let r: Response;
  try {
    r = await fetch(`http://127.0.0.1:${ENVD_PORT}${ENVD_ACCESS_CHECK_PATH}`, {
      headers: token !== undefined ? { "x-access-token": token } : {},
      signal: AbortSignal.timeout(5000),
    });
  } catch (err) {
    return { status: 503, message: `cannot check the access token with envd: ${(err as Error).message}` };
  }
  if (r.status === 204) return undefined;
  const body = await r.text().catch(() => "");
  if (r.status === 401) {
    let message = "unauthorized access, please provide a valid access token";
    try {
      const m = (JSON.parse(body) as { message?: unknown }).message;
      if (typeof m === "string") message = m;
    } catch {
      // envd's body is JSON; anything else keeps the default wording
    }
    return { status: 401, message };
  }
  return { status: 503, message: `envd answered ${r.status} to the access check` };
}
