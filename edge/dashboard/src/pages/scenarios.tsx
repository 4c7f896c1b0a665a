import { useCallback, useEffect, useState } from "preact/hooks";
import type { Agent, BatchRun, BatchRunComparison, ComparedFigure, Metric, MetricList, Pagination, Run, Scenario } from "../api";
import { Empty, ErrorBanner, Loading, Pager, StatusBadge } from "../components";
import { formatDateTime } from "../format";
import { usePolling } from "../poll";
import { href, navigate, type Route } from "../router";
import { useSession } from "../session";

const CHANNELS = ["text", "web", "phone"];

function useAgents(): Agent[] {
  const { api } = useSession();
  const [agents, setAgents] = useState<Agent[]>([]);
  useEffect(() => {
    api.get<{ data: Agent[] }>("/api/v1/agents", { per_page: 100 }).then((r) => setAgents(r.data), () => undefined);
  }, [api]);
  return agents;
}

export function ScenariosPage({ route }: { route: Route }) {
  const { api } = useSession();
  const agents = useAgents();
  const agentId = route.query.get("agent_id") ?? "";
  const page = Math.max(1, Number(route.query.get("page")) || 1);
  const [list, setList] = useState<{ data: Scenario[]; pagination: Pagination } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [chosen, setChosen] = useState<Set<number>>(new Set());
  const [channel, setChannel] = useState("text");
  const [concurrency, setConcurrency] = useState(4);
  const [repeat, setRepeat] = useState(1);
  const [baseline, setBaseline] = useState("");
  const load = useCallback(() =>
    api.get<{ data: Scenario[]; pagination: Pagination }>("/api/v1/scenarios",
      { agent_id: agentId || undefined, page, per_page: 25 }).then(setList, setError), [api, agentId, page]);
  useEffect(() => void load(), [load]);
  const agentName = (id: number) => agents.find((a) => a.id === id)?.name ?? `Agent ${id}`;
  const picked = list?.data.filter((s) => chosen.has(s.id)) ?? [];
  const oneAgent = picked.length > 0 && picked.every((s) => s.agent_id === picked[0].agent_id);

  const runOne = async (s: Scenario) => {
    try {
      const run = await api.write<Run>("POST", `/api/v1/scenarios/${s.id}/run`, { channel });
      navigate(href(`/runs/${run.id}`));
    } catch (err) {
      setError(err);
    }
  };
  const runBatch = async () => {
    try {
      const batch = await api.write<BatchRun>("POST", "/api/v1/batch_runs", {
        agent_id: picked[0].agent_id, scenario_ids: picked.map((s) => s.id), channel, concurrency, repeat,
        baseline_batch_run_id: baseline ? Number(baseline) : undefined,
      });
      navigate(href(`/batch_runs/${batch.id}`));
    } catch (err) {
      setError(err);
    }
  };

  return (
    <main class="page">
      <div class="title-row">
        <h1>Scenarios</h1>
        <a class="button" href={href("/scenarios/new")}>New scenario</a>
      </div>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>Agent
          <select name="agent_id" value={agentId}
            onChange={(e) => navigate(href("/scenarios", { agent_id: (e.target as HTMLSelectElement).value || undefined }), true)}>
            <option value="">All agents</option>
            {agents.map((a) => <option key={a.id} value={String(a.id)}>{a.name}</option>)}
          </select>
        </label>
        <label>Channel
          <select name="channel" value={channel} onChange={(e) => setChannel((e.target as HTMLSelectElement).value)}>
            {CHANNELS.map((c) => <option key={c} value={c}>{c}</option>)}
          </select>
        </label>
        <label>Concurrency
          <input type="number" name="concurrency" min={1} max={32} value={concurrency}
            onInput={(e) => setConcurrency(Number((e.target as HTMLInputElement).value) || 1)} />
        </label>
        <label>Repeat
          <input type="number" name="repeat" min={1} max={50} value={repeat}
            onInput={(e) => setRepeat(Number((e.target as HTMLInputElement).value) || 1)} />
        </label>
        <label>Baseline batch
          <input type="number" name="baseline_batch_run_id" min={1} placeholder="none" value={baseline}
            onInput={(e) => setBaseline((e.target as HTMLInputElement).value)} />
        </label>
        <button type="button" disabled={!oneAgent} onClick={runBatch}
          title={picked.length > 0 && !oneAgent ? "A batch runs scenarios of one agent" : undefined}>
          Run {picked.length || ""} selected as a batch
        </button>
      </form>
      <ErrorBanner error={error} onRetry={load} />
      {!list ? (!error && <Loading />) : list.data.length === 0 ? (
        <Empty>No scenarios{agentId ? " for this agent" : ""} yet. A scenario is a simulated caller with a goal or a script.</Empty>
      ) : (
        <div class="table-wrap">
          <table class="scenarios">
            <thead><tr><th scope="col"><span class="visually-hidden">Select</span></th><th scope="col">Scenario</th>
              <th scope="col">Agent</th><th scope="col" class="opt">Caller</th><th scope="col">Run</th></tr></thead>
            <tbody>
              {list.data.map((s) => (
                <tr key={s.id}>
                  <td><input type="checkbox" aria-label={`Select ${s.name}`} checked={chosen.has(s.id)}
                    onChange={(e) => {
                      const next = new Set(chosen);
                      if ((e.target as HTMLInputElement).checked) next.add(s.id); else next.delete(s.id);
                      setChosen(next);
                    }} /></td>
                  <td><a href={href(`/scenarios/${s.id}`)}>{s.name}</a></td>
                  <td>{agentName(s.agent_id)}</td>
                  <td class="opt muted">{s.caller_script.length ? `script of ${s.caller_script.length} lines` : s.goal}</td>
                  <td><button type="button" class="secondary" onClick={() => runOne(s)}>Run</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {list && <Pager page={list.pagination.current_page} totalPages={list.pagination.total_pages}
        onPage={(p) => navigate(href("/scenarios", { agent_id: agentId || undefined, page: p }))} />}
    </main>
  );
}

export function ScenarioEditor({ id }: { id: string }) {
  const { api } = useSession();
  const agents = useAgents();
  const isNew = id === "new";
  const [s, setS] = useState<Partial<Scenario> | null>(isNew ? { name: "", caller_script: [], metric_ids: [], max_turns: 20 } : null);
  const [metrics, setMetrics] = useState<Metric[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    if (!isNew) api.get<Scenario>(`/api/v1/scenarios/${id}`).then(setS, setError);
    api.get<MetricList>("/api/v1/metrics", { per_page: 100 }).then(
      (m) => setMetrics([...m.standard_metrics, ...m.global_metrics, ...m.data]), () => undefined);
  }, [api, id]);
  if (!s) return <main class="page"><ErrorBanner error={error} />{!error && <Loading />}</main>;
  const set = (p: Partial<Scenario>) => { setS({ ...s, ...p }); setSaved(false); };
  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      const body = { agent_id: s.agent_id, name: s.name, persona: s.persona || null, goal: s.goal || null,
        expected_outcome: s.expected_outcome || null, caller_script: s.caller_script, max_turns: s.max_turns,
        metric_ids: s.metric_ids };
      const result = isNew ? await api.write<Scenario>("POST", "/api/v1/scenarios", body)
        : await api.write<Scenario>("PATCH", `/api/v1/scenarios/${id}`, body, "query");
      setS(result);
      setSaved(true);
      if (isNew) navigate(href(`/scenarios/${result.id}`), true);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <main class="page">
      <p><a href={href("/scenarios")}>← Scenarios</a>{!isNew && <> · <a href={href(`/scenarios/${id}/trends`)}>Trends</a></>}</p>
      <h1>{isNew ? "New scenario" : s.name}</h1>
      <form class="editor" onSubmit={save} aria-label="Scenario">
        <div class="row">
          <label>Agent<select name="agent_id" value={s.agent_id ? String(s.agent_id) : ""} required
            onChange={(e) => set({ agent_id: Number((e.target as HTMLSelectElement).value) })}>
            <option value="">Choose…</option>
            {agents.map((a) => <option key={a.id} value={String(a.id)}>{a.name}</option>)}</select></label>
          <label>Name<input name="name" value={s.name ?? ""} required onInput={(e) => set({ name: (e.target as HTMLInputElement).value })} /></label>
          <label>Max turns<input type="number" name="max_turns" min={1} max={200} value={s.max_turns ?? 20}
            onInput={(e) => set({ max_turns: Number((e.target as HTMLInputElement).value) })} /></label>
        </div>
        <label>Caller script (one line per turn; the caller says exactly these)<textarea name="caller_script" rows={5}
          value={(s.caller_script ?? []).join("\n")}
          onInput={(e) => set({ caller_script: (e.target as HTMLTextAreaElement).value.split("\n").filter((l) => l.trim()) })} /></label>
        <label>Or a goal, for an LLM-played caller<textarea name="goal" rows={2} value={s.goal ?? ""}
          onInput={(e) => set({ goal: (e.target as HTMLTextAreaElement).value })} /></label>
        <label>Persona<textarea name="persona" rows={2} value={s.persona ?? ""}
          onInput={(e) => set({ persona: (e.target as HTMLTextAreaElement).value })} /></label>
        <fieldset class="checks">
          <legend>Metrics that decide a pass</legend>
          {metrics.map((m) => (
            <label class="check" key={m.id}><input type="checkbox" checked={(s.metric_ids ?? []).includes(m.id)}
              onChange={(e) => {
                const on = (e.target as HTMLInputElement).checked;
                const ids = new Set(s.metric_ids ?? []);
                if (on) ids.add(m.id); else ids.delete(m.id);
                set({ metric_ids: [...ids].sort((a, b) => a - b) });
              }} /> {m.name}</label>
          ))}
        </fieldset>
        <div class="actions">
          <button type="submit">{isNew ? "Create scenario" : "Save"}</button>
          {saved && <span class="saved" role="status">Saved</span>}
        </div>
        <ErrorBanner error={error} />
      </form>
    </main>
  );
}

function RunsTable({ runs }: { runs: Run[] }) {
  return (
    <div class="table-wrap">
      <table class="runs">
        <thead><tr><th scope="col">Run</th><th scope="col">Status</th><th scope="col">Passed</th>
          <th scope="col" class="opt">Ended</th><th scope="col">Call</th></tr></thead>
        <tbody>
          {runs.map((r) => (
            <tr key={r.id} data-run-id={r.id}>
              <td><a href={href(`/runs/${r.id}`)}>#{r.id}</a> <span class="muted">scenario {r.scenario_id}</span></td>
              <td><StatusBadge status={r.status} /></td>
              <td>{r.passed === true ? "passed" : r.passed === false ? "not passed" : "–"}</td>
              <td class="opt">{r.end_reason ?? r.error ?? ""}</td>
              <td>{r.call_id ? <a href={href(`/calls/${r.call_id}`)}>call {r.call_id}</a> : "–"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function percent(v: number | null): string {
  return v === null ? "–" : `${Math.round(v * 1000) / 10}%`;
}

/** A figure's value: a pass rate as a percentage, a mean as is (ms for latency). */
function figureValue(f: ComparedFigure, v: number | null, signed = false): string {
  if (v === null) return "–";
  const sign = signed && v > 0 ? "+" : "";
  if (f.kind === "pass_rate") return sign + (signed ? `${Math.round(v * 1000) / 10} pts` : percent(v));
  return sign + String(Math.round(v * 10) / 10);
}

function VerdictBadge({ verdict }: { verdict: string }) {
  return <span class={`badge verdict-${verdict}`}>{verdict}</span>;
}

/** The batch compared with its baseline: one row per scenario and figure, with its verdict. */
function ComparisonTable({ comparison }: { comparison: BatchRunComparison }) {
  return (
    <section class="comparison" aria-label="Comparison with the baseline">
      <h2>Compared with <a href={href(`/batch_runs/${comparison.baseline_batch_run_id}`)}>batch run
        #{comparison.baseline_batch_run_id}</a> <VerdictBadge verdict={comparison.verdict} /></h2>
      {!comparison.complete && <p class="muted">Not every run has ended yet: the figures cover the runs done so far.</p>}
      {comparison.scenarios.length === 0 ? <Empty>No scenario was run in both batches.</Empty> : (
        <div class="table-wrap">
          <table class="comparison">
            <thead><tr><th scope="col">Scenario</th><th scope="col">Figure</th><th scope="col">Baseline</th>
              <th scope="col">This batch</th><th scope="col">Difference (95% interval)</th>
              <th scope="col" class="opt">p</th><th scope="col" class="opt">Runs</th><th scope="col">Verdict</th></tr></thead>
            <tbody>
              {comparison.scenarios.flatMap((sc) => sc.metrics.map((f) => (
                <tr key={`${sc.scenario_id}-${f.metric}`} data-verdict={f.verdict}>
                  <td><a href={href(`/scenarios/${sc.scenario_id}`)}>#{sc.scenario_id}</a></td>
                  <td>{f.metric}</td>
                  <td>{figureValue(f, f.baseline)}</td>
                  <td>{figureValue(f, f.current)}</td>
                  <td>{figureValue(f, f.difference, true)}{f.ci_low !== null && f.ci_high !== null &&
                    <span class="muted"> ({figureValue(f, f.ci_low, true)} to {figureValue(f, f.ci_high, true)})</span>}</td>
                  <td class="opt">{f.p_value === null ? "–" : f.p_value < 0.0001 ? "<0.0001" : f.p_value.toFixed(4)}</td>
                  <td class="opt">{f.baseline_runs} / {f.current_runs}</td>
                  <td><VerdictBadge verdict={f.verdict} /></td>
                </tr>
              )))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function BatchRunPage({ id }: { id: string }) {
  const { api } = useSession();
  const [batch, setBatch] = useState<BatchRun | null>(null);
  const [runs, setRuns] = useState<Run[]>([]);
  const [comparison, setComparison] = useState<BatchRunComparison | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = useCallback(async () => {
    const b = await api.get<BatchRun>(`/api/v1/batch_runs/${id}`);
    const r = await api.get<{ data: Run[] }>("/api/v1/runs", { batch_run_id: id, per_page: 100 });
    // A batch with a baseline: its comparison, read again while runs end.
    if (b.baseline_batch_run_id !== null) {
      setComparison(await api.get<BatchRunComparison>(`/api/v1/batch_runs/${id}/comparison`));
    }
    let changed = true;
    setBatch((before) => {
      changed = JSON.stringify(before?.summary) !== JSON.stringify(b.summary) || before?.status !== b.status;
      return b;
    });
    setRuns(r.data);
    setError(null);
    return changed;
  }, [api, id]);
  useEffect(() => void load().catch(setError), [load]);
  usePolling(load, { active: !!batch && batch.status !== "completed", minMs: 1000 });
  if (!batch) return <main class="page"><ErrorBanner error={error} />{!error && <Loading />}</main>;
  const s = batch.summary;
  const done = s.completed + s.failed;
  return (
    <main class="page">
      <p><a href={href("/scenarios")}>← Scenarios</a></p>
      <h1>Batch run #{batch.id} <StatusBadge status={batch.status} /></h1>
      <ErrorBanner error={error} />
      <div class="progress-box">
        <progress max={s.total} value={done} aria-label="Runs ended">{done} of {s.total}</progress>
        <p><strong>{done}</strong> of {s.total} runs ended · {s.failed} could not run</p>
        <p class="pass-rate" data-testid="pass-rate">Pass rate: <strong>{s.pass_rate === null ? "–" :
          `${Math.round(s.pass_rate * 100)}%`}</strong> ({s.passed} of {s.completed} completed runs passed)</p>
        <p class="muted">Channel {batch.channel}, {batch.concurrency} at a time{batch.repeat > 1 ?
          `, each scenario ${batch.repeat} times` : ""}, started {formatDateTime(batch.created_at)}.</p>
      </div>
      {comparison && <ComparisonTable comparison={comparison} />}
      <RunsTable runs={runs} />
    </main>
  );
}

export function RunPage({ id }: { id: string }) {
  const { api } = useSession();
  const [run, setRun] = useState<Run | null>(null);
  const [error, setError] = useState<unknown>(null);
  const load = useCallback(async () => {
    const r = await api.get<Run>(`/api/v1/runs/${id}`);
    let changed = true;
    setRun((before) => { changed = before?.status !== r.status; return r; });
    return changed;
  }, [api, id]);
  useEffect(() => void load().catch(setError), [load]);
  usePolling(load, { active: !!run && !["completed", "failed", "cancelled"].includes(run.status), minMs: 1000 });
  if (!run) return <main class="page"><ErrorBanner error={error} />{!error && <Loading />}</main>;
  return (
    <main class="page">
      <p><a href={href("/scenarios")}>← Scenarios</a></p>
      <h1>Run #{run.id} <StatusBadge status={run.status} /></h1>
      <RunsTable runs={[run]} />
      {run.error && <p class="error" role="alert">{run.error}</p>}
    </main>
  );
}
