import { useState } from "preact/hooks";
import { ApiError, describeError, type Workspace } from "../api";
import { workspacesOf } from "../session";

export function SignIn({ notice, onSignedIn }: {
  notice?: string;
  onSignedIn: (key: string, workspace: Workspace, workspaces: Workspace[]) => void;
}) {
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [choices, setChoices] = useState<Workspace[] | null>(null);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const workspaces = await workspacesOf(key.trim());
      if (workspaces.length === 1) onSignedIn(key.trim(), workspaces[0], workspaces);
      else setChoices(workspaces);
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 401
          ? "That API key is not valid. Keys start with cev_; a new one comes from callevalctl key create."
          : describeError(err),
      );
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="signin">
      <h1>calleval</h1>
      {notice && <p class="notice" role="status">{notice}</p>}
      {!choices ? (
        <form onSubmit={submit}>
          <label for="api-key">API key</label>
          <input
            id="api-key"
            name="api-key"
            type="password"
            autocomplete="off"
            spellcheck={false}
            value={key}
            onInput={(e) => setKey((e.target as HTMLInputElement).value)}
            placeholder="cev_…"
            required
            autofocus
          />
          <p class="hint">Kept in this tab only, until you sign out or close it.</p>
          <button type="submit" disabled={busy || !key.trim()}>
            {busy ? "Signing in…" : "Sign in"}
          </button>
          {error && <p class="error" role="alert">{error}</p>}
        </form>
      ) : (
        <section aria-labelledby="choose">
          <h2 id="choose">Choose a workspace</h2>
          <ul class="workspaces">
            {choices.map((w) => (
              <li key={w.id}>
                <button type="button" onClick={() => onSignedIn(key.trim(), w, choices)}>
                  <strong>{w.name}</strong> <span class="muted">#{w.id} · {w.credit_balance.toLocaleString()} credits</span>
                </button>
              </li>
            ))}
          </ul>
        </section>
      )}
    </main>
  );
}
