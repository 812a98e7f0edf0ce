// Offline validation of Kubernetes manifests against the Kubernetes API schemas, as shipped by
// the `kubernetes-models` package (generated from the upstream OpenAPI document):
//  1. each object is checked by its model's JSON-schema validator (types, enums, required
//     fields, formats);
//  2. unknown fields (a misspelt `hostNetwrk`, a field at the wrong level) are caught by the
//     TypeScript compiler: every object becomes a typed object literal of its model's
//     interface, and excess-property checks refuse what the API does not define.
//   node --import tsx test/deploy/kubernetes.ts FILE.yaml|-     (exit 1 with the problems)
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import ts from "typescript";
import { parseAllDocuments } from "yaml";

const ROOT = resolve(import.meta.dirname, "..", "..");

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata?: { name?: string };
}

interface Model {
  validate(): void;
}
type ModelClass = new (data: unknown) => Model;

/** kubernetes-models' module for an apiVersion: "v1" -> "kubernetes-models/v1", "apps/v1" -> ".../apps/v1". */
const modulePath = (apiVersion: string) => `kubernetes-models/${apiVersion}`;

function isObject(d: unknown): d is K8sObject {
  if (typeof d !== "object" || d === null) return false;
  const o = d as Record<string, unknown>;
  return typeof o.apiVersion === "string" && typeof o.kind === "string";
}

/** Every problem found in a multi-document YAML text; none means valid. */
export async function validateManifests(text: string): Promise<string[]> {
  const problems: string[] = [];
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if ("errors" in doc && doc.errors.length) {
      problems.push(...doc.errors.map((e) => `YAML: ${e.message}`));
      continue;
    }
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    if (!isObject(value)) {
      problems.push(`a document without apiVersion and kind: ${JSON.stringify(value).slice(0, 120)}`);
      continue;
    }
    objects.push(value);
  }
  const label = (o: K8sObject) => `${o.kind}/${o.metadata?.name ?? "?"}`;
  // 1. The models' schema validators.
  for (const o of objects) {
    let mod: Record<string, unknown>;
    try {
      mod = (await import(modulePath(o.apiVersion))) as Record<string, unknown>;
    } catch {
      problems.push(`${label(o)}: unknown apiVersion ${o.apiVersion}`);
      continue;
    }
    const cls = mod[o.kind] as ModelClass | undefined;
    if (typeof cls !== "function") {
      problems.push(`${label(o)}: no kind ${o.kind} in ${o.apiVersion}`);
      continue;
    }
    try {
      new cls(o).validate();
    } catch (err) {
      problems.push(`${label(o)}: ${(err as Error).message}`);
    }
  }
  // 2. Unknown fields, by the compiler's excess-property checks.
  problems.push(...typeCheck(objects.filter((o) => !problems.some((p) => p.startsWith(`${label(o)}: unknown`)))));
  return problems;
}

function typeCheck(objects: K8sObject[]): string[] {
  if (objects.length === 0) return [];
  const dir = mkdtempSync(join(tmpdir(), "aenv-k8s-check-"));
  try {
    symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
    // One typed constant per object; `starts` keeps the line each one begins on.
    const lines = objects.map((o, i) => `import type { I${o.kind} as T${i} } from "${modulePath(o.apiVersion)}";`);
    const starts: Array<{ line: number; label: string }> = [];
    objects.forEach((o, i) => {
      starts.push({ line: lines.length, label: `${o.kind}/${o.metadata?.name ?? "?"}` });
      lines.push(...`export const o${i}: T${i} = ${JSON.stringify(o, null, 1)};`.split("\n"));
    });
    const file = join(dir, "manifests.ts");
    writeFileSync(file, lines.join("\n"));
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      skipLibCheck: true,
      types: [],
    });
    return ts.getPreEmitDiagnostics(program).map((d) => {
      const msg = ts.flattenDiagnosticMessageText(d.messageText, "\n").split("\n").slice(-1)[0] ?? "";
      if (!d.file || d.start === undefined) return `types: ${msg}`;
      const at = d.file.getLineAndCharacterOfPosition(d.start).line;
      const owner = [...starts].reverse().find((o) => o.line <= at)?.label ?? "?";
      return `${owner}: ${msg}`;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const arg = process.argv[2];
  if (!arg) {
    console.error("usage: kubernetes.ts FILE.yaml|-");
    process.exit(2);
  }
  const text = readFileSync(arg === "-" ? 0 : arg, "utf8");
  const problems = await validateManifests(text);
  const count = parseAllDocuments(text).filter((d) => d.toJS() !== null).length;
  for (const p of problems) console.error(`invalid: ${p}`);
  console.log(`kubernetes: ${count} objects, ${problems.length} problems`);
  process.exit(problems.length ? 1 : 0);
}
