// The signed-in key and workspace. The key is kept in sessionStorage: for this tab's session
// only, gone when the tab closes, never in localStorage or a cookie.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import { Api, type Workspace } from "./api";

const STORAGE_KEY = "calleval.session";

export interface StoredSession {
  key: string;
  workspace: Workspace;
  workspaces: Workspace[];
}

export function loadSession(): StoredSession | null {
  try {
    const raw = sessionStorage.getItem(STORAGE_KEY);
    return raw ? (JSON.parse(raw) as StoredSession) : null;
  } catch {
    return null;
  }
}

export function saveSession(session: StoredSession | null) {
  if (session) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(session));
  else sessionStorage.removeItem(STORAGE_KEY);
}

// The workspaces a key can see: its own, then those granted to it.
export async function workspacesOf(key: string): Promise<Workspace[]> {
  return (await new Api(key).get<{ data: Workspace[] }>("/api/v1/workspaces")).data;
}

export interface SessionContextValue {
  api: Api;
  session: StoredSession;
  // Ends the session; `reason` is shown on the sign-in page (an expired key, say).
  signOut: (reason?: string) => void;
  switchWorkspace: (workspace: Workspace) => void;
  refreshWorkspace: () => void;
}

export const SessionContext = createContext<SessionContextValue | null>(null);

export function useSession(): SessionContextValue {
  const value = useContext(SessionContext);
  if (!value) throw new Error("useSession outside a signed-in page");
  return value;
}
