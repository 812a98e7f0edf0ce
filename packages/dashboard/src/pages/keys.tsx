import type { ApiKeyInfo, CreatedApiKey } from "@aenv/protocol";
import type { ApiKeyLimits } from "@aenv/protocol/rest";
import { useState } from "preact/hooks";
import { ApiError, api } from "../api.js";
import { ago, count, usePoll } from "../poll.js";

function limitsText(k: ApiKeyInfo): string {
  if (k.admin) return "operator: everything";
  const l = k.limits;
  if (!l) return "none";
  return [
    l.maxSandboxes !== undefined ? `${l.maxSandboxes} sandboxes` : "",
    l.createsPerSecond !== undefined ? `${l.createsPerSecond} creates/s` : "",
    l.callsPerWindow !== undefined ? `${l.callsPerWindow} calls / ${l.windowSeconds ?? 30} s` : "",
  ]
    .filter(Boolean)
    .join(", ");
}

/** A positive number from a field, or undefined when it is empty. */
function positive(v: string): number | undefined {
  if (!v.trim()) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`'${v}' is not a positive number`);
  return n;
}

/** API keys: the operator's key makes, lists and revokes them; other keys are told it is not theirs. */
export function KeysPage() {
  const list = usePoll(
    () =>
      api.keys().catch((err: unknown) => {
        if (err instanceof ApiError && err.status === 403) return null;
        throw err;
      }),
    5000,
    [],
  );
  const [name, setName] = useState("");
  const [max, setMax] = useState("");
  const [rate, setRate] = useState("");
  const [made, setMade] = useState<CreatedApiKey | undefined>();
  const [error, setError] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);
  const items = list.data ?? [];

  const create = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    setBusy(true);
    try {
      const limits: ApiKeyLimits = {};
      const m = positive(max);
      const r = positive(rate);
      if (m !== undefined) limits.maxSandboxes = Math.floor(m);
      if (r !== undefined) limits.createsPerSecond = r;
      setMade(await api.createKey(name.trim(), Object.keys(limits).length ? limits : undefined));
      setName("");
      setMax("");
      setRate("");
      list.refresh();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const [confirming, setConfirming] = useState<string | undefined>();
  const revoke = async (k: ApiKeyInfo) => {
    setConfirming(undefined);
    try {
      await api.revokeKey(k.id);
      list.refresh();
    } catch (err) {
      setError((err as Error).message);
    }
  };

  return (
    <section aria-labelledby="keys-title">
      <div class="heading">
        <h1 id="keys-title">API keys</h1>
        <span class="muted">{list.data ? count(items.length, "key") : ""}</span>
      </div>
      {list.error && (
        <p role="alert" class="error">
          {list.error}
        </p>
      )}
      {list.data === null && (
        <p class="empty">Keys are managed with the operator's key; this key sees its own sandboxes only.</p>
      )}
      {list.data && (
        <>
          <form class="filters" onSubmit={create} aria-label="New API key">
            <label>
              Name
              <input required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </label>
            <label>
              Max sandboxes
              <input
                inputMode="numeric"
                placeholder="no limit"
                value={max}
                onInput={(e) => setMax((e.target as HTMLInputElement).value)}
              />
            </label>
            <label>
              Creates a second
              <input
                inputMode="decimal"
                placeholder="no limit"
                value={rate}
                onInput={(e) => setRate((e.target as HTMLInputElement).value)}
              />
            </label>
            <button type="submit" disabled={busy || !name.trim()}>
              Create key
            </button>
          </form>
          {error && (
            <p role="alert" class="error">
              {error}
            </p>
          )}
          {made && (
            <p role="status" class="ok">
              Key "{made.name}": <code class="mono">{made.key}</code> — copy it now, it is not shown again.
            </p>
          )}
          <table aria-label="API keys">
            <thead>
              <tr>
                <th>Name</th>
                <th>ID</th>
                <th>Key</th>
                <th>Limits</th>
                <th>Last used</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {items.map((k) => (
                <tr key={k.id}>
                  <td>{k.name}</td>
                  <td class="mono">{k.id}</td>
                  <td class="mono">{`${k.mask.prefix}${k.mask.maskedValuePrefix}…${k.mask.maskedValueSuffix}`}</td>
                  <td>{limitsText(k)}</td>
                  <td>{k.lastUsed ? ago(k.lastUsed) : "never"}</td>
                  <td>
                    {!k.admin && confirming !== k.id && (
                      <button
                        type="button"
                        class="quiet"
                        onClick={() => setConfirming(k.id)}
                        aria-label={`Revoke ${k.name}`}
                      >
                        Revoke
                      </button>
                    )}
                    {confirming === k.id && (
                      <button type="button" class="danger" onClick={() => revoke(k)}>
                        Confirm revoke
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}
