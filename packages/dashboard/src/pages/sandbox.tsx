import type { SandboxDetail, SandboxMetric } from "@aenv/protocol";
import { useMemo, useState } from "preact/hooks";
import { api } from "../api.js";
import { ago, bytes, duration, usePoll } from "../poll.js";
import { TimeChart } from "./chart.js";
import { FilesTab } from "./files.js";
import { TerminalTab } from "./terminal.js";

type Tab = "overview" | "terminal" | "files";

function Field({ name, children }: { name: string; children: preact.ComponentChildren }) {
  return (
    <>
      <dt>{name}</dt>
      <dd>{children}</dd>
    </>
  );
}

function Network({ s }: { s: SandboxDetail }) {
  const n = s.network;
  const parts = [s.allowInternetAccess ? "internet: allowed" : "internet: denied"];
  if (n?.allowOut?.length) parts.push(`allow out: ${n.allowOut.join(", ")}`);
  if (n?.denyOut?.length) parts.push(`deny out: ${n.denyOut.join(", ")}`);
  if (n?.allowPublicTraffic === false) parts.push("public traffic: token required");
  return <>{parts.join(" · ")}</>;
}

function Actions({ s, refresh }: { s: SandboxDetail; refresh: () => void }) {
  const [busy, setBusy] = useState<string>();
  const [message, setMessage] = useState<{ text: string; error?: boolean }>();
  const [count, setCount] = useState(1);
  const [confirmKill, setConfirmKill] = useState(false);
  /** Runs one action; the page asks for the sandbox again after it (unless it is gone). */
  const act = async (name: string, f: () => Promise<string | undefined>, again = true) => {
    setBusy(name);
    setMessage(undefined);
    try {
      const text = await f();
      setMessage({ text: text ?? `${name}: done` });
    } catch (err) {
      setMessage({ text: `${name} failed: ${(err as Error).message}`, error: true });
    } finally {
      setBusy(undefined);
      if (again) refresh();
    }
  };
  const paused = s.state === "paused";
  return (
    <fieldset class="actions">
      <legend class="sr-only">Sandbox actions</legend>
      <button
        type="button"
        disabled={!!busy || paused}
        onClick={() => act("Pause", async () => void (await api.pause(s.sandboxID)))}
      >
        Pause
      </button>
      <button
        type="button"
        disabled={!!busy || !paused}
        onClick={() => act("Resume", async () => void (await api.resume(s.sandboxID)))}
      >
        Resume
      </button>
      <span class="fork">
        <label for="fork-count">Fork count</label>
        <input
          id="fork-count"
          type="number"
          min={1}
          max={100}
          value={count}
          onInput={(e) => setCount(Math.max(1, Math.min(100, Number((e.target as HTMLInputElement).value) || 1)))}
        />
        <button
          type="button"
          disabled={!!busy || paused}
          onClick={() =>
            act("Fork", async () => {
              const out = await api.fork(s.sandboxID, count);
              const ok = out.filter((r) => "sandbox" in r).length;
              return `Fork: ${ok} of ${out.length} started`;
            })
          }
        >
          Fork
        </button>
      </span>
      <button
        type="button"
        disabled={!!busy}
        onClick={() => act("Snapshot", async () => `Snapshot ${(await api.snapshot(s.sandboxID)).snapshotID} taken`)}
      >
        Snapshot
      </button>
      {!confirmKill ? (
        <button type="button" class="danger" disabled={!!busy} onClick={() => setConfirmKill(true)}>
          Kill
        </button>
      ) : (
        <span role="alertdialog" aria-label="Confirm kill" class="confirm">
          Kill {s.sandboxID}? Its files are gone for good.
          <button
            type="button"
            class="danger"
            onClick={() =>
              act(
                "Kill",
                async () => {
                  setConfirmKill(false);
                  await api.kill(s.sandboxID);
                  location.hash = "#/sandboxes";
                  return undefined;
                },
                false,
              )
            }
          >
            Confirm kill
          </button>
          <button type="button" onClick={() => setConfirmKill(false)}>
            Cancel
          </button>
        </span>
      )}
      {busy && <span class="muted">{busy}…</span>}
      {message && (
        <span role={message.error ? "alert" : "status"} class={message.error ? "error" : "ok"}>
          {message.text}
        </span>
      )}
    </fieldset>
  );
}

