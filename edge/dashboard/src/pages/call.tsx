import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { isFinal, type Agent, type Call, type Json, type MetricResult, type Scenario, type StandardMetricResult } from "../api";
import { ErrorBanner, Loading, StatusBadge } from "../components";
import { formatClock, formatDateTime, formatDuration } from "../format";
import { headlineText, STANDARD_METRICS } from "../metrics";
import { usePolling, useRetryAfter } from "../poll";
import { href } from "../router";
import { useSession } from "../session";
import { callLength, Timeline } from "../timeline";
import { WaveformView } from "../waveform";

export function CallPage({ id }: { id: string }) {
  const { api } = useSession();
  const [call, setCall] = useState<Call | null>(null);
  const [agent, setAgent] = useState<Agent | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [position, setPosition] = useState(0);
  const audio = useRef<HTMLAudioElement>(null);

  const load = useCallback(async () => {
    const next = await api.get<Call>(`/api/public/v1/calls/${encodeURIComponent(id)}`);
    let changed = true;
    setCall((before) => {
      changed = !before || before.updated_at !== next.updated_at;
      // A fresh presigned link each time would reload the player: keep the first while valid.
      if (before && before.presigned_recording_url && next.presigned_recording_url) {
        next.presigned_recording_url = before.presigned_recording_url;
      }
      return next;
    });
    setError(null);
    return changed;
  }, [api, id]);

  useEffect(() => {
    setCall(null);
    load().catch(setError);
  }, [load]);
  useEffect(() => {
    if (!call) return;
    api.get<Agent>(`/api/v1/agents/${call.agent_id}`).then(setAgent).catch(() => setAgent(null));
  }, [api, call?.agent_id]);
  usePolling(load, { active: !!call && !isFinal(call) });
  useRetryAfter(error, load, setError);

  const seek = (seconds: number, play = false) => {
    const a = audio.current;
    setPosition(seconds);
    if (!a) return;
    a.currentTime = seconds;
    if (play) void a.play().catch(() => undefined);
  };

  if (!call) {
    return (
      <main class="page">
        <p><a href={href("/calls")}>← Calls</a></p>
        {error ? <ErrorBanner error={error} onRetry={() => load().catch(setError)} /> : <Loading />}
      </main>
    );
  }
  const length = callLength(call);
  return (
    <main class="page call">
      <p><a href={href("/calls")}>← Calls</a></p>
      <header class="call-head">
        <h1>{call.call_identifier}</h1>
        <dl class="facts">
          <div><dt>Analysis</dt><dd><StatusBadge status={call.analysis_status} /></dd></div>
          <div><dt>Transcription</dt><dd><StatusBadge status={call.transcription_status} /></dd></div>
          <div><dt>Agent</dt><dd>{agent?.name ?? `Agent ${call.agent_id}`}</dd></div>
          <div><dt>When</dt><dd>{formatDateTime(call.call_timestamp)}</dd></div>
          <div><dt>Length</dt><dd>{formatDuration(length || call.duration_seconds)}</dd></div>
          <div><dt>Type</dt><dd>{call.observation_type}, {call.call_direction}</dd></div>
          <div><dt>Credits used</dt><dd>{call.credits_used}</dd></div>
          {call.call_end_reason && <div><dt>Ended</dt><dd>{call.call_end_reason}</dd></div>}
          {call.version && <div><dt>Agent version</dt><dd>{call.version}</dd></div>}
          {call.platform_version && (
            <div><dt>Platform version</dt><dd>{call.platform_version}</dd></div>
          )}
        </dl>
      </header>
      <ErrorBanner error={error} />
      {call.failure_reason && (
        <div class="error" role="alert">
          <strong>{call.failure_reason.replace(/_/g, " ")}</strong>
          {call.failure_message && <span>: {call.failure_message}</span>}
        </div>
      )}
      {call.presigned_recording_url && (
        <section class="player" aria-label="Recording">
          <WaveformView callId={call.id} position={position} length={length} onSeek={(s) => seek(s)} />
          <audio ref={audio} controls preload="metadata" src={call.presigned_recording_url}
            onTimeUpdate={(e) => setPosition((e.target as HTMLAudioElement).currentTime)} />
        </section>
      )}
      <Timeline call={call} length={length} position={position} onSeek={(s) => seek(s)} />
      <div class="columns">
        <section class="transcript" aria-labelledby="transcript-h">
          <h2 id="transcript-h">
            Transcript{" "}
            {call.transcript_source && <span class="muted">({call.transcript_source})</span>}
          </h2>
          {call.transcript.length === 0 ? (
            <p class="muted">
              {call.transcription_status === "completed" ? "No words in this call." : `Transcription ${call.transcription_status}.`}
            </p>
          ) : (
            <ol>
              {call.transcript.map((t, i) => (
                <li key={i} class={`turn role-${t.role.replace(/\s+/g, "-").toLowerCase()}`}>
                  {t.start_time !== undefined && call.presigned_recording_url ? (
                    <button type="button" class="time" onClick={() => seek(t.start_time!, true)}
                      aria-label={`Play from ${formatClock(t.start_time)}`}>
                      {formatClock(t.start_time)}
                    </button>
                  ) : (
                    <span class="time">{formatClock(t.start_time)}</span>
                  )}
                  <span class="who">{t.role === "AI Assistant" ? "Agent" : t.role === "User" ? "Caller" : t.role}</span>
                  <span class="words">{t.content}</span>
                </li>
              ))}
            </ol>
          )}
        </section>
        <aside class="side">
          <EditCall call={call} onSaved={setCall} />
          {call.transcript.some((t) => t.role === "User") && <MakeScenario call={call} />}
        </aside>
      </div>
      {call.metric_results.some((m) => m.metrics_type !== "standard") && (
        <section aria-labelledby="custom-h">
          <h2 id="custom-h">Custom metrics</h2>
          <div class="cards">
            {call.metric_results.filter((m) => m.metrics_type !== "standard").map((m) => (
              <CustomCard key={m.metric_id} m={m} />
            ))}
          </div>
        </section>
      )}
      <section aria-labelledby="standard-h">
        <h2 id="standard-h">Standard metrics</h2>
        {call.standard_metrics.length === 0 ? (
          <p class="muted">None scored{call.analysis_status === "completed" ? "" : " yet"}.</p>
        ) : (
          <div class="cards">
            {call.standard_metrics.map((m) => <StandardCard key={m.metric_id} m={m} onSeek={(s) => seek(s, true)} />)}
          </div>
        )}
      </section>
    </main>
  );
}

