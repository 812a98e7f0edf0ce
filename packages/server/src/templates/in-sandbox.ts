/**
 * Template build steps run inside the build sandbox by the envd binary /.aenv already
 * provides (`envd --aenv-build-step`, packages/envd/native/internal/buildsteps). Paths are then
 * resolved by the sandbox's own kernel (gVisor), so a symlink in an image can never point a
 * COPY or an account change outside the rootfs, and no tool (cp, useradd) has to exist in
 * the image.
 */
import type { ProcessSpec } from "../orchestrator/envd-process.js";

function buildStep(step: string, args: string[]): ProcessSpec {
  return { cmd: "/.aenv/bin/envd", args: ["--aenv-build-step", step, ...args], user: "root" };
}

export const inSandbox = {
  exists: (path: string) => buildStep("exists", [path]),
  /** src is relative to root (its last element may be a glob); owner "" is root, mode "" keeps modes. */
  copy: (root: string, src: string, dest: string, owner: string, mode: string) =>
    buildStep("copy", [root, src, dest, owner, mode]),
  /** Creates the account (uid from 1000, its group and home) when the image lacks it. */
  ensureUser: (name: string) => buildStep("ensure-user", [name]),
  /** WORKDIR creates its folder as Docker does. */
  mkdir: (dir: string) => buildStep("mkdir", [dir]),
};
