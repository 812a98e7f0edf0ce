// aenv-lazyfs (Go, static): the FUSE server of image trees whose content arrives on demand
// (native/lazyfs; see templates/lazy-trees.ts), built with Debian's go-fuse and x/sys.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { goBuild } from "../../../scripts/lib/go-build.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
goBuild({
  moduleDir: path.join(here, "lazyfs"),
  out: path.join(here, "..", "dist", "native", "aenv-lazyfs"),
  missing: "aenv-lazyfs is not built (images start only after a whole pull)",
});
