import { filesystemPb } from "@aenv/protocol";
import { useEffect, useMemo, useState } from "preact/hooks";
import { type EnvdTarget, envdClient } from "../envd.js";
import { bytes } from "../poll.js";

type Entry = filesystemPb.EntryInfo;

function parent(path: string): string {
  const p = path.replace(/\/+$/, "").split("/").slice(0, -1).join("/");
  return p || "/";
}
function join(dir: string, name: string): string {
  return `${dir.replace(/\/+$/, "")}/${name}`;
}

/** Browse the sandbox's files (envd's Filesystem.ListDir), download and upload (envd's /files). */
export function FilesTab({ target, running }: { target: EnvdTarget; running: boolean }) {
  const envd = useMemo(() => envdClient(target), [target.sandboxId, target.accessToken]);
  const [dir, setDir] = useState("/home/user");
  const [pathInput, setPathInput] = useState(dir);
  const [entries, setEntries] = useState<Entry[]>();
  const [error, setError] = useState<string>();
  const [note, setNote] = useState<string>();
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!running) return;
    let stop = false;
    setError(undefined);
    envd.filesystem
      .listDir({ path: dir, depth: 1 })
      .then((r) => {
        if (stop) return;
        const sorted = [...r.entries].sort(
          (a, b) =>
            Number(b.type === filesystemPb.FileType.DIRECTORY) - Number(a.type === filesystemPb.FileType.DIRECTORY) ||
            a.name.localeCompare(b.name),
        );
        setEntries(sorted);
      })
      .catch((err: Error) => !stop && setError(err.message));
    return () => {
      stop = true;
    };
  }, [envd, dir, tick, running]);
  const go = (p: string) => {
    setDir(p);
    setPathInput(p);
  };
  const download = async (e: Entry) => {
    try {
      const r = await envd.files("GET", e.path);
      const url = URL.createObjectURL(await r.blob());
      const a = document.createElement("a");
      a.href = url;
      a.download = e.name;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const upload = async (files: FileList | null) => {
    if (!files) return;
    try {
      for (const f of Array.from(files)) await envd.files("POST", join(dir, f.name), f);
      setNote(`Uploaded ${files.length} file(s) to ${dir}`);
      setTick((t) => t + 1);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  if (!running) return <p class="muted">The sandbox is paused: resume it to browse its files.</p>;
  return (
    <div class="files">
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          go(pathInput || "/");
        }}
      >
        <label>
          Path
          <input value={pathInput} onInput={(e) => setPathInput((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit">Open</button>
        <button type="button" onClick={() => go(parent(dir))} disabled={dir === "/"}>
          Up
        </button>
        <label class="upload">
          Upload files
          <input type="file" multiple onChange={(e) => void upload((e.target as HTMLInputElement).files)} />
        </label>
      </form>
      {note && <p role="status">{note}</p>}
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      <table aria-label={`Files in ${dir}`}>
        <thead>
          <tr>
            <th>Name</th>
            <th>Size</th>
            <th>Permissions</th>
            <th>Owner</th>
            <th>
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {(entries ?? []).map((e) => (
            <tr key={e.path}>
              <td class="mono">
                {e.type === filesystemPb.FileType.DIRECTORY ? (
                  <button type="button" class="link" onClick={() => go(e.path)}>
                    {e.name}/
                  </button>
                ) : (
                  e.name
                )}
              </td>
              <td>{e.type === filesystemPb.FileType.DIRECTORY ? "" : bytes(Number(e.size))}</td>
              <td class="mono">{e.permissions}</td>
              <td>{e.owner}</td>
              <td>
                {e.type === filesystemPb.FileType.FILE && (
                  <button
                    type="button"
                    class="quiet"
                    aria-label={`Download ${e.name}`}
                    onClick={() => void download(e)}
                  >
                    Download
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {entries && entries.length === 0 && <p class="empty">Empty folder.</p>}
    </div>
  );
}
