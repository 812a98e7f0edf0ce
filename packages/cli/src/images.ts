import { CliError } from "./errors.js";

/** `registry:5000/team/web:1.2@sha256:…` → `web`: the default template name for an image. */
export function templateNameFromImage(ref: string): string {
  const noDigest = ref.split("@")[0] ?? "";
  const leaf = noDigest.split("/").pop() ?? "";
  const name = leaf.split(":")[0] ?? "";
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/.test(name))
    throw new CliError(`cannot derive a template name from '${ref}'; pass --name`);
  return name;
}

/**
 * A ready command that passes once something listens on `port`. It reads /proc/net/tcp{,6}
 * with shell builtins only (POSIX sh, no ss/nc/curl in the image needed), and falls back to
 * bash's /dev/tcp where /proc/net is not readable (that fallback needs bash).
 */
export function probeReadyCmd(port: number): string {
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new CliError(`--probe must be a port number, got '${port}'`);
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return (
    `for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] || continue; ` +
    `while read -r _ a _ s _; do [ "$s" = 0A ] && [ "\${a##*:}" = ${hex} ] && exit 0; done < "$f"; done; ` +
    `[ -r /proc/net/tcp ] && exit 1; exec bash -c ': </dev/tcp/127.0.0.1/${port}' 2>/dev/null`
  );
}
