/** Path resolution with envd semantics: '' → default workdir or home, '~' → home, relative → home. */
import path from "node:path";
import type { User } from "./users.js";

export function resolvePath(p: string, user: User, defaultWorkdir: string | undefined): string {
  if (p === "") return path.resolve(defaultWorkdir || user.home || "/");
  if (p === "~") return path.resolve(user.home);
  if (p.startsWith("~/")) return path.resolve(user.home, p.slice(2));
  if (path.isAbsolute(p)) return path.resolve(p);
  return path.resolve(user.home || "/", p);
}
