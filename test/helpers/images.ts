import { readFileSync } from "node:fs";
import { makeTar, OciLayout, type TarSpec } from "../../packages/server/test/helpers/registry.js";

const APPLETS = ["sh", "ls", "cat", "mkdir", "echo", "httpd", "wget", "id", "whoami", "sleep", "env", "pwd", "stat"];

/** A busybox root filesystem in two layers (gzip + zstd), with a config giving env and workdir. */
export function tinyImage(dir: string): void {
  const base: TarSpec[] = [
    { name: "bin/", type: "dir" },
    { name: "etc/", type: "dir" },
    { name: "root/", type: "dir", mode: 0o700 },
    { name: "tmp/", type: "dir", mode: 0o1777 },
    { name: "bin/busybox", content: readFileSync("/bin/busybox"), mode: 0o755 },
    // The SDK runs commands with `bash -l -c`; busybox's ash stands in.
    { name: "bin/bash", content: '#!/bin/busybox sh\nexec /bin/busybox sh "$@"\n', mode: 0o755 },
    ...APPLETS.map((a): TarSpec => ({ name: `bin/${a}`, type: "symlink", linkname: "busybox" })),
    { name: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\n" },
    { name: "etc/group", content: "root:x:0:\n" },
  ];
  const site: TarSpec[] = [
    { name: "www/", type: "dir" },
    { name: "www/index.html", content: "from the image\n" },
  ];
  const layout = new OciLayout(dir);
  const img = layout.image({
    layers: [
      { tar: makeTar(base), compression: "gzip" },
      { tar: makeTar(site), compression: "zstd" },
    ],
    config: { Env: ["PATH=/bin", "IMAGE_VAR=from-config"], WorkingDir: "/www" },
  });
  layout.tag(img, "1");
}
