/** envd entry point: `envd [--port 49983] [--host 0.0.0.0]`. */
import { createEnvd } from "./envd.js";
import { log } from "./log.js";

export interface Args {
  port: number;
  host: string;
}

export function parseArgs(argv: string[]): Args {
  const args: Args = { port: 49983, host: "0.0.0.0" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    const [flag, inline] = a.includes("=") ? [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)] : [a, undefined];
    const value = () => inline ?? argv[++i] ?? "";
    if (flag === "--port") {
      const n = Number(value());
      if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`invalid --port: ${a}`);
      args.port = n;
    } else if (flag === "--host") {
      args.host = value();
    } else if (flag === "--help" || flag === "-h") {
      process.stdout.write("usage: envd [--port 49983] [--host 0.0.0.0]\n");
      process.exit(0);
    } else {
      log("warn", "ignoring unknown argument", { arg: a });
    }
  }
  return args;
}

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
  const { env, server } = createEnvd({
    accessToken: process.env.ENVD_ACCESS_TOKEN || undefined,
  });
  server.on("error", (err) => {
    log("error", "server error", { err });
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE" || (err as NodeJS.ErrnoException).code === "EACCES") process.exit(1);
  });
  server.listen(args.port, args.host, () => {
    const addr = server.address();
    log("info", "envd listening", { host: args.host, port: typeof addr === "object" && addr ? addr.port : args.port, pid: process.pid });
  });
  const shutdown = (sig: string) => {
    log("info", "shutting down", { signal: sig });
    env.watchers.closeAll();
    server.close();
    server.closeAllConnections();
    setTimeout(() => process.exit(0), 500).unref();
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

main();
