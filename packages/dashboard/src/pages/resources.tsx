import { ApiError, api } from "../api.js";
import { ago, bytes, count, usePoll } from "../poll.js";

function ErrorLine({ error }: { error?: string }) {
  return error ? (
    <p role="alert" class="error">
      {error}
    </p>
  ) : null;
}

export function SnapshotsPage() {
  const list = usePoll(() => api.snapshots(), 3000, []);
  const items = list.data ?? [];
  return (
    <section aria-labelledby="snapshots-title">
      <div class="heading">
        <h1 id="snapshots-title">Snapshots</h1>
        <span class="muted">{list.data ? count(items.length, "snapshot") : "loading…"}</span>
      </div>
      <ErrorLine error={list.error} />
      <table aria-label="Snapshots">
        <thead>
          <tr>
            <th>ID</th>
            <th>Names</th>
            <th>From sandbox</th>
            <th>Template</th>
            <th>Size</th>
            <th>In repository</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          {items.map((s) => (
            <tr key={s.snapshotID}>
              <td class="mono">{s.snapshotID}</td>
              <td>{s.names.join(", ")}</td>
              <td class="mono">{s.sandboxID}</td>
              <td>{s.templateID}</td>
              <td>{bytes(s.sizeBytes)}</td>
              <td>{s.committed ? "yes" : `uploading (${bytes(s.uploadedBytes ?? 0)})`}</td>
              <td>{ago(s.createdAt)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {list.data && items.length === 0 && <p class="empty">No snapshots.</p>}
    </section>
  );
}

export function VolumesPage() {
  const list = usePoll(() => api.volumes(), 3000, []);
  const items = list.data ?? [];
  return (
    <section aria-labelledby="volumes-title">
      <div class="heading">
        <h1 id="volumes-title">Volumes</h1>
        <span class="muted">{list.data ? count(items.length, "volume") : "loading…"}</span>
      </div>
      <ErrorLine error={list.error} />
      <table aria-label="Volumes">
        <thead>
          <tr>
            <th>ID</th>
            <th>Name</th>
          </tr>
        </thead>
        <tbody>
          {items.map((v) => (
            <tr key={v.volumeID}>
              <td class="mono">{v.volumeID}</td>
              <td>{v.name}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {list.data && items.length === 0 && <p class="empty">No volumes.</p>}
    </section>
  );
}

/** A gateway's nodes; a single server (no cluster) has no node list. */
export function NodesPage() {
  const list = usePoll(
    () =>
      api.nodes().catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 404) return null;
        throw err;
      }),
    2000,
    [],
  );
  const items = list.data ?? [];
  return (
    <section aria-labelledby="nodes-title">
      <div class="heading">
        <h1 id="nodes-title">Nodes</h1>
        <span class="muted">{list.data ? count(items.length, "node") : ""}</span>
      </div>
      <ErrorLine error={list.error} />
      {list.data === null && (
        <p class="empty">This server is not part of a cluster: it is the only node. Open a gateway to see its nodes.</p>
      )}
      {list.data && (
        <table aria-label="Nodes">
          <thead>
            <tr>
              <th>Node</th>
              <th>Health</th>
              <th>Sandboxes</th>
              <th>Paused</th>
              <th>Capacity</th>
              <th>CPU allocated</th>
              <th>Memory allocated</th>
              <th>Version</th>
              <th>URL</th>
            </tr>
          </thead>
          <tbody>
            {items.map((n) => (
              <tr key={n.nodeID}>
                <td class="mono">{n.nodeID}</td>
                <td>
                  <span class={`state state-${n.status}`}>{n.status}</span>
                </td>
                <td>{n.sandboxCount}</td>
                <td>{n.pausedCount ?? ""}</td>
                <td>{n.capacity ?? ""}</td>
                <td>{n.allocatedCPU ?? ""}</td>
                <td>{n.allocatedMemoryMiB !== undefined ? `${n.allocatedMemoryMiB} MiB` : ""}</td>
                <td>{n.version ?? ""}</td>
                <td class="mono">{n.url ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
