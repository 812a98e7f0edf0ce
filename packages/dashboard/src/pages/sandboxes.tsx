import type { ListedSandbox } from "@aenv/protocol";
import { useEffect, useRef, useState } from "preact/hooks";
import { listSandboxes, type SandboxFilter } from "../api.js";
import { duration, usePoll } from "../poll.js";

/** The list is asked for again this often: other clients' creates, pauses and kills show up. */
const POLL_MS = 1500;
const ROW_PX = 36;
/** Rows drawn beyond the visible ones on each side, so a fast scroll shows no blank. */
const OVERSCAN = 8;

function metadataText(m: Record<string, string>): string {
  return Object.entries(m)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

/** running / hibernated / paused: a hibernated sandbox is running to E2B's API. */
export function shownState(s: ListedSandbox): string {
  return s.state === "running" && s.hibernation ? "hibernated" : s.state;
}

function Row({ s, now }: { s: ListedSandbox; now: number }) {
  return (
    <tr>
      <td class="mono">
        <a href={`#/sandboxes/${encodeURIComponent(s.sandboxID)}`}>{s.sandboxID}</a>
      </td>
      <td>{s.alias || s.templateID}</td>
      <td>
        <span class={`state state-${shownState(s)}`}>{shownState(s)}</span>
      </td>
      <td class="mono">{s.nodeID ?? "—"}</td>
      <td>{duration(now - Date.parse(s.startedAt))} ago</td>
      <td>{s.state === "paused" ? "—" : duration(Date.parse(s.endAt) - now)}</td>
      <td>{s.cpuCount}</td>
      <td>{s.memoryMB} MiB</td>
      <td class="meta" title={metadataText(s.metadata)}>
        {metadataText(s.metadata)}
      </td>
    </tr>
  );
}

const COLUMNS: Array<[string, string]> = [
  ["ID", "230px"],
  ["Template", "170px"],
  ["State", "100px"],
  ["Node", "120px"],
  ["Started", "110px"],
  ["TTL left", "100px"],
  ["CPU", "60px"],
  ["Memory", "100px"],
  ["Metadata", "auto"],
];

/**
 * Only the rows in view (plus a margin) are in the DOM, between two spacer rows that keep
 * the scroll height: thousands of sandboxes scroll as smoothly as ten.
 */
function SandboxTable({ items, now }: { items: ListedSandbox[]; now: number }) {
  const box = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(600);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const ro = new ResizeObserver(() => setHeight(el.clientHeight));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const first = Math.max(0, Math.floor(top / ROW_PX) - OVERSCAN);
  const last = Math.min(items.length, Math.ceil((top + height) / ROW_PX) + OVERSCAN);
  return (
    <div class="scroller" ref={box} onScroll={(e) => setTop((e.target as HTMLDivElement).scrollTop)}>
      <table aria-label="Sandboxes" aria-rowcount={items.length + 1} class="fixed">
        <colgroup>
          {COLUMNS.map(([name, width]) => (
            <col key={name} style={{ width }} />
          ))}
        </colgroup>
        <thead>
          <tr>
            {COLUMNS.map(([name]) => (
              <th key={name}>{name}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {first > 0 && <tr class="spacer" style={{ height: `${first * ROW_PX}px` }} />}
          {items.slice(first, last).map((s) => (
            <Row key={s.sandboxID} s={s} now={now} />
          ))}
          {last < items.length && <tr class="spacer" style={{ height: `${(items.length - last) * ROW_PX}px` }} />}
        </tbody>
      </table>
      {items.length === 0 && <p class="empty">No sandboxes.</p>}
    </div>
  );
}

/** Text typed into a filter is applied once typing pauses this long. */
const TYPING_MS = 300;

export function SandboxesPage() {
  const [filter, setFilter] = useState<SandboxFilter>({ state: "all", template: "", metadata: "" });
  const [typed, setTyped] = useState({ template: "", metadata: "" });
  useEffect(() => {
    const t = setTimeout(() => setFilter((f) => ({ ...f, ...typed })), TYPING_MS);
    return () => clearTimeout(t);
  }, [typed.template, typed.metadata]);
  const list = usePoll(() => listSandboxes(filter), POLL_MS, [filter.state, filter.template, filter.metadata]);
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  const items = list.data ?? [];
  const running = items.filter((s) => s.state === "running").length;
  return (
    <section aria-labelledby="sandboxes-title">
      <div class="heading">
        <h1 id="sandboxes-title">Sandboxes</h1>
        <span class="muted" aria-live="polite">
          {list.data ? `${items.length} shown · ${running} running · ${items.length - running} paused` : "loading…"}
        </span>
      </div>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>
          State
          <select
            value={filter.state}
            onChange={(e) =>
              setFilter({ ...filter, state: (e.target as HTMLSelectElement).value as SandboxFilter["state"] })
            }
          >
            <option value="all">all</option>
            <option value="running">running</option>
            <option value="hibernated">hibernated</option>
            <option value="paused">paused</option>
          </select>
        </label>
        <label>
          Template
          <input
            value={typed.template}
            placeholder="ID or alias"
            onInput={(e) => setTyped({ ...typed, template: (e.target as HTMLInputElement).value })}
          />
        </label>
        <label>
          Metadata
          <input
            value={typed.metadata}
            placeholder="key=value&key2=value2"
            onInput={(e) => setTyped({ ...typed, metadata: (e.target as HTMLInputElement).value })}
          />
        </label>
      </form>
      {list.error && (
        <p role="alert" class="error">
          {list.error}
        </p>
      )}
      {list.data && <SandboxTable items={items} now={now} />}
    </section>
  );
}
