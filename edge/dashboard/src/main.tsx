import { render } from "preact";
import { useCallback, useEffect, useMemo, useState } from "preact/hooks";
import { Api, type Workspace } from "./api";
import { AgentEditor, AgentsPage } from "./pages/agents";
import { CallPage } from "./pages/call";
import { CallsPage } from "./pages/calls";
import { MetricEditor, MetricsPage } from "./pages/metrics";
import { BatchRunPage, RunPage, ScenarioEditor, ScenariosPage } from "./pages/scenarios";
import { SignIn } from "./pages/signin";
import { TrendsPage } from "./pages/trends";
import { href, navigate, useRoute } from "./router";
import { loadSession, saveSession, SessionContext, type StoredSession } from "./session";
import "./style.css";

function App() {
  const [session, setSession] = useState<StoredSession | null>(loadSession);
  const [notice, setNotice] = useState<string | undefined>();
  const route = useRoute();

  const signOut = useCallback((reason?: string) => {
    saveSession(null);
    setSession(null);
    setNotice(reason);
  }, []);
  const update = useCallback((next: StoredSession) => {
    saveSession(next);
    setSession(next);
  }, []);

  // An expired or revoked key on any request ends the session, with the reason shown.
  const api = useMemo(
    () =>
      session
        ? new Api(session.key, session.workspace.id, () =>
            signOut("Your API key is no longer valid. Sign in with a current key."))
        : null,
    [session?.key, session?.workspace.id, signOut],
  );

  const refreshWorkspace = useCallback(() => {
    if (!api || !session) return;
    api
      .get<Workspace>("/api/v1/workspaces/current")
      .then((w) => update({ ...session, workspace: w }))
      .catch(() => undefined);
  }, [api, session, update]);
  useEffect(refreshWorkspace, [session?.key, session?.workspace.id]);

  useEffect(() => {
    document.title = session ? `calleval · ${session.workspace.name}` : "calleval · sign in";
  }, [session?.workspace.name]);

  if (!session || !api) {
    return (
      <SignIn
        notice={notice}
        onSignedIn={(key, workspace, workspaces) => {
          setNotice(undefined);
          update({ key, workspace, workspaces });
          if (!location.hash) navigate(href("/calls"), true);
        }}
      />
    );
  }

  const [section, id, sub] = route.path;
  let page;
  if (section === "calls" && id) page = <CallPage id={id} />;
  else if ((section === "agents" || section === "scenarios") && id && sub === "trends") {
    page = <TrendsPage kind={section} id={id} route={route} />;
  } else if (section === "agents") page = id ? <AgentEditor id={id} /> : <AgentsPage route={route} />;
  else if (section === "metrics") page = id ? <MetricEditor id={id} /> : <MetricsPage route={route} />;
  else if (section === "scenarios") page = id ? <ScenarioEditor id={id} /> : <ScenariosPage route={route} />;
  else if (section === "batch_runs" && id) page = <BatchRunPage id={id} />;
  else if (section === "runs" && id) page = <RunPage id={id} />;
  else page = <CallsPage route={route} />;
  const current = (name: string) => (section === name || (!section && name === "calls") ? "page" : undefined);

  return (
    <SessionContext.Provider
      value={{
        api,
        session,
        signOut,
        refreshWorkspace,
        switchWorkspace: (w) => {
          update({ ...session, workspace: w });
          navigate(href("/calls"));
        },
      }}
    >
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.querySelector("main")?.focus(); }}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={href("/calls")}>calleval</a>
        <nav aria-label="Sections">
          <a href={href("/calls")} aria-current={current("calls")}>Calls</a>
          <a href={href("/agents")} aria-current={current("agents")}>Agents</a>
          <a href={href("/metrics")} aria-current={current("metrics")}>Metrics</a>
          <a href={href("/scenarios")} aria-current={current("scenarios") ?? current("batch_runs") ?? current("runs")}>Scenarios</a>
        </nav>
        <div class="workspace">
          {session.workspaces.length > 1 ? (
            <label>
              <span class="visually-hidden">Workspace</span>
              <select value={String(session.workspace.id)} onChange={(e) => {
                const w = session.workspaces.find((x) => String(x.id) === (e.target as HTMLSelectElement).value);
                if (w) update({ ...session, workspace: w });
              }}>
                {session.workspaces.map((w) => <option key={w.id} value={String(w.id)}>{w.name}</option>)}
              </select>
            </label>
          ) : (
            <span class="ws-name">{session.workspace.name}</span>
          )}
          <span class="credits" title="Credit balance">{session.workspace.credit_balance.toLocaleString()} credits</span>
          <button type="button" class="link" onClick={() => signOut()}>Sign out</button>
        </div>
      </header>
      <div id="main" tabIndex={-1}>{page}</div>
    </SessionContext.Provider>
  );
}

render(<App />, document.getElementById("app")!);
