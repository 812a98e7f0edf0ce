export type OutputMode = "table" | "json";

export interface Column<T> {
  header: string;
  get: (row: T) => unknown;
}

/** JSON when asked, or when stdout is not a terminal; a table otherwise. */
export function outputMode(flag: string | undefined, isTTY: boolean | undefined): OutputMode {
  if (flag === "json") return "json";
  if (flag === "table") return "table";
  return isTTY ? "table" : "json";
}

function cell(v: unknown): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "object") {
    const entries = Object.entries(v as Record<string, unknown>);
    if (Array.isArray(v)) return v.map(String).join(",");
    return entries.map(([k, x]) => `${k}=${String(x)}`).join(",");
  }
  return String(v);
}

/** A plain left-aligned table, two spaces between columns, no trailing blanks. */
export function formatTable<T>(rows: T[], columns: Column<T>[]): string {
  const grid = [columns.map((c) => c.header), ...rows.map((r) => columns.map((c) => cell(c.get(r))))];
  const widths = columns.map((_, i) => Math.max(...grid.map((line) => (line[i] ?? "").length)));
  return grid
    .map((line) =>
      line
        .map((s, i) => (i === line.length - 1 ? s : s.padEnd(widths[i] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

export function formatJson(data: unknown): string {
  return JSON.stringify(data, null, 2);
}

export interface Printer {
  mode: OutputMode;
  /** A list: table rows, or the raw JSON array. */
  list<T>(rows: T[], columns: Column<T>[]): void;
  /** One result: `text` on a terminal, the JSON object otherwise. */
  item(data: unknown, text: string): void;
}

export function printer(mode: OutputMode, write: (s: string) => void = (s) => process.stdout.write(s)): Printer {
  return {
    mode,
    list(rows, columns) {
      write(`${mode === "json" ? formatJson(rows) : formatTable(rows, columns)}\n`);
    },
    item(data, text) {
      write(`${mode === "json" ? formatJson(data) : text}\n`);
    },
  };
}

export function relativeTime(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = Math.round((t - now) / 1000);
  const a = Math.abs(d);
  const s =
    a < 60
      ? `${a}s`
      : a < 3600
        ? `${Math.floor(a / 60)}m`
        : a < 86400
          ? `${Math.floor(a / 3600)}h`
          : `${Math.floor(a / 86400)}d`;
  return d < 0 ? `${s} ago` : `in ${s}`;
}
