/**
 * The code-interpreter service on port 49999 inside `code-interpreter-v1` sandboxes, as the
 * unmodified `@e2b/code-interpreter` SDK calls it: request bodies as zod schemas (the service
 * validates with them) and the lines of the `/execute` stream. A separate entry
 * (@aenv/protocol/code-interpreter): the service bundles it, envd does not.
 */
import { z } from "zod";

/** The port the SDK calls (`JUPYTER_PORT` in the SDK). */
export const CODE_INTERPRETER_PORT = 49999;

/** Languages a context can run; the SDK sends any string, others are refused with 400. */
export const CODE_LANGUAGES = ["python", "bash", "javascript"] as const;
export type CodeLanguage = (typeof CODE_LANGUAGES)[number];

const envVars = z.record(z.string().max(4096), z.string().max(1 << 20)).refine((m) => Object.keys(m).length <= 1000, {
  message: "at most 1000 env_vars",
});

/** POST /execute. `context_id` and `language` together are refused, as E2B's server does. */
export const ExecuteRequest = z.object({
  code: z.string().max(16 << 20),
  context_id: z.string().max(200).nullish(),
  language: z.string().max(100).nullish(),
  env_vars: envVars.nullish(),
});
export type ExecuteRequest = z.infer<typeof ExecuteRequest>;

/** POST /contexts. */
export const CreateContextRequest = z.object({
  language: z.string().max(100).nullish(),
  cwd: z.string().min(1).max(4096).nullish(),
});
export type CreateContextRequest = z.infer<typeof CreateContextRequest>;

/** A context as POST /contexts and GET /contexts answer it. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

/**
 * A result's representations, keyed as the SDK's `Result` reads them; MIME types without a
 * field of their own are kept under their MIME type (the SDK puts those in `extra`).
 */
export interface ResultFields {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  /**
   * The chart a matplotlib figure shows, in the SDK's `ChartTypes` shape (`type` line,
   * scatter, bar, pie, unknown or superchart; title, axes and elements).
   */
  chart?: Record<string, unknown>;
  [mime: string]: unknown;
}

/** One line of the POST /execute stream (newline-delimited JSON, never a blank line). */
export type ExecuteLine =
  | { type: "stdout" | "stderr"; text: string; timestamp: string }
  | ({ type: "result"; is_main_result: boolean } & ResultFields)
  | { type: "error"; name: string; value: string; traceback: string }
  | { type: "number_of_executions"; execution_count: number }
  | { type: "keepalive" }
  | { type: "end_of_execution" };

/**
 * The route a request path names, as the service reads it (query and trailing slashes
 * dropped, nothing decoded). The host's proxy decides which credential a route takes with the
 * same function, so the two can never read one path differently.
 */
export function codeInterpreterRoute(url: string): "health" | "execute" | "contexts" | "other" {
  const path = codeInterpreterPath(url);
  if (path === "/health") return "health";
  if (path === "/execute") return "execute";
  if (/^\/contexts(\/[^/]+(\/restart)?)?$/.test(path)) return "contexts";
  return "other";
}

/** The path the service routes on (see codeInterpreterRoute). */
export function codeInterpreterPath(url: string): string {
  try {
    return new URL(url, "http://localhost").pathname.replace(/\/+$/, "") || "/";
  } catch {
    return "/";
  }
}
