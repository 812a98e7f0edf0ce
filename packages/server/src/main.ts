import { parseArgs } from "node:util";
import { CLUSTER_FLAGS, installSafetyNet, stopOnSignals } from "@aenv/edge/process";
import pino from "pino";
import { ConfigError, loadConfig, type ServerConfig } from "./config.js";
import { HostClaimError } from "./network/host-claim.js";
import { SandboxLogBook } from "./orchestrator/sandbox-log-book.js";
import { RuntimeUnavailableError } from "./runtime/driver.js";
import { startServer } from "./server.js";
import { BackendUnavailableError } from "./storage/repository/backend.js";

const HELP = `aenv-server — E2B-compatible sandbox server on gVisor

Usage: aenv-server [--config FILE] [--listen HOST:PORT] [--data-dir DIR] [--templates-dir DIR] [--domain DOMAIN]
                   [--cluster redis://HOST:PORT | --cluster-sentinels HOST:PORT,... --cluster-master NAME]
                   [--node-id NAME] [--advertise-url URL]
       aenv-server gc [--dry-run] [--grace SECONDS]        garbage-collect the snapshot repository
       aenv-server import-template --name NAME IMAGE       a template from an image, offline
       aenv-server convert-image --to DIR IMAGE            an image's layers as eStargz (starts lazily)

  --config         TOML config file (default: AENV_CONFIG_PATH; see docs/configuration.md);
                   flags override environment variables, which override the file

  --listen         address to serve the API and the sandbox proxy on (default 0.0.0.0:8000)
  --data-dir       state, sandboxes, secrets (default /var/lib/aenv)
  --templates-dir  template root filesystems (default DATA/templates)
  --domain         returned to SDKs as 'domain'; ports are served at {port}-{id}.{domain}
                   (default localhost:PORT)
  --cluster        join a cluster whose state is in this Redis (AENV_CLUSTER); SIGTERM then
                   drains (pauses sandboxes into the shared repository) instead of killing
  --cluster-sentinels, --cluster-master
                   instead of --cluster: the Redis Sentinels to ask and the master name they
                   monitor (AENV_CLUSTER_SENTINELS, AENV_CLUSTER_MASTER); passwords from
                   AENV_CLUSTER_PASSWORD and AENV_CLUSTER_SENTINEL_PASSWORD
  --node-id        this node's ID in the cluster (AENV_NODE_ID, default the host name)
  --advertise-url  where gateways reach this node (AENV_ADVERTISE_URL, default http://LISTEN)

Environment: AENV_API_KEY (else generated into DATA/secrets/api-key), AENV_RUNSC_PLATFORM
(auto|systrap|ptrace), AENV_SLOT_CIDR (default 10.201.0.0/16), AENV_LOG_LEVEL.`;

async function main(): Promise<void> {
  // Subcommands that do not start the server.
  if (process.argv[2] === "import-template") {
    const { importTemplateCommand } = await import("./commands/import-template.js");
    process.exit(await importTemplateCommand(process.argv.slice(3)));
  }
  if (process.argv[2] === "convert-image") {
    const { convertImageCommand } = await import("./commands/convert-image.js");
    process.exit(await convertImageCommand(process.argv.slice(3)));
  }
  if (process.argv[2] === "gc") {
    const { gcCommand } = await import("./commands/gc.js");
    process.exit(await gcCommand(process.argv.slice(3)));
  }
  const { values } = parseArgs({
    options: {
      listen: { type: "string" },
      ...CLUSTER_FLAGS,
      "node-id": { type: "string" },
      "advertise-url": { type: "string" },
      "data-dir": { type: "string" },
      "templates-dir": { type: "string" },
      domain: { type: "string" },
      config: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  let cfg: ServerConfig;
  try {
    cfg = loadConfig({
      listen: values.listen,
      dataDir: values["data-dir"],
      templatesDir: values["templates-dir"],
      domain: values.domain,
      config: values.config,
      cluster: values.cluster,
      clusterSentinels: values["cluster-sentinels"],
      clusterMaster: values["cluster-master"],
      nodeId: values["node-id"],
      advertiseUrl: values["advertise-url"],
    });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`aenv-server: ${err.message}`);
    process.exit(2);
  }
  // What the server logs about a sandbox is also kept for its logs API (GET /v2/sandboxes/{id}/logs).
  const logBook = new SandboxLogBook();
  const log = pino({ level: cfg.logLevel, hooks: { logMethod: logBook.hook() } });
  installSafetyNet(log, "server");
  // The simulated runtime starts no sandbox: a developer's checkout runs it unprivileged.
  if (process.getuid?.() !== 0 && cfg.runtimeDriver !== "sim") {
    log.fatal("aenv-server must run as root (gVisor sandboxes, network namespaces, checkpoints)");
    process.exit(1);
  }
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(cfg, log, logBook);
  } catch (err) {
    if (
      err instanceof RuntimeUnavailableError ||
      err instanceof BackendUnavailableError ||
      err instanceof HostClaimError
    ) {
      log.fatal(err.message);
      process.exit(1);
    }
    throw err;
  }
  stopOnSignals(async (signal) => {
    if (cfg.cluster) {
      log.info({ signal }, "draining: pausing sandboxes into the shared repository");
      await server.drain().catch((err) => log.error({ err }, "drain failed"));
    } else {
      log.info({ signal }, "shutting down: killing sandboxes");
      await server.close();
    }
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