function Charts({ metrics }: { metrics: SandboxMetric[] }) {
  const cpu = useMemo(
    () => ({ x: metrics.map((m) => m.timestampUnix), y: metrics.map((m) => m.cpuUsedPct) }),
    [metrics],
  );
  const mem = useMemo(
    () => ({ x: metrics.map((m) => m.timestampUnix), y: metrics.map((m) => m.memUsed / 1048576) }),
    [metrics],
  );
  const total = metrics.at(-1)?.memTotal;
  return (
    <div class="charts">
      <TimeChart title="CPU" unit="%" data={cpu} max={100} />
      <TimeChart title="Memory" unit=" MiB" data={mem} max={total ? total / 1048576 : undefined} />
    </div>
  );
}

export function SandboxPage({ id }: { id: string }) {
  const detail = usePoll(() => api.sandbox(id), 1500, [id]);
  const metrics = usePoll(() => api.metrics(id), 5000, [id]);
  const [tab, setTab] = useState<Tab>("overview");
  // A tab once opened stays mounted (hidden when another is shown): the shell keeps running.
  const [opened, setOpened] = useState<Set<Tab>>(new Set(["overview"]));
  const show = (t: Tab) => {
    setTab(t);
    setOpened((o) => new Set([...o, t]));
  };
  const s = detail.data;
  const target = useMemo(
    () => (s ? { sandboxId: s.sandboxID, accessToken: s.envdAccessToken } : undefined),
    [s?.sandboxID, s?.envdAccessToken],
  );
  if (!s) {
    return (
      <section>
        <p>
          <a href="#/sandboxes">← Sandboxes</a>
        </p>
        {detail.error ? (
          <p role="alert" class="error">
            {detail.error}
          </p>
        ) : (
          <p class="muted">loading…</p>
        )}
      </section>
    );
  }
  const gone = detail.error?.includes("not found");
  const running = s.state === "running";
  const tabs: Array<[Tab, string]> = [
    ["overview", "Overview"],
    ["terminal", "Terminal"],
    ["files", "Files"],
  ];
  return (
    <section aria-labelledby="sandbox-title">
      <p>
        <a href="#/sandboxes">← Sandboxes</a>
      </p>
      <div class="heading">
        <h1 id="sandbox-title" class="mono">
          {s.sandboxID}
        </h1>
        <span class={`state state-${s.state}`} data-testid="sandbox-state">
          {s.state}
        </span>
        {gone && <span class="error">gone</span>}
      </div>
      <Actions s={s} refresh={detail.refresh} />
      <div role="tablist" aria-label="Sandbox views" class="tabs">
        {tabs.map(([t, label]) => (
          <button
            key={t}
            type="button"
            role="tab"
            id={`tab-${t}`}
            aria-selected={tab === t}
            aria-controls={`panel-${t}`}
            onClick={() => show(t)}
          >
            {label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id="panel-overview" aria-labelledby="tab-overview" hidden={tab !== "overview"}>
        <dl class="fields">
          <Field name="State">
            {s.hibernation
              ? `hibernated (${s.hibernation === "frozen" ? "frozen in memory" : "saved to disk"})`
              : s.state}
          </Field>
          <Field name="Node">{s.nodeID ?? "—"}</Field>
          <Field name="Template">
            {s.alias && s.alias !== s.templateID ? `${s.alias} (${s.templateID})` : s.templateID}
          </Field>
          <Field name="Started">{ago(s.startedAt)}</Field>
          <Field name="TTL left">{running ? duration(Date.parse(s.endAt) - Date.now()) : "—"}</Field>
          <Field name="On timeout">
            {s.lifecycle.onTimeout}
            {s.lifecycle.autoResume ? ", resumes on traffic" : ""}
          </Field>
          <Field name="Resources">
            {s.cpuCount} vCPU · {s.memoryMB} MiB memory · {bytes(s.diskSizeMB * 1048576)} disk
          </Field>
          <Field name="Metadata">
            {Object.entries(s.metadata).length
              ? Object.entries(s.metadata).map(([k, v]) => (
                  <code key={k} class="tag">
                    {k}={v}
                  </code>
                ))
              : "none"}
          </Field>
          <Field name="Network">
            <Network s={s} />
          </Field>
          <Field name="Volumes">
            {s.volumeMounts.length ? s.volumeMounts.map((v) => `${v.name} → ${v.path}`).join(", ") : "none"}
          </Field>
        </dl>
        {metrics.error && <p class="muted">metrics: {metrics.error}</p>}
        <Charts metrics={metrics.data ?? []} />
      </div>
      <div role="tabpanel" id="panel-terminal" aria-labelledby="tab-terminal" hidden={tab !== "terminal"}>
        {target && opened.has("terminal") && <TerminalTab target={target} running={running} />}
      </div>
      <div role="tabpanel" id="panel-files" aria-labelledby="tab-files" hidden={tab !== "files"}>
        {target && opened.has("files") && <FilesTab target={target} running={running} />}
      </div>
    </section>
  );
}
