/** Command-line flags of envd. */
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
