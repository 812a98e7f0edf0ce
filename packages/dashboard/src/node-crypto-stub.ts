/** @aenv/protocol's file signing is for servers; the page never signs. */
export function createHash(): never {
  throw new Error("node:crypto is not available in the dashboard");
}
