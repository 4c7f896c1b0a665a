import { useCallback, useEffect, useState } from "preact/hooks";
import type { Json, Metric, MetricList, Pagination } from "../api";
import { Empty, ErrorBanner, Loading, Pager } from "../components";
import { href, navigate, type Route } from "../router";
import { useSession } from "../session";

interface AgentFull {
  id: number;
  name: string;
  phone_number?: string | null;
  telephony_carrier?: string | null;
  agent_source: string;
  assistant_id?: string | null;
  call_directions: string[];
  language_id?: number | null;
  instructions?: string | null;
  opening_message?: { mode?: string; text?: string; delay_ms?: number } | null;
  transport?: string | null;
  web_channel?: { [key: string]: Json } | null;
  max_call_duration_seconds?: number;
  disabled_metric_ids: number[];
  silence_threshold_ms?: number | null;
  model?: string | null;
  voice?: string | null;
}

interface Language { id: number; code: string; name: string }

// Each transport's keys (docs/api.md §5.2): plain ones, and credentials, which are write-only.
const TRANSPORTS: Record<string, { fields: string[]; secrets: string[] }> = {
  websocket: { fields: ["websocket_url", "protocol"], secrets: ["auth_token"] },
  livekit: { fields: ["room_management", "room_server_url", "bot_runner_url"], secrets: ["room_api_key", "room_api_secret"] },
  daily: { fields: ["room_management", "room_server_url", "bot_runner_url"], secrets: ["room_api_key", "room_api_secret"] },
  vapi: { fields: [], secrets: ["platform_api_key"] },
  retell: { fields: [], secrets: ["platform_api_key"] },
};

