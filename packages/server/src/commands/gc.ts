import { parseArgs } from "node:util";
import { ConfigError, loadConfig } from "../config.js";
import { BackendUnavailableError } from "../storage/repository/backend.js";
import { runGc } from "../storage/repository/chunk-repository.js";
import { openRepository } from "../storage/repository/open.js";

const HELP = `aenv-server gc — delete repository chunks no manifest references

Usage: aenv-server gc [--config FILE] [--data-dir DIR] [--grace SECONDS] [--dry-run]

  Safe while servers commit to the same repository: chunks a commit in flight needs are kept,
  and chunks newer than the grace period (default gc.grace_secs, 900) are never deleted.
  Prints the result as JSON.`;

/** `aenv-server gc`: one garbage collection of the configured repository. */
export async function gcCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      config: { type: "string" },
      "data-dir": { type: "string" },
      grace: { type: "string" },
      "dry-run": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  try {
    const cfg = loadConfig({ config: values.config, dataDir: values["data-dir"] });
    const graceS = values.grace !== undefined ? Number(values.grace) : cfg.repository.gcGraceS;
    if (!Number.isFinite(graceS) || graceS < 0)
      throw new ConfigError(`--grace must be seconds >= 0, got ${values.grace}`);
    const repo = await openRepository(cfg, { info: () => {}, warn: () => {}, error: () => {} });
    const r = await runGc(repo, { graceMs: graceS * 1000, dryRun: values["dry-run"] ?? false });
    console.log(JSON.stringify(r, null, 2));
    return 0;
  } catch (err) {
    if (err instanceof ConfigError || err instanceof BackendUnavailableError) {
      console.error(`aenv-server gc: ${err.message}`);
      return 2;
    }
    throw err;
  }
}
