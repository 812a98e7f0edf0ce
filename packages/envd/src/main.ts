/** envd entry point: `envd [--port 49983] [--host 0.0.0.0]`. */

import { type Args, parseArgs } from "./args.js";
import { createEnvd } from "./envd.js";
import { log } from "./log.js";

function main(): void {
  process.on("uncaughtException", (err) => log("error", "uncaught exception", { err }));
  process.on("unhandledRejection", (err) => log("error", "unhandled rejection", { err }));
  process.on("SIGPIPE", () => {});

  let args: Args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (err) {
    log("error", "bad arguments", { err });
    process.exit(2);
  }
  const { env, server, listener } = createEnvd({
    accessToken: process.env.ENVD_ACCESS_TOKEN || undefined,
  });
  listener.on("error", (err) => {
    log("error", "server error", { err });
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE" || (err as NodeJS.ErrnoException).code === "EACCES")
      process.exit(1);
  });
  listener.listen(args.port, args.host, () => {
    const addr = listener.address();
    log("info", "envd listening", {
      host: args.host,
      port: typeof addr === "object" && addr ? addr.port : args.port,
      pid: process.pid,
    });
  });
  const shutdown = (sig: string) => {
    log("info", "shutting down", { signal: sig });
    env.watchers.closeAll();
    listener.close();
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 500).unref();
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

main();
