import { SANDBOX_LOWER_DIR } from "@aenv/protocol";
import { DEFAULT_PATH } from "../../state/template-catalog.js";
import type { SandboxLaunch } from "../driver.js";
import { envdArgs } from "../envd-runtime.js";

/** Capabilities of a sandbox's root (gVisor is the boundary; this is Docker's default set + ptrace). */
export const CAPS = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_MKNOD",
  "CAP_NET_RAW",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETFCAP",
  "CAP_SETPCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_SYS_CHROOT",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
  "CAP_SYS_PTRACE",
];

/** proc, dev, devpts, shm and sysfs: what every sandbox gets. */
export const STANDARD_MOUNTS = [
  { destination: "/proc", type: "proc", source: "proc" },
  {
    destination: "/dev",
    type: "tmpfs",
    source: "tmpfs",
    options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
  },
  {
    destination: "/dev/pts",
    type: "devpts",
    source: "devpts",
    options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
  },
  {
    destination: "/dev/shm",
    type: "tmpfs",
    source: "shm",
    options: ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
  },
  { destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "ro"] },
];

/** The OCI runtime spec of one sandbox: envd as init, template rootfs under runsc's overlay. */
export function ociSpec(l: SandboxLaunch): Record<string, unknown> {
  const memBytes = l.memoryMB * 1024 * 1024;
  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: envdArgs(l.runtimeDir),
      env: [`PATH=${DEFAULT_PATH}`, "HOME=/root"],
      cwd: "/",
      capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS, inheritable: CAPS, ambient: [] },
      rlimits: [{ type: "RLIMIT_NOFILE", hard: 1048576, soft: 1048576 }],
      noNewPrivileges: false,
    },
    root: { path: l.rootfs, readonly: false },
    hostname: l.hostname,
    mounts: [
      ...STANDARD_MOUNTS,
      { destination: "/.aenv", type: "bind", source: l.runtimeDir, options: ["rbind", "ro"] },
      { destination: "/etc/resolv.conf", type: "bind", source: l.resolvConf, options: ["bind", "ro"] },
      // The template tree as it is under the writable layer: envd diffs / against it at a
      // filesystem-only pause. Builds write the tree itself and have no layer.
      ...(l.writableRootfs
        ? []
        : [{ destination: SANDBOX_LOWER_DIR, type: "bind", source: l.rootfs, options: ["bind", "ro"] }]),
      ...Object.entries(l.readOnlyMounts ?? {}).map(([destination, source]) => ({
        destination,
        type: "bind",
        source,
        options: ["rbind", "ro"],
      })),
      // Volumes: served by the gofer with runsc's default shared file access for non-root
      // mounts, so writes reach the host at once and other sandboxes see them.
      ...(l.volumeMounts ?? []).map(({ destination, source }) => ({
        destination,
        type: "bind",
        source,
        options: ["rbind", "rw"],
      })),
    ],
    linux: {
      namespaces: [
        { type: "pid" },
        { type: "ipc" },
        { type: "uts" },
        { type: "mount" },
        { type: "network", path: l.netnsPath },
      ],
      resources: {
        memory: { limit: memBytes },
        cpu: { quota: Math.round(l.cpuCount * 100000), period: 100000 },
        pids: { limit: 4096 },
      },
      cgroupsPath: `/aenv/${l.id}`,
    },
  };
}
