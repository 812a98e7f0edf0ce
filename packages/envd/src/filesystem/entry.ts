/** EntryInfo construction: Go-style permission strings, owner names, metadata. */
import { promises as fsp, type Stats } from "node:fs";
import path from "node:path";
import { filesystemPb } from "@aenv/protocol";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { Accounts } from "../users.js";
import type { MetadataStore } from "./metadata.js";

const S_IFMT = 0o170000;
const S_IFSOCK = 0o140000;
const S_IFLNK = 0o120000;
const S_IFREG = 0o100000;
const S_IFBLK = 0o060000;
const S_IFDIR = 0o040000;
const S_IFCHR = 0o020000;
const S_IFIFO = 0o010000;

/** Go's os.FileMode.String() for a Unix st_mode. */
export function goModeString(mode: number): string {
  const fmt = mode & S_IFMT;
  let prefix = "";
  // Go's order of type letters: d a l T L D p S u g c t ?
  if (fmt === S_IFDIR) prefix += "d";
  if (fmt === S_IFLNK) prefix += "L";
  if (fmt === S_IFBLK || fmt === S_IFCHR) prefix += "D";
  if (fmt === S_IFIFO) prefix += "p";
  if (fmt === S_IFSOCK) prefix += "S";
  if (mode & 0o4000) prefix += "u";
  if (mode & 0o2000) prefix += "g";
  if (fmt === S_IFCHR) prefix += "c";
  if (mode & 0o1000) prefix += "t";
  if (
    fmt !== S_IFDIR &&
    fmt !== S_IFLNK &&
    fmt !== S_IFREG &&
    fmt !== S_IFBLK &&
    fmt !== S_IFCHR &&
    fmt !== S_IFIFO &&
    fmt !== S_IFSOCK
  )
    prefix += "?";
  if (prefix === "") prefix = "-";
  const rwx = "rwxrwxrwx";
  let perm = "";
  for (let i = 0; i < 9; i++) perm += mode & (1 << (8 - i)) ? rwx[i] : "-";
  return prefix + perm;
}

export function fileTypeOf(st: Stats): filesystemPb.FileType {
  if (st.isSymbolicLink()) return filesystemPb.FileType.SYMLINK;
  if (st.isDirectory()) return filesystemPb.FileType.DIRECTORY;
  if (st.isFile()) return filesystemPb.FileType.FILE;
  return filesystemPb.FileType.UNSPECIFIED;
}

export interface EntryDeps {
  accounts: Accounts;
  metadata: MetadataStore;
}

/** Build an EntryInfo for `abs` from its lstat result. `displayPath` is the path reported. */
export async function entryFromStat(
  abs: string,
  st: Stats,
  deps: EntryDeps,
  displayPath = abs,
  /** Metadata already read (a directory listing reads all its entries' in one call). */
  known?: { meta: Record<string, string> | undefined },
): Promise<filesystemPb.EntryInfo> {
  let symlinkTarget: string | undefined;
  if (st.isSymbolicLink()) {
    try {
      symlinkTarget = await fsp.realpath(abs);
    } catch {
      try {
        const link = await fsp.readlink(abs);
        symlinkTarget = path.resolve(path.dirname(abs), link);
      } catch {
        symlinkTarget = undefined;
      }
    }
  }
  const meta = known ? known.meta : (await deps.metadata.getMany([{ path: abs, dev: st.dev, ino: st.ino }]))[0];
  return create(filesystemPb.EntryInfoSchema, {
    name: path.basename(displayPath) || "/",
    type: fileTypeOf(st),
    path: displayPath,
    size: BigInt(st.size),
    mode: st.mode & 0o777,
    permissions: goModeString(st.mode),
    owner: deps.accounts.byUid.get(st.uid)?.name ?? String(st.uid),
    group: deps.accounts.groupByGid.get(st.gid) ?? String(st.gid),
    modifiedTime: timestampFromMs(Math.floor(st.mtimeMs)),
    symlinkTarget,
    metadata: meta ? { ...meta } : {},
  });
}

/** lstat + EntryInfo; throws the fs error (ENOENT etc.). */
export async function entryFor(abs: string, deps: EntryDeps, displayPath = abs): Promise<filesystemPb.EntryInfo> {
  const st = await fsp.lstat(abs);
  return entryFromStat(abs, st, deps, displayPath);
}
