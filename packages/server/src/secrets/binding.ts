import { InvalidRequestError } from "@aenv/edge/errors";
import { domainMatches, type NetworkRule, normaliseDomain } from "../network/policy.js";

/**
 * Which hosts a secret may be sent to. As on E2B, a network rule is what sends a secret to a
 * host: `${e2b.secrets.NAME}` in a rule's headers is filled in for that rule's host. A secret
 * may also be bound, when it is created (or given a new value), to a list of domain patterns
 * (aenv's allowedHosts): a rule may then name it only for a host the list covers, and the egress
 * proxy fills it in only for such a host, so one who may set a sandbox's rules (its key's
 * holder, or a tenant sharing the secret's owner) cannot point it at a host of their own. An
 * operator may require a binding on every secret (network.secrets_require_binding).
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

/**
 * Where a secret may go, for checking rules: listed hosts, `"rule"` (no list: the hosts of the
 * rules that name it) or an empty list (no list and a binding required: nowhere).
 */
export interface SecretBinding {
  name: string;
  allowedHosts: readonly string[] | "rule";
}

/**
 * A secret's binding by name, among one owner's secrets (api/routes/sandboxes.ts fixes the
 * owner): undefined when it does not exist (yet).
 */
export type BindingOf = (name: string) => SecretBinding | undefined;

/**
 * Refuses (400) network rules that would send an existing bound secret to a host it is not
 * bound to.
 * A secret that does not exist yet is let through here: it is checked again when it is used.
 */
export function checkRuleBindings(rules: Record<string, NetworkRule[]> | undefined, bindingOf: BindingOf): void {
  for (const [key, list] of Object.entries(rules ?? {})) {
    for (const rule of list) {
      for (const value of Object.values(rule.transform?.headers ?? {})) {
        for (const ref of secretRefs(value)) {
          const b = bindingOf(ref);
          if (!b || b.allowedHosts === "rule") continue;
          if (b.allowedHosts.length === 0) {
            throw new InvalidRequestError(
              `network.rules['${key}']: secret '${b.name}' is not bound to any host, which this server requires; give it allowedHosts (POST /secrets/{id} with a new value) before using it`,
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