function StandardCard({ m, onSeek }: { m: StandardMetricResult; onSeek: (s: number) => void }) {
  const info = STANDARD_METRICS[m.standard_metric_key];
  const value = info ? m.result?.[info.headline] : m.score;
  const details = info?.details ? m.result?.[info.details] : undefined;
  return (
    <article class={`card metric-${m.standard_metric_key}`} data-metric={m.standard_metric_key}>
      <header>
        <h3>{m.name}</h3>
        <StatusBadge status={m.status} />
      </header>
      {m.status === "completed" ? (
        <p class="headline">{headlineText(value as Json, info?.unit ?? "")}</p>
      ) : (
        m.error && <p class="muted">{m.error}</p>
      )}
      {info && <p class="good">{info.good}</p>}
      {Array.isArray(details) && details.length > 0 && (
        <details>
          <summary>{details.length} {details.length === 1 ? "detail" : "details"}</summary>
          <DetailTable rows={details} onSeek={onSeek} />
        </details>
      )}
    </article>
  );
}

// Per-turn or per-event rows; a time in seconds is a button that plays from there.
function DetailTable({ rows, onSeek }: { rows: Json[]; onSeek: (s: number) => void }) {
  const objects = rows.filter((r): r is { [k: string]: Json } => !!r && typeof r === "object" && !Array.isArray(r));
  if (objects.length === 0) {
    return <p>{rows.map((r) => (typeof r === "number" ? formatClock(r) : String(r))).join(", ")}</p>;
  }
  const keys = Object.keys(objects[0]);
  return (
    <table class="details">
      <thead><tr>{keys.map((k) => <th key={k} scope="col">{k}</th>)}</tr></thead>
      <tbody>
        {objects.map((r, i) => (
          <tr key={i}>
            {keys.map((k) => {
              const v = r[k];
              const isTime = typeof v === "number" && (k.endsWith("_s") || k === "at_second");
              return (
                <td key={k}>
                  {isTime ? (
                    <button type="button" class="time" onClick={() => onSeek(v as number)}>{formatClock(v as number)}</button>
                  ) : typeof v === "number" ? (
                    Math.round(v * 100) / 100
                  ) : (
                    String(v)
                  )}
                </td>
              );
            })}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

const OUTCOMES: Record<string, string> = {
  meets_expectations: "meets expectations",
  exceeds_expectations: "exceeds expectations",
  requires_attention: "requires attention",
  not_applicable: "not applicable",
};

function CustomCard({ m }: { m: MetricResult }) {
  const outcome = m.structured_output?.outcome_classification as string | undefined;
  const value = m.value === null || m.value === undefined ? "–" : typeof m.value === "object" ? JSON.stringify(m.value) : String(m.value);
  return (
    <article class="card custom" data-metric-id={m.metric_id}>
      <header>
        <h3>{m.name}</h3>
        {outcome ? <span class={`badge outcome-${outcome}`}>{OUTCOMES[outcome] ?? outcome}</span> : <StatusBadge status={m.status} />}
      </header>
      <p class="headline">{value}</p>
      <p class="muted">{m.metrics_type.replace(/_/g, " ")} · {m.result_type}{m.agreement != null && ` · agreement ${Math.round(m.agreement * 100)}%`}</p>
      {m.explanation && <p class="explanation">{m.explanation}</p>}
      {m.error && <p class="error-text">{m.error}</p>}
    </article>
  );
}

// Label, tag and metadata, edited in place (PATCH). Metadata keys removed in the editor are
// sent as null, which deletes them (the API merges metadata).
function EditCall({ call, onSaved }: { call: Call; onSaved: (c: Call) => void }) {
  const { api } = useSession();
  const [label, setLabel] = useState(call.label ?? "");
  const [tag, setTag] = useState(call.tag ?? "");
  const [metadata, setMetadata] = useState(JSON.stringify(call.metadata ?? {}, null, 2));
  const [state, setState] = useState<{ busy?: boolean; error?: string; saved?: boolean }>({});
  useEffect(() => {
    setLabel(call.label ?? "");
    setTag(call.tag ?? "");
    setMetadata(JSON.stringify(call.metadata ?? {}, null, 2));
  }, [call.id]);

  const save = async (e: Event) => {
    e.preventDefault();
    let parsed: { [k: string]: Json };
    try {
      parsed = JSON.parse(metadata || "{}");
      if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error();
    } catch {
      setState({ error: "Metadata must be a JSON object." });
      return;
    }
    const update: { [k: string]: Json } = {};
    if (label !== (call.label ?? "")) update.label = label || null;
    if (tag !== (call.tag ?? "")) update.tag = tag || null;
    const meta: { [k: string]: Json } = { ...parsed };
    for (const k of Object.keys(call.metadata ?? {})) if (!(k in parsed)) meta[k] = null;
    if (JSON.stringify(meta) !== JSON.stringify(call.metadata ?? {})) update.metadata = meta;
    if (Object.keys(update).length === 0) {
      setState({ saved: true });
      return;
    }
    setState({ busy: true });
    try {
      const saved = await api.write<Call>("PATCH", `/api/public/v1/calls/${call.id}`, update, "query");
      onSaved(saved);
      setMetadata(JSON.stringify(saved.metadata ?? {}, null, 2));
      setState({ saved: true });
    } catch (err) {
      setState({ error: err instanceof Error ? err.message : String(err) });
    }
  };

  return (
    <form class="edit" onSubmit={save} aria-label="Label, tag and metadata">
      <h2>Label and tag</h2>
      <label>
        Label
        <input name="label" value={label} onInput={(e) => { setLabel((e.target as HTMLInputElement).value); setState({}); }} />
      </label>
      <label>
        Tag
        <input name="tag" value={tag} onInput={(e) => { setTag((e.target as HTMLInputElement).value); setState({}); }} />
      </label>
      <label>
        Metadata (JSON)
        <textarea name="metadata" rows={5} spellcheck={false} value={metadata}
          onInput={(e) => { setMetadata((e.target as HTMLTextAreaElement).value); setState({}); }} />
      </label>
      <button type="submit" disabled={state.busy}>{state.busy ? "Saving…" : "Save"}</button>
      {state.saved && <span class="saved" role="status">Saved</span>}
      {state.error && <p class="error" role="alert">{state.error}</p>}
    </form>
  );
}

// Replays the call as a scenario (POST /api/v1/calls/{id}/scenario): the caller's lines as its
// script, or a persona the LLM provider writes from them; the failed metrics become its checks.
function MakeScenario({ call }: { call: Call }) {
  const { api } = useSession();
  const [mode, setMode] = useState<"script" | "persona">("script");
  const [state, setState] = useState<{ busy?: boolean; error?: string; made?: Scenario }>({});
  useEffect(() => setState({}), [call.id]);

  const make = async (e: Event) => {
    e.preventDefault();
    setState({ busy: true });
    try {
      const made = await api.write<Scenario>("POST", `/api/v1/calls/${call.id}/scenario`, { mode });
      setState({ made });
    } catch (err) {
      setState({ error: err instanceof Error ? err.message : String(err) });
    }
  };

  return (
    <form class="edit make-scenario" onSubmit={make} aria-label="Make a scenario">
      <h2>Make a scenario</h2>
      <p class="muted">Replays this call against its agent; phone numbers, emails and card numbers are masked.</p>
      <label>
        Caller
        <select name="mode" value={mode}
          onChange={(e) => { setMode((e.target as HTMLSelectElement).value as "script" | "persona"); setState({}); }}>
          <option value="script">Says the same lines</option>
          <option value="persona">Has the same goal (LLM persona)</option>
        </select>
      </label>
      <button type="submit" disabled={state.busy}>{state.busy ? "Making…" : "Make a scenario"}</button>
      {state.made && (
        <p class="saved" role="status">
          Made <a href={href(`/scenarios/${state.made.id}`)}>{state.made.name}</a>
          {state.made.metric_ids.length > 0 && ` checking ${state.made.metric_ids.length} failed ${state.made.metric_ids.length === 1 ? "metric" : "metrics"}`}
        </p>
      )}
      {state.error && <p class="error" role="alert">{state.error}</p>}
    </form>
  );
}
