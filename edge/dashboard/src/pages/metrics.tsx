import { useEffect, useState } from "preact/hooks";
import {
  describeError, type Agent, type CallList, type CodeTest, type CodeValidation, type Metric,
  type MetricList, type OutcomeRule,
} from "../api";
import { Empty, ErrorBanner, Loading, Pager } from "../components";
import { href, navigate, type Route } from "../router";
import { useSession } from "../session";

const TYPES: Record<string, string> = {
  custom_evaluation: "LLM judge",
  "specific_text_/_phrase_check": "Phrase check",
  permitted_options_check: "Permitted options",
  code_as_judge: "Code",
};
const RESULT_TYPES = ["boolean", "rating", "enum", "numeric"];
const CONDITIONS = ["equals", "not_equals", "greater_than", "less_than", "at_least", "at_most", "contains"];
const OUTCOMES = ["meets_expectations", "exceeds_expectations", "requires_attention", "not_applicable"];

export function MetricsPage({ route }: { route: Route }) {
  const { api } = useSession();
  const page = Math.max(1, Number(route.query.get("page")) || 1);
  const [list, setList] = useState<MetricList | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = () =>
    api.get<MetricList>("/api/v1/metrics", { page, per_page: 25 }).then(setList, setError);
  useEffect(() => void load(), [api, page]);
  const custom = list ? [...list.global_metrics, ...list.data] : [];
  return (
    <main class="page">
      <div class="title-row">
        <h1>Metrics</h1>
        <a class="button" href={href("/metrics/new")}>New metric</a>
      </div>
      <ErrorBanner error={error} onRetry={load} />
      <GenerateMetrics onAdded={load} />
      {!list ? (
        !error && <Loading />
      ) : (
        <>
          <h2>Custom metrics</h2>
          {custom.length === 0 ? (
            <Empty>No custom metrics yet. Create one, or generate proposals for an agent above.</Empty>
          ) : (
            <div class="table-wrap">
              <table class="metrics">
                <thead>
                  <tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Result</th>
                    <th scope="col" class="opt">Applies to</th><th scope="col" class="opt">Credits</th></tr>
                </thead>
                <tbody>
                  {custom.map((m) => (
                    <tr key={m.id}>
                      <td><a href={href(`/metrics/${m.id}`)}>{m.name}</a></td>
                      <td>{TYPES[m.metrics_type] ?? m.metrics_type}</td>
                      <td>{m.result_type}</td>
                      <td class="opt">{m.mark_as_global ? "every agent" : `${m.agent_ids.length} agent(s)`}</td>
                      <td class="opt">{m.credit_cost}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          <Pager page={list.pagination.current_page} totalPages={list.pagination.total_pages}
            onPage={(p) => navigate(href("/metrics", { page: p }))} />
          <h2>Standard metrics</h2>
          <p class="muted">Measured on every call an agent does not switch them off for (Agents page).</p>
          <ul class="chips">
            {list.standard_metrics.map((m) => <li key={m.id}>{m.name}</li>)}
          </ul>
        </>
      )}
    </main>
  );
}

// "Generate with AI": the LLM proposes judge metrics for an agent; each can be added as it is.
function GenerateMetrics({ onAdded }: { onAdded: () => void }) {
  const { api } = useSession();
  const [agents, setAgents] = useState<Agent[]>([]);
  const [agentId, setAgentId] = useState("");
  const [proposals, setProposals] = useState<Partial<Metric>[] | null>(null);
  const [state, setState] = useState<{ busy?: boolean; error?: unknown }>({});
  useEffect(() => {
    api.get<{ data: Agent[] }>("/api/v1/agents", { per_page: 100 }).then((r) => setAgents(r.data), () => undefined);
  }, [api]);
  const generate = async (e: Event) => {
    e.preventDefault();
    setState({ busy: true });
    try {
      setProposals(await api.write<Partial<Metric>[]>("POST", "/api/v1/metrics/generate",
        { agent_id: Number(agentId), number_of_metrics: 3 }, "query"));
      setState({});
    } catch (err) {
      setState({ error: err });
    }
  };
  return (
    <details class="panel generate">
      <summary>Generate with AI</summary>
      <form onSubmit={generate} class="inline-form">
        <label>
          For agent
          <select value={agentId} onChange={(e) => setAgentId((e.target as HTMLSelectElement).value)} required>
            <option value="">Choose…</option>
            {agents.map((a) => <option key={a.id} value={String(a.id)}>{a.name}</option>)}
          </select>
        </label>
        <button type="submit" disabled={!agentId || state.busy}>{state.busy ? "Asking…" : "Propose metrics"}</button>
      </form>
      <ErrorBanner error={state.error} />
      {proposals && proposals.length === 0 && <p class="muted">No proposals came back.</p>}
      {proposals?.map((p, i) => (
        <div class="proposal" key={i}>
          <strong>{p.name}</strong> <span class="muted">{p.result_type}</span>
          <p>{p.description}</p>
          <button type="button" onClick={async () => {
            try {
              await api.write("POST", "/api/v1/metrics", p, "query");
              setProposals(proposals.filter((_, k) => k !== i));
              onAdded();
            } catch (err) {
              setState({ error: err });
            }
          }}>Add</button>
        </div>
      ))}
    </details>
  );
}

type Draft = Partial<Metric> & { metrics_type: string; result_type: string };
const lines = (v?: string[] | null) => (v ?? []).join("\n");
const unlines = (s: string) => s.split("\n").map((x) => x.trim()).filter(Boolean);

export function MetricEditor({ id }: { id: string }) {
  const { api } = useSession();
  const isNew = id === "new";
  const [draft, setDraft] = useState<Draft | null>(isNew ? {
    name: "", metrics_type: "specific_text_/_phrase_check", result_type: "boolean", phrases: [],
    structured_output: [], mark_as_global: true,
  } : null);
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    if (!isNew) api.get<Metric>(`/api/v1/metrics/${id}`).then((m) => setDraft(m), setError);
  }, [api, id]);
  if (!draft) return <main class="page"><ErrorBanner error={error} />{!error && <Loading />}</main>;
  const set = (patch: Partial<Draft>) => {
    setDraft({ ...draft, ...patch });
    setSaved(false);
  };
  const standard = draft.metrics_type === "standard";

  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      const body = { ...draft };
      if (body.result_type !== "enum") delete body.enum_values;
      const result = isNew
        ? await api.write<Metric>("POST", "/api/v1/metrics", body, "query")
        : await api.write<Metric>("PUT", `/api/v1/metrics/${id}`, body, "query");
      setDraft(result);
      setSaved(true);
      if (isNew) navigate(href(`/metrics/${result.id}`), true);
    } catch (err) {
      setError(err);
    }
  };
  const remove = async () => {
    if (!confirm(`Delete the metric "${draft.name}"?`)) return;
    try {
      await api.write("DELETE", `/api/v1/metrics/${id}`);
      navigate(href("/metrics"));
    } catch (err) {
      setError(err);
    }
  };

  return (
    <main class="page">
      <p><a href={href("/metrics")}>← Metrics</a></p>
      <h1>{isNew ? "New metric" : draft.name}</h1>
      {standard ? (
        <p class="muted">A standard metric: measured by the service, not editable.</p>
      ) : (
        <form class="editor" onSubmit={save} aria-label="Metric">
          <label>Name<input name="name" value={draft.name ?? ""} required
            onInput={(e) => set({ name: (e.target as HTMLInputElement).value })} /></label>
          <label>Description<textarea name="description" rows={2} value={draft.description ?? ""}
            onInput={(e) => set({ description: (e.target as HTMLTextAreaElement).value })} /></label>
          <div class="row">
            <label>Type
              <select name="metrics_type" value={draft.metrics_type} disabled={!isNew}
                onChange={(e) => {
                  const t = (e.target as HTMLSelectElement).value;
                  set({ metrics_type: t, result_type: t.includes("check") ? "boolean" : draft.result_type });
                }}>
                {Object.entries(TYPES).map(([k, v]) => <option key={k} value={k}>{v}</option>)}
              </select>
            </label>
            <label>Result
              <select name="result_type" value={draft.result_type} disabled={draft.metrics_type.includes("check")}
                onChange={(e) => set({ result_type: (e.target as HTMLSelectElement).value })}>
                {RESULT_TYPES.map((t) => <option key={t} value={t}>{t}</option>)}
              </select>
            </label>
            <label>Credits per call<input type="number" min={0} max={1000} name="credit_cost"
              value={draft.credit_cost ?? ""} onInput={(e) => {
                const v = (e.target as HTMLInputElement).value;
                set({ credit_cost: v === "" ? undefined : Number(v) });
              }} /></label>
            <label class="check"><input type="checkbox" name="mark_as_global" checked={!!draft.mark_as_global}
              onChange={(e) => set({ mark_as_global: (e.target as HTMLInputElement).checked })} /> Every agent</label>
          </div>
          {draft.result_type === "enum" && (
            <label>Values (one per line)<textarea name="enum_values" rows={3} value={lines(draft.enum_values)}
              onInput={(e) => set({ enum_values: unlines((e.target as HTMLTextAreaElement).value) })} /></label>
          )}
          {draft.metrics_type === "custom_evaluation" && (
            <label>Instructions for the judge<textarea name="llm_instructions" rows={6} value={draft.llm_instructions ?? ""}
              onInput={(e) => set({ llm_instructions: (e.target as HTMLTextAreaElement).value })} /></label>
          )}
          {draft.metrics_type === "specific_text_/_phrase_check" && (
            <>
              <label>Phrases (one per line)<textarea name="phrases" rows={4} value={lines(draft.phrases)}
                onInput={(e) => set({ phrases: unlines((e.target as HTMLTextAreaElement).value) })} /></label>
              <div class="row">
                <label>Match<select name="match" value={draft.match ?? "any"}
                  onChange={(e) => set({ match: (e.target as HTMLSelectElement).value })}>
                  <option value="any">any phrase</option><option value="all">all phrases</option></select></label>
                <Speaker draft={draft} set={set} />
              </div>
            </>
          )}
          {draft.metrics_type === "permitted_options_check" && (
            <>
              <label>Permitted options (one per line)<textarea name="permitted_options" rows={4}
                value={lines(draft.permitted_options)}
                onInput={(e) => set({ permitted_options: unlines((e.target as HTMLTextAreaElement).value) })} /></label>
              <label>Forbidden options (one per line)<textarea name="forbidden_options" rows={3}
                value={lines(draft.forbidden_options)}
                onInput={(e) => set({ forbidden_options: unlines((e.target as HTMLTextAreaElement).value) })} /></label>
              <Speaker draft={draft} set={set} />
            </>
          )}
          {draft.metrics_type === "code_as_judge" && (
            <CodePanel draft={draft} onCode={(code) => set({ code_snippet: code })} />
          )}
          <Rules rules={draft.structured_output ?? []} onChange={(r) => set({ structured_output: r })} />
          <div class="actions">
            <button type="submit">{isNew ? "Create metric" : "Save"}</button>
            {saved && <span class="saved" role="status">Saved</span>}
            {!isNew && <button type="button" class="danger" onClick={remove}>Delete</button>}
          </div>
          <ErrorBanner error={error} />
        </form>
      )}
    </main>
  );
}

function Speaker({ draft, set }: { draft: Draft; set: (p: Partial<Draft>) => void }) {
  return (
    <label>Speaker<select name="speaker" value={draft.speaker ?? "AI Assistant"}
      onChange={(e) => set({ speaker: (e.target as HTMLSelectElement).value })}>
      <option value="AI Assistant">agent</option><option value="User">caller</option><option value="any">anyone</option>
    </select></label>
  );
}

// Outcome rules (structured_output): the first that holds classifies the result.
function Rules({ rules, onChange }: { rules: OutcomeRule[]; onChange: (r: OutcomeRule[]) => void }) {
  const update = (i: number, patch: Partial<OutcomeRule>) =>
    onChange(rules.map((r, k) => (k === i ? { ...r, ...patch } : r)));
  return (
    <fieldset class="rules">
      <legend>Outcome rules</legend>
      {rules.length === 0 && <p class="muted">No rules: results are reported without an outcome.</p>}
      {rules.map((r, i) => (
        <div class="row" key={i}>
          <label>When result<select value={r.condition} onChange={(e) => update(i, { condition: (e.target as HTMLSelectElement).value })}>
            {CONDITIONS.map((c) => <option key={c} value={c}>{c.replace(/_/g, " ")}</option>)}</select></label>
          <label>Value<input value={r.as_metrics_expected_value}
            onInput={(e) => update(i, { as_metrics_expected_value: (e.target as HTMLInputElement).value })} /></label>
          <label>Outcome<select value={r.outcome_classification}
            onChange={(e) => update(i, { outcome_classification: (e.target as HTMLSelectElement).value })}>
            {OUTCOMES.map((o) => <option key={o} value={o}>{o.replace(/_/g, " ")}</option>)}</select></label>
          <button type="button" class="link" onClick={() => onChange(rules.filter((_, k) => k !== i))}>Remove</button>
        </div>
      ))}
      <button type="button" class="secondary" onClick={() => onChange([...rules,
        { condition: "equals", as_metrics_expected_value: "true", outcome_classification: "meets_expectations" }])}>
        Add rule
      </button>
    </fieldset>
  );
}

// The code editor: validated in the sandbox (syntax, and that metric['result'] is assigned) and
// tested against a chosen call of the workspace.
function CodePanel({ draft, onCode }: { draft: Draft; onCode: (code: string) => void }) {
  const { api } = useSession();
  const [validation, setValidation] = useState<CodeValidation | null>(null);
  const [calls, setCalls] = useState<CallList | null>(null);
  const [callId, setCallId] = useState("");
  const [test, setTest] = useState<CodeTest | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    api.get<CallList>("/api/public/v1/calls", { per_page: 50 }).then((c) => {
      setCalls(c);
      if (c.data[0]) setCallId(String(c.data[0].id));
    }, () => undefined);
  }, [api]);
  const code = draft.code_snippet ?? "";
  const run = async (what: "validate" | "test") => {
    setBusy(true);
    setError(null);
    try {
      if (what === "validate") {
        setValidation(await api.write<CodeValidation>("POST", "/api/v1/metrics/validate_code", { code }, "query"));
      } else {
        setTest(await api.write<CodeTest>("POST", "/api/v1/metrics/test_code", {
          code, call_observation_id: Number(callId), result_type: draft.result_type,
          enum_values: draft.result_type === "enum" ? draft.enum_values : undefined,
          structured_output: draft.structured_output,
        }, "query"));
      }
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="code-panel">
      <label>Code (Python; set metric['result'], optionally metric['explanation'])
        <textarea name="code_snippet" class="code" rows={12} spellcheck={false} value={code}
          onInput={(e) => { onCode((e.target as HTMLTextAreaElement).value); setValidation(null); }}
          onKeyDown={(e) => {
            // Tab indents in the editor; Escape then Tab leaves it (keyboard users are not trapped).
            if (e.key === "Tab" && !e.shiftKey && !(e.target as HTMLElement).dataset.escaped) {
              e.preventDefault();
              const t = e.target as HTMLTextAreaElement;
              const at = t.selectionStart;
              onCode(t.value.slice(0, at) + "    " + t.value.slice(t.selectionEnd));
              requestAnimationFrame(() => t.setSelectionRange(at + 4, at + 4));
            }
            if (e.key === "Escape") (e.target as HTMLElement).dataset.escaped = "1";
          }}
          onBlur={(e) => delete (e.target as HTMLElement).dataset.escaped} />
      </label>
      <p class="hint">Tab indents; press Escape, then Tab, to move on.</p>
      <div class="row">
        <button type="button" class="secondary" disabled={busy || !code} onClick={() => run("validate")}>Validate</button>
        <label>Test against call
          <select name="test_call" value={callId} onChange={(e) => setCallId((e.target as HTMLSelectElement).value)}>
            {calls?.data.map((c) => <option key={c.id} value={String(c.id)}>{c.call_identifier}</option>)}
          </select>
        </label>
        <button type="button" class="secondary" disabled={busy || !code || !callId} onClick={() => run("test")}>Run test</button>
      </div>
      {error ? <p class="error" role="alert">{describeError(error)}</p> : null}
      {validation && (
        <div class={validation.valid ? "result ok" : "result bad"} role="status" data-testid="validation">
          {validation.valid ? "The code is valid." : validation.errors.map((e, i) => (
            <p key={i}>{e.line ? `Line ${e.line}${e.column ? `, column ${e.column}` : ""}: ` : ""}{e.message}</p>
          ))}
        </div>
      )}
      {test && (
        <div class={test.error ? "result bad" : "result ok"} role="status" data-testid="test-result">
          <p><strong>Result:</strong> {test.metric_result ?? "none"}{test.structured_output?.outcome_classification &&
            ` (${test.structured_output.outcome_classification.replace(/_/g, " ")})`}</p>
          {test.explanation && <p><strong>Explanation:</strong> {test.explanation}</p>}
          {test.error && <p><strong>{test.error.type}</strong>{test.error.line ? ` (line ${test.error.line})` : ""}: {test.error.message}</p>}
          <p class="muted">On call {test.call.identifier} in {Math.round(test.execution_time_ms)} ms.</p>
        </div>
      )}
    </div>
  );
}
