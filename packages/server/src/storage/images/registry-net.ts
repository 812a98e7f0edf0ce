/**
 * Where image pulls may connect. An image reference is a URL an API caller chooses, and a
 * registry chooses where its redirects and token realms point: without a check, a pull is a
 * request from the server to any address, loopback services and cloud metadata included.
 *
 * Every request of a pull (registry, redirect hop, token realm) goes through `RegistryNet.fetch`:
 * literal addresses are checked before connecting, and names are resolved by the connection's
 * own `lookup`, which refuses the addresses it may not use, so the address checked is the
 * address connected to (no second resolution a rebinding DNS server could answer differently).
 * Redirects are followed here, one checked hop at a time.
 */
import { fetch, type Response } from "undici";
import { OutboundGuard, type OutboundGuardOptions } from "../../util/outbound-address.js";
import { ImagePullError } from "./errors.js";

export { type AddressClass, classifyAddress, type Resolver } from "../../util/outbound-address.js";

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const MAX_REDIRECTS = 10;

export type RegistryNetOptions = OutboundGuardOptions;

export class RegistryNet {
  private readonly guard: OutboundGuard;

  /** `allowPrivate`: images.allow_private_registries (registries, redirects and realms). */
  constructor(o: RegistryNetOptions = {}) {
    this.guard = new OutboundGuard(
      o,
      (cls, address, host) =>
        new ImagePullError(
          "forbidden-address",
          cls === "metadata"
            ? `image pull refused: ${host} is ${address}, a link-local/metadata address`
            : `image pull refused: ${host} is ${address}, a loopback, private or link-local address ` +
                "(an operator may allow such registries with images.allow_private_registries / AENV_ALLOW_PRIVATE_REGISTRIES)",
        ),
      (host) => new ImagePullError("network", `${host} has no address`),
    );
  }

  /** A URL this server may request: http(s), and not at an address it may not reach. */
  check(url: URL): void {
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new ImagePullError("registry", `image pull refused: ${url.protocol} URL (${url.origin})`);
    }
    this.guard.checkLiteral(url);
  }

  /**
   * GET with redirects followed one checked hop at a time. Authorization goes only to the
   * origin it was given for, as fetch does.
   */
  async fetch(url: string | URL, init: { headers: Record<string, string>; signal?: AbortSignal }): Promise<Response> {
    let current = new URL(url);
    const headers = { ...init.headers };
    for (let hop = 0; ; hop++) {
      this.check(current);
      let res: Response;
      try {
        res = await fetch(current, {
          headers,
          redirect: "manual",
          dispatcher: this.guard.agent,
          ...(init.signal ? { signal: init.signal } : {}),
        });
      } catch (e) {
        const cause = (e as { cause?: unknown }).cause;
        if (cause instanceof ImagePullError) throw cause;
        throw e;
      }
      const location = res.headers.get("location");
      if (!REDIRECTS.has(res.status) || !location) return res;
      await res.body?.cancel();
      if (hop >= MAX_REDIRECTS)
        throw new ImagePullError("registry", `more than ${MAX_REDIRECTS} redirects from ${url}`);
      const next = new URL(location, current);
      if (next.origin !== current.origin) delete headers.authorization;
      current = next;
    }
  }
}
