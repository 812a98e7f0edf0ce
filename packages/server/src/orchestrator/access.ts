import type { SandboxAccess } from "../proxy/proxy.js";
import { envdTokenOf, trafficTokenOf } from "./envd-credentials.js";
import type { SandboxRegistry } from "./registry.js";

/** A sandbox's ingress settings for the proxy, without resuming or waiting for anything. */
export function accessOf(registry: SandboxRegistry, id: string): SandboxAccess | undefined {
  const rec = registry.get(id)?.rec;
  if (!rec) return undefined;
  return {
    ...(rec.trafficToken ? { trafficToken: rec.trafficToken } : {}),
    ...(rec.network?.maskRequestHost ? { maskRequestHost: rec.network.maskRequestHost } : {}),
    ...(rec.network?.httpsPorts ? { httpsPorts: rec.network.httpsPorts } : {}),
    envdTokens: { client: rec.envdToken, envd: envdTokenOf(rec), traffic: trafficTokenOf(rec) },
  };
}

/** The sandbox whose envd token `matches` accepts (the signer of a /files URL), if any. */
export function sandboxByEnvdToken(registry: SandboxRegistry, matches: (token: string) => boolean): string | undefined {
  for (const l of registry.all()) {
    if (l.rec.state !== "killing" && matches(l.rec.envdToken)) return l.rec.id;
  }
  return undefined;
}
