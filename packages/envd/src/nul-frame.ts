/**
 * The framing envd's static helpers read on a pipe or socket (init/aenv-init.c's spawn
 * service, init/aenv-xattr.c's serve mode): u32 LE length, then each field ended by NUL.
 * Callers refuse fields that contain NUL themselves, each with its own error.
 */
export function nulFrame(fields: string[]): Buffer {
  const body = Buffer.from(fields.map((f) => `${f}\0`).join(""), "utf8");
  const msg = Buffer.alloc(4 + body.length);
  msg.writeUInt32LE(body.length, 0);
  body.copy(msg, 4);
  return msg;
}
