import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, isAbsolute, join, posix, relative } from "node:path";
import type { Command } from "commander";
import { FileType, type Sandbox } from "e2b";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";

async function uploadPath(sbx: Sandbox, local: string, remote: string): Promise<number> {
  const st = statSync(local);
  if (st.isDirectory()) {
    await sbx.files.makeDir(remote);
    let n = 0;
    for (const e of readdirSync(local)) n += await uploadPath(sbx, join(local, e), posix.join(remote, e));
    return n;
  }
  if (!st.isFile()) return 0;
  const buf = readFileSync(local);
  await sbx.files.write(remote, buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer);
  return 1;
}

/**
 * A name a sandbox listed, usable as one local path component. Everything a sandbox answers
 * is untrusted (code in it can be root and replace envd): a name with a separator, `..` or a
 * NUL would write outside the download's target.
 */
export function safeEntryName(name: string): boolean {
  return name !== "" && name !== "." && name !== ".." && !/[/\\\0]/.test(name);
}

/** Folder depth a download follows (a sandbox could nest without end). */
const MAX_DEPTH = 64;

export async function downloadPath(
  sbx: Sandbox,
  remote: string,
  local: string,
  root: string,
  depth = 0,
): Promise<number> {
  const rel = relative(root, local);
  if (rel.startsWith("..") || isAbsolute(rel)) throw new CliError(`refusing to write outside ${root}: ${local}`);
  const info = await sbx.files.getInfo(remote);
  if (info.type === FileType.DIR) {
    // A linked folder is not followed below the top: links can form cycles.
    if (depth > 0 && info.symlinkTarget) return 0;
    if (depth > MAX_DEPTH) throw new CliError(`${remote}: folders nested deeper than ${MAX_DEPTH}`);
    mkdirSync(local, { recursive: true });
    let n = 0;
    for (const e of await sbx.files.list(remote)) {
      if (!safeEntryName(e.name)) {
        process.stderr.write(`aenv: skipping an entry the sandbox named ${JSON.stringify(e.name)}\n`);
        continue;
      }
      n += await downloadPath(sbx, posix.join(remote, e.name), join(local, e.name), root, depth + 1);
    }
    return n;
  }
  const data = await sbx.files.read(remote, { format: "bytes" });
  mkdirSync(dirname(local), { recursive: true });
  writeFileSync(local, data);
  return 1;
}

function isDir(p: string): boolean {
  try {
    return statSync(p).isDirectory();
  } catch {
    return false;
  }
}

export function registerFiles(program: Command, ctx: Ctx): void {
  program
    .command("upload")
    .description("copy a local file or directory (recursively) into a sandbox")
    .argument("<id>", "sandbox ID")
    .argument("<local>", "local path")
    .argument("<remote>", "path in the sandbox (a directory ending in / keeps the local name)")
    .addHelpText(
      "after",
      examples(
        "aenv upload i1a2b3c4d5e6f7 ./data.csv /home/user/data.csv",
        "aenv upload i1a2b3c4d5e6f7 ./src /home/user/",
      ),
    )
    .action(async (id: string, local: string, remote: string) => {
      try {
        statSync(local);
      } catch {
        throw new CliError(`${local}: no such file or directory`);
      }
      const target = remote.endsWith("/") ? posix.join(remote, basename(local)) : remote;
      const n = await uploadPath(await ctx.api().connect(id), local, target);
      ctx.out().item({ sandboxID: id, remote: target, files: n }, `uploaded ${n} file(s) to ${target}`);
    });

  program
    .command("download")
    .description("copy a file or directory (recursively) out of a sandbox")
    .argument("<id>", "sandbox ID")
    .argument("<remote>", "path in the sandbox")
    .argument("<local>", "local path (an existing directory keeps the remote name)")
    .addHelpText(
      "after",
      examples(
        "aenv download i1a2b3c4d5e6f7 /home/user/out.txt ./out.txt",
        "aenv download i1a2b3c4d5e6f7 /home/user/results .",
      ),
    )
    .action(async (id: string, remote: string, local: string) => {
      const target = isDir(local) ? join(local, posix.basename(remote.replace(/\/+$/, "")) || "root") : local;
      const n = await downloadPath(await ctx.api().connect(id), remote, target, target);
      ctx.out().item({ sandboxID: id, local: target, files: n }, `downloaded ${n} file(s) to ${target}`);
    });
}
