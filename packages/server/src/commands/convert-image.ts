import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { convertToEStargz } from "../storage/images/convert.js";
import { ImageStore } from "../storage/images/index.js";

const HELP = `aenv-server convert-image — an image rewritten so that it starts before it is fetched

Usage: aenv-server convert-image --to DIR [--tag TAG] IMAGE

  IMAGE  a registry reference (host/repo:tag), oci:DIR[:tag], oci-archive:FILE[:tag]
         or docker-archive:FILE
  --to   an OCI layout folder to write (created; TAG names the image in it, default "latest")
  Every layer becomes eStargz: a gzip tar any runtime still pulls, in which each file can be
  read alone. Push it, unchanged, with
      skopeo copy --preserve-digests oci:DIR:TAG docker://REGISTRY/REPO:TAG
  and a create naming it (images.on_demand) starts from the files it opens, fetched by range.`;

/** `aenv-server convert-image`: an image's layers as eStargz, into an OCI layout. */
export async function convertImageCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      to: { type: "string" },
      tag: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help || !values.to || positionals.length !== 1) {
    console.log(HELP);
    return values.help ? 0 : 2;
  }
  // Its own scratch store: the operator names the image, so a registry on this network is theirs to use.
  const scratch = mkdtempSync("/var/tmp/aenv-convert-");
  try {
    const store = new ImageStore({ dir: join(scratch, "store"), allowPrivateRegistries: true });
    const tag = values.tag ?? "latest";
    const c = await convertToEStargz(store, positionals[0] as string, values.to, tag);
    for (const l of c.layers) console.log(`layer ${l.from.slice(0, 19)} → ${l.digest.slice(0, 19)} (${l.size} bytes)`);
    console.log(`oci:${values.to}:${tag} ${c.digest}`);
    return 0;
  } catch (err) {
    console.error(`convert-image: ${(err as Error).message}`);
    return 1;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
