import { useState } from "preact/hooks";
import { checkKey, storeKey } from "./api.js";

/** The key is checked with one cheap authenticated call before anything else is shown. */
export function SignIn({ onSignedIn }: { onSignedIn: () => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      if (await checkKey(key.trim())) {
        storeKey(key.trim());
        onSignedIn();
      } else setError("That API key was refused by the server.");
    } catch (err) {
      setError(`Could not reach the server: ${(err as Error).message}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">aenv dashboard</h1>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autocomplete="off"
          spellcheck={false}
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
          required
        />
        <button type="submit" disabled={busy || !key.trim()}>
          Sign in
        </button>
        {error && (
          <p role="alert" class="error">
            {error}
          </p>
        )}
        <p class="hint">The key stays in this browser tab (session storage) and is sent only as X-API-Key.</p>
      </form>
    </main>
  );
}