export function AgentsPage({ route }: { route: Route }) {
  const { api } = useSession();
  const page = Math.max(1, Number(route.query.get("page")) || 1);
  const [list, setList] = useState<{ data: AgentFull[]; pagination: Pagination } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = useCallback(() => api.get<{ data: AgentFull[]; pagination: Pagination }>(
    "/api/v1/agents", { page, per_page: 25 }).then(setList, setError), [api, page]);
  useEffect(() => void load(), [load]);
  return (
    <main class="page">
      <div class="title-row">
        <h1>Agents</h1>
        <a class="button" href={href("/agents/new")}>New agent</a>
      </div>
      <ErrorBanner error={error} onRetry={load} />
      {!list ? (!error && <Loading />) : list.data.length === 0 ? (
        <Empty>No agents yet. An agent is what your calls and scenarios are scored for.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="agents">
            <thead><tr><th scope="col">Agent</th><th scope="col">Reached by</th><th scope="col" class="opt">Source</th>
              <th scope="col">Trends</th></tr></thead>
            <tbody>
              {list.data.map((a) => (
                <tr key={a.id}>
                  <td><a href={href(`/agents/${a.id}`)}>{a.name}</a></td>
                  <td>{[a.phone_number && `phone ${a.phone_number}`, a.transport && `web (${a.transport})`].filter(Boolean).join(", ")}</td>
                  <td class="opt">{a.agent_source.replace("external_", "")}</td>
                  <td><a href={href(`/agents/${a.id}/trends`)}>Trends</a></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {list && <Pager page={list.pagination.current_page} totalPages={list.pagination.total_pages}
        onPage={(p) => navigate(href("/agents", { page: p }))} />}
    </main>
  );
}

export function AgentEditor({ id }: { id: string }) {
  const { api } = useSession();
  const isNew = id === "new";
  const [agent, setAgent] = useState<Partial<AgentFull> | null>(isNew ? {
    name: "", agent_source: "internal", call_directions: ["inbound"], language_id: 1, disabled_metric_ids: [],
  } : null);
  const [languages, setLanguages] = useState<Language[]>([]);
  // Credentials typed in this visit: sent once, never read back (the API says only whether set).
  const [secrets, setSecrets] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    if (!isNew) api.get<AgentFull>(`/api/v1/agents/${id}`).then(setAgent, setError);
    api.get<{ data: Language[] }>("/api/v1/languages").then((l) => setLanguages(l.data), () => undefined);
  }, [api, id]);
  if (!agent) return <main class="page"><ErrorBanner error={error} />{!error && <Loading />}</main>;
  const set = (p: Partial<AgentFull>) => { setAgent({ ...agent, ...p }); setSaved(false); };
  const channel = agent.web_channel ?? null;
  const transport = (channel?.transport as string | undefined) ?? "";
  const setChannel = (key: string, value: string) =>
    set({ web_channel: { ...(channel ?? { transport }), [key]: value || null } });
  const internal = agent.agent_source === "internal";

  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    let web: { [k: string]: Json } | null = null;
    if (transport) {
      web = { transport };
      for (const f of TRANSPORTS[transport].fields) if (channel?.[f]) web[f] = channel[f];
      for (const s of TRANSPORTS[transport].secrets) if (secrets[s]) web[s] = secrets[s];
    }
    const body: { [k: string]: Json } = {
      name: agent.name ?? "", agent_source: agent.agent_source ?? "internal",
      phone_number: agent.phone_number || null, call_directions: agent.call_directions ?? ["inbound"],
      assistant_id: internal ? null : agent.assistant_id || null,
      language_id: agent.language_id ?? null, instructions: agent.instructions || null,
      opening_message: { mode: agent.opening_message?.mode ?? "agent_speaks_first", text: agent.opening_message?.text ?? "" },
      max_call_duration_seconds: agent.max_call_duration_seconds ?? 600,
      model: agent.model || null, voice: agent.voice || null,
      web_channel: web,
    };
    if (isNew) {
      for (const k of Object.keys(body)) if (body[k] === null) delete body[k];
    }
    try {
      const result = isNew ? await api.write<AgentFull>("POST", "/api/v1/agents", body)
        : await api.write<AgentFull>("PATCH", `/api/v1/agents/${id}`, body, "query");
      setAgent(result);
      setSecrets({});
      setSaved(true);
      if (isNew) navigate(href(`/agents/${result.id}`), true);
    } catch (err) {
      setError(err);
    }
  };
  const remove = async () => {
    if (!confirm(`Delete the agent "${agent.name}" and its scenarios? Its calls are kept.`)) return;
    try {
      await api.write("DELETE", `/api/v1/agents/${id}`);
      navigate(href("/agents"));
    } catch (err) {
      setError(err);
    }
  };
  const text = (name: keyof AgentFull) => (e: Event) => set({ [name]: (e.target as HTMLInputElement).value } as Partial<AgentFull>);

  return (
    <main class="page">
      <p><a href={href("/agents")}>← Agents</a>{!isNew && <> · <a href={href(`/agents/${id}/trends`)}>Trends</a></>}</p>
      <h1>{isNew ? "New agent" : agent.name}</h1>
      <form class="editor" onSubmit={save} aria-label="Agent">
        <div class="row">
          <label>Name<input name="name" value={agent.name ?? ""} required onInput={text("name")} /></label>
          <label>Source<select name="agent_source" value={agent.agent_source} onChange={text("agent_source")}>
            <option value="internal">internal</option><option value="external_vapi">Vapi</option>
            <option value="external_retell">Retell</option></select></label>
          {!internal && <label>Platform agent id<input name="assistant_id" value={agent.assistant_id ?? ""} onInput={text("assistant_id")} /></label>}
        </div>
        <div class="row">
          <label>Phone number<input name="phone_number" type="tel" placeholder="+14155550123" value={agent.phone_number ?? ""}
            onInput={text("phone_number")} /></label>
          {agent.telephony_carrier && <p class="muted">Carrier: {agent.telephony_carrier}</p>}
          <fieldset class="inline"><legend>Directions</legend>
            {["inbound", "outbound"].map((d) => (
              <label class="check" key={d}><input type="checkbox" checked={(agent.call_directions ?? []).includes(d)}
                onChange={(e) => {
                  const on = (e.target as HTMLInputElement).checked;
                  const all = new Set(agent.call_directions ?? []);
                  if (on) all.add(d); else all.delete(d);
                  set({ call_directions: ["inbound", "outbound"].filter((x) => all.has(x)) });
                }} /> {d}</label>
            ))}
          </fieldset>
        </div>
        {internal && (
          <>
            <div class="row">
              <label>Language<select name="language_id" value={String(agent.language_id ?? "")}
                onChange={(e) => set({ language_id: Number((e.target as HTMLSelectElement).value) })}>
                {languages.map((l) => <option key={l.id} value={String(l.id)}>{l.name}</option>)}</select></label>
              <label>Model<input name="model" value={agent.model ?? ""} onInput={text("model")} /></label>
              <label>Voice<input name="voice" value={agent.voice ?? ""} onInput={text("voice")} /></label>
              <label>Max call (s)<input type="number" name="max_call_duration_seconds" min={1} max={7200}
                value={agent.max_call_duration_seconds ?? 600}
                onInput={(e) => set({ max_call_duration_seconds: Number((e.target as HTMLInputElement).value) })} /></label>
            </div>
            <label>Instructions (the system prompt)<textarea name="instructions" rows={6} value={agent.instructions ?? ""}
              onInput={text("instructions")} /></label>
            <label>Opening message<input name="opening_message" value={agent.opening_message?.text ?? ""}
              onInput={(e) => set({ opening_message: { ...agent.opening_message, text: (e.target as HTMLInputElement).value } })} /></label>
          </>
        )}
        <fieldset>
          <legend>Web channel</legend>
          <label>Transport<select name="transport" value={transport}
            onChange={(e) => {
              const t = (e.target as HTMLSelectElement).value;
              set({ web_channel: t ? { transport: t } : null });
              setSecrets({});
            }}>
            <option value="">none (phone only)</option>
            {Object.keys(TRANSPORTS).map((t) => <option key={t} value={t}>{t}</option>)}
          </select></label>
          {transport && TRANSPORTS[transport].fields.map((f) => (
            <label key={f}>{f.replace(/_/g, " ")}<input name={f} value={(channel?.[f] as string) ?? ""}
              onInput={(e) => setChannel(f, (e.target as HTMLInputElement).value)} /></label>
          ))}
          {transport && TRANSPORTS[transport].secrets.map((s) => (
            <label key={s}>{s.replace(/_/g, " ")} <span class="muted">
              ({channel?.[`${s}_set`] ? "set; type to replace" : "not set"})</span>
              <input name={s} type="password" autocomplete="off" value={secrets[s] ?? ""}
                onInput={(e) => { setSecrets({ ...secrets, [s]: (e.target as HTMLInputElement).value }); setSaved(false); }} />
            </label>
          ))}
        </fieldset>
        <div class="actions">
          <button type="submit">{isNew ? "Create agent" : "Save"}</button>
          {saved && <span class="saved" role="status">Saved</span>}
          {!isNew && <button type="button" class="danger" onClick={remove}>Delete</button>}
        </div>
        <ErrorBanner error={error} />
      </form>
      {!isNew && agent.id && <MetricToggles agentId={agent.id} disabled={agent.disabled_metric_ids ?? []}
        onChange={(ids) => setAgent({ ...agent, disabled_metric_ids: ids })} />}
    </main>
  );
}

// Which metrics run on this agent's calls: standard ones by key, custom ones by id.
function MetricToggles({ agentId, disabled, onChange }: {
  agentId: number; disabled: number[]; onChange: (ids: number[]) => void;
}) {
  const { api } = useSession();
  const [metrics, setMetrics] = useState<MetricList | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => { api.get<MetricList>("/api/v1/metrics", { per_page: 100 }).then(setMetrics, setError); }, [api]);
  if (!metrics) return <ErrorBanner error={error} />;
  const toggle = async (m: Metric, on: boolean) => {
    const next = new Set(disabled);
    if (on) next.delete(m.id); else next.add(m.id);
    try {
      if (m.is_custom) {
        const custom = [...metrics.global_metrics, ...metrics.data].map((x) => x.id).filter((i) => next.has(i));
        await api.write("PUT", `/api/v1/agents/${agentId}/llm_metrics`, { disabled_llm_metric_ids: custom }, "query");
      } else {
        const keys = metrics.standard_metrics.filter((x) => next.has(x.id)).map((x) => x.standard_metric_key);
        await api.write("PUT", `/api/v1/agents/${agentId}/standard_metrics`, { disabled_metric_keys: keys }, "query");
      }
      onChange([...next].sort((a, b) => a - b));
      setError(null);
    } catch (err) {
      setError(err);
    }
  };
  const box = (m: Metric) => (
    <label class="check" key={m.id}><input type="checkbox" checked={!disabled.includes(m.id)}
      onChange={(e) => toggle(m, (e.target as HTMLInputElement).checked)} /> {m.name}</label>
  );
  const custom = [...metrics.global_metrics, ...metrics.data];
  return (
    <section aria-labelledby="toggles-h">
      <h2 id="toggles-h">Metrics on this agent's calls</h2>
      <p class="muted">Changes apply to calls ingested from now on.</p>
      <ErrorBanner error={error} />
      <fieldset class="checks"><legend>Standard</legend>{metrics.standard_metrics.map(box)}</fieldset>
      {custom.length > 0 && <fieldset class="checks"><legend>Custom</legend>{custom.map(box)}</fieldset>}
    </section>
  );
}
