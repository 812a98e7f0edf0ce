/** Small HTTP helpers: JSON replies, `{code,message}` errors, bounded body reads. */
import type { IncomingMessage, ServerResponse } from "node:http";

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": data.length });
  res.end(data);
}

export function sendError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { code: status, message });
}

export function sendEmpty(res: ServerResponse, status: number): void {
  if (res.headersSent) return;
  res.writeHead(status);
  res.end();
}

/** Read the whole request body (bounded). */
export async function readBody(req: IncomingMessage, limit = 1 << 20): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > limit) throw new HttpError(413, "request body too large");
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

/** errno → HTTP status for file operations. */
export function statusForErrno(code: string | undefined): number {
  switch (code) {
    case "ENOENT":
      return 404;
    case "EISDIR":
    case "ENOTDIR":
    case "ENAMETOOLONG":
    case "EINVAL":
    case "ELOOP":
      return 400;
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return 403;
    case "ENOSPC":
    case "EDQUOT":
      return 507;
    default:
      return 500;
  }
}
