import type { ExecuteLine, ResultFields } from "@aenv/protocol/code-interpreter";

/** What kernels/charts.py registers for a matplotlib figure's chart data (its MIME_TYPE). */
export const CHART_MIME = "application/vnd.aenv.chart+json";

/** MIME types with a field of their own in the SDK's `Result`; others keep their MIME type as key. */
const FIELDS: Record<string, keyof ResultFields> = {
  [CHART_MIME]: "chart",
  "text/plain": "text",
  "text/html": "html",
  "text/markdown": "markdown",
  "image/svg+xml": "svg",
  "image/png": "png",
  "image/jpeg": "jpeg",
  "application/pdf": "pdf",
  "text/latex": "latex",
  "application/json": "json",
  "application/javascript": "javascript",
};

/** A Jupyter mime bundle (execute_result / display_data `data`) as a result line. */
export function resultLine(data: Record<string, unknown>, isMain: boolean): ExecuteLine {
  const out: ResultFields = {};
  for (const [mime, value] of Object.entries(data)) {
    const field = FIELDS[mime] ?? mime;
    // Jupyter allows multi-line text as a list of lines.
    out[field] = Array.isArray(value) && mime !== "application/json" ? value.join("") : value;
  }
  return { type: "result", is_main_result: isMain, ...out };
}

export function now(): string {
  return new Date().toISOString();
}
