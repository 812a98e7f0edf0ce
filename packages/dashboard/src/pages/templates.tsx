import type { BuildLogEntry, BuildStatus, TemplateInfo } from "@aenv/protocol";
import { useEffect, useRef, useState } from "preact/hooks";
import { api } from "../api.js";
import { ago, count, usePoll } from "../poll.js";

/**
 * A build's log, followed live: the status endpoint is asked for the entries after the ones
 * already shown (logsOffset) until the build is ready or failed.
 */
function BuildLog({ templateId, buildId }: { templateId: string; buildId: string }) {
  const [entries, setEntries] = useState<BuildLogEntry[]>([]);
  const [status, setStatus] = useState<BuildStatus["status"]>();
  const [error, setError] = useState<string>();
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    let stop = false;
    let offset = 0;
    let timer: ReturnType<typeof setTimeout>;
    setEntries([]);
    const tick = async () => {
      try {
        const b = await api.buildStatus(templateId, buildId, offset);
        if (stop) return;
        offset += b.logEntries.length;
        if (b.logEntries.length) setEntries((e) => [...e, ...b.logEntries]);
        setStatus(b.status);
        if (b.status === "ready" || b.status === "error") return;
      } catch (err) {
        if (stop) return;
        setError((err as Error).message);
      }
      timer = setTimeout(tick, 1000);
    };
    void tick();
    return () => {
      stop = true;
      clearTimeout(timer);
    };
  }, [templateId, buildId]);
  useEffect(() => {
    const el = pre.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [entries]);
  return (
    <div class="build-log">
      <h3>
        Build <span class="mono">{buildId}</span>{" "}
        <span class={`state state-${status ?? "waiting"}`}>{status ?? "…"}</span>
      </h3>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      <pre ref={pre} role="log" aria-label="Build logs">
        {entries.map((e) => `${e.timestamp.slice(11, 19)} ${e.level.padEnd(5)} ${e.message}\n`).join("")}
        {entries.length === 0 ? "(no log entries)" : ""}
      </pre>
    </div>
  );
}

function lastBuild(t: TemplateInfo): string | undefined {
  return t.buildID ?? t.builds?.at(-1)?.buildID;
}

export function TemplatesPage() {
  const list = usePoll(() => api.templates(), 3000, []);
  const [open, setOpen] = useState<{ templateId: string; buildId: string }>();
  const items = list.data ?? [];
  return (
    <section aria-labelledby="templates-title">
      <div class="heading">
        <h1 id="templates-title">Templates</h1>
        <span class="muted">{list.data ? count(items.length, "template") : "loading…"}</span>
      </div>
      {list.error && (
        <p role="alert" class="error">
          {list.error}
        </p>
      )}
      <table aria-label="Templates">
        <thead>
          <tr>
            <th>ID</th>
            <th>Names</th>
            <th>Build</th>
            <th>From</th>
            <th>CPU</th>
            <th>Memory</th>
            <th>Updated</th>
            <th>
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {items.map((t) => {
            const build = lastBuild(t);
            return (
              <tr key={t.templateID}>
                <td class="mono">{t.templateID}</td>
                <td>{(t.names ?? t.aliases ?? []).join(", ")}</td>
                <td>
                  <span class={`state state-${t.buildStatus ?? "ready"}`}>{t.buildStatus ?? "—"}</span>
                </td>
                <td class="mono wrap">{t.fromImage ?? t.fromTemplate ?? ""}</td>
                <td>{t.cpuCount ?? ""}</td>
                <td>{t.memoryMB ? `${t.memoryMB} MiB` : ""}</td>
                <td>{t.updatedAt ? ago(t.updatedAt) : ""}</td>
                <td>
                  {build && (
                    <button
                      type="button"
                      class="quiet"
                      aria-label={`Build logs of ${t.templateID}`}
                      onClick={() => setOpen({ templateId: t.templateID, buildId: build })}
                    >
                      Build logs
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {open && <BuildLog templateId={open.templateId} buildId={open.buildId} />}
    </section>
  );
}
