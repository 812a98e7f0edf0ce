import { createInterface } from "node:readline/promises";
import type { Command } from "commander";
import { Api } from "../api.js";
import { credentialsPath, DEFAULT_API_URL, normalizeUrl, readCredentials, writeCredentials } from "../config.js";
import { type Ctx, examples } from "../context.js";
import { CliError } from "../errors.js";

export function registerAuth(program: Command, ctx: Ctx): void {
  program
    .command("auth")
    .description("save the server URL and API key (validated against the server)")
    .option("--url <url>", "server URL (skips the prompt)")
    .option("--key <key>", "API key (skips the prompt)")
    .addHelpText(
      "after",
      examples("aenv auth", "aenv auth --url http://10.0.0.5:8000 --key $(cat /var/lib/aenv/secrets/api-key)") +
        `\nCredentials are stored in ${credentialsPath()} (mode 0600); AENV_API_URL and AENV_API_KEY override them.\n`,
    )
    .action(async (o: { url?: string; key?: string }) => {
      const saved = readCredentials();
      let url = o.url;
      let key = o.key;
      if (url === undefined || key === undefined) {
        if (!process.stdin.isTTY) throw new CliError("stdin is not a terminal: pass --url and --key");
        const rl = createInterface({ input: process.stdin, output: process.stderr });
        try {
          const defUrl = saved.apiUrl ?? DEFAULT_API_URL;
          if (url === undefined) url = (await rl.question(`Server URL [${defUrl}]: `)).trim() || defUrl;
          if (key === undefined) {
            const hint = saved.apiKey ? " [keep current]" : "";
            key = (await rl.question(`API key${hint}: `)).trim() || saved.apiKey || "";
          }
        } finally {
          rl.close();
        }
      }
      if (!key) throw new CliError("an API key is required");
      const apiUrl = normalizeUrl(url);
      const api = new Api({ apiUrl, apiKey: key });
      await api.list();
      writeCredentials({ apiUrl, apiKey: key });
      ctx.out().item({ apiUrl, saved: credentialsPath() }, `Authenticated to ${apiUrl}; saved to ${credentialsPath()}`);
    });
}
