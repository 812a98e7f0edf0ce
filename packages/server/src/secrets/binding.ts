import { InvalidRequestError } from "@aenv/edge/errors";
import { domainMatches, type NetworkRule, normaliseDomain } from "../network/policy.js";

/**
 * Which hosts a secret may be sent to. A secret is bound, when it is created (or given a new
 * value), to a list of domain patterns; a network rule may name it only for a host the list
 * covers, and the egress proxy fills it in only for such a host. Without this anyone holding
 * the API key could point a rule at a host of their own and read any secret there.
 */

const PLACEHOLDER = /\$\{e2b\.secrets\.([A-Za-z0-9_.-]{1,128})\}/g;

/** The secret names a header value refers to (`${e2b.secrets.NAME}`). */
export function secretRefs(value: string): string[] {
  return [...value.matchAll(PLACEHOLDER)].map((m) => m[1] as string);
}

/** A client's allowedHosts, normalised like network rule keys (lowercased, no trailing dot). */
export function normaliseAllowedHosts(hosts: readonly string[]): string[] {
  return [
    ...new Set(
      hosts.map((h) => {
        const d = normaliseDomain(h);
        if (!d) throw new InvalidRequestError(`allowedHosts: '${h.slice(0, 80)}' is not a domain or *.domain`);
        return d;
      }),
    ),
  ];
}

/** Whether a request to this host may carry the secret. */
export function hostAllowed(allowed: readonly string[], host: string): boolean {
  return allowed.some((a) => domainMatches(a, host));
}

/**
 * Whether every host a rule key matches is allowed: an exact key must match an allowed
 * pattern; a wildcard key `*.x` only a wildcard covering all of x's subdomains (`*.x` itself or
 * `*.` a parent of x).
 */
export function patternCovered(allowed: readonly string[], key: string): boolean {
  if (!key.startsWith("*.")) return hostAllowed(allowed, key);
  const base = key.slice(2);
  return allowed.some((a) => a === key || (a.startsWith("*.") && domainMatches(a, base)));
}

/** A secret's binding as the store holds it: undefined when it does not exist (yet). */
/** A secret's binding by name, among one owner's secrets (api/routes/sandboxes.ts fixes the owner). */
export type BindingOf = (name: string) => { name: string; allowedHosts: readonly string[] } | undefined;

/**
 * Refuses (400) network rules that would send an existing secret to a host it is not bound to.
 * A secret that does not exist yet is let through here: it is checked again when it is used.
 */
export function checkRuleBindings(rules: Record<string, NetworkRule[]> | undefined, bindingOf: BindingOf): void {
  for (const [key, list] of Object.entries(rules ?? {})) {
    for (const rule of list) {
      for (const value of Object.values(rule.transform?.headers ?? {})) {
        for (const ref of secretRefs(value)) {
          const b = bindingOf(ref);
          if (!b) continue;
          if (b.allowedHosts.length === 0) {
            throw new InvalidRequestError(
              `network.rules['${key}']: secret '${b.name}' is not bound to any host; give it allowedHosts (POST /secrets/{id} with a new value) before using it`,
            );
          }
          if (!patternCovered(b.allowedHosts, key)) {
            throw new InvalidRequestError(
              `network.rules['${key}']: secret '${b.name}' may be sent only to ${b.allowedHosts.join(", ")}`,
            );
          }
        }
      }
    }
  }
}
