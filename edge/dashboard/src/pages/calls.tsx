import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { isFinal, type Agent, type Call, type CallList } from "../api";
import { Empty, ErrorBanner, Loading, Pager, StatusBadge } from "../components";
import { formatDateTime, formatDuration } from "../format";
import { usePolling, useRetryAfter } from "../poll";
import { href, navigate, type Route } from "../router";
import { useSession } from "../session";

const PER_PAGE = 25;
// The list's filters, as they appear in the page's address and in the API's query.
const FILTERS = [
  "search",
  "agent_id",
  "analysis_status",
  "transcription_status",
  "tag",
  "observation_type",
  "from",
  "to",
] as const;
type Filters = Partial<Record<(typeof FILTERS)[number], string>>;

const ANALYSIS = ["pending", "processing", "computed", "completed", "failed", "skipped"];
const TRANSCRIPTION = ["pending", "processing", "completed", "failed"];

function filtersOf(route: Route): Filters {
  const f: Filters = {};
  for (const k of FILTERS) {
    const v = route.query.get(k);
    if (v) f[k] = v;
  }
  return f;
}

const isDay = (d: string | undefined) => !!d && /^\d{4}-\d{2}-\d{2}$/.test(d);

// Dates picked as local days: from the start of `from` to the end of `to`. An exact time (a
// trend chart's bucket) is passed as it is.
function apiQuery(filters: Filters, page: number) {
  const day = (d: string | undefined, next: boolean) => {
    if (!d) return undefined;
    if (!isDay(d)) return d;
    const t = new Date(`${d}T00:00:00`);
    if (next) t.setDate(t.getDate() + 1);
    return t.toISOString();
  };
  return {
    search: filters.search,
    agent_id: filters.agent_id,
    analysis_status: filters.analysis_status,
    transcription_status: filters.transcription_status,
    tag: filters.tag,
    observation_type: filters.observation_type,
    call_timestamp_from: day(filters.from, false),
    call_timestamp_to: day(filters.to, true),
    page,
    per_page: PER_PAGE,
  };
}

export function CallsPage({ route }: { route: Route }) {
  const { api } = useSession();
  const filters = filtersOf(route);
  const page = Math.max(1, Number(route.query.get("page")) || 1);
  const [list, setList] = useState<CallList | null>(null);
  const [agents, setAgents] = useState<Agent[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const key = JSON.stringify([filters, page]);
  const latest = useRef(key);
  latest.current = key;

  const load = useCallback(async () => {
    const asked = key;
    const next = await api.get<CallList>("/api/public/v1/calls", apiQuery(filters, page));
    if (latest.current !== asked) return false; // the filters changed meanwhile
    let changed = true;
    setList((before) => {
      changed = JSON.stringify(before?.data.map(summary)) !== JSON.stringify(next.data.map(summary));
      return next;
    });
    setError(null);
    return changed;
  }, [api, key]);

  useEffect(() => {
    setLoading(true);
    setList(null); // another filter or page: the last answer is not this one's
    load().catch(setError).finally(() => setLoading(false));
  }, [load]);
  useRetryAfter(error, load, setError);

  useEffect(() => {
    api
      .get<{ data: Agent[] }>("/api/v1/agents", { per_page: 100 })
      .then((r) => setAgents(r.data))
      .catch(() => setAgents([])); // the agent filter then offers ids only
  }, [api]);

  const pending = !!list && list.data.some((c) => !isFinal(c));
  usePolling(load, { active: pending });

  const setFilter = (name: keyof Filters, value: string) => {
    navigate(href("/calls", { ...filters, [name]: value || undefined }), true);
  };
  const agentName = (id: number) => agents.find((a) => a.id === id)?.name ?? `Agent ${id}`;

  return (
    <main class="page">
      <h1>Calls</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>
          Search
          <input
            type="search"
            name="search"
            placeholder="Call identifier or id"
            value={filters.search ?? ""}
            onChange={(e) => setFilter("search", (e.target as HTMLInputElement).value.trim())}
          />
        </label>
        <label>
          Agent
          <select name="agent_id" value={filters.agent_id ?? ""}
            onChange={(e) => setFilter("agent_id", (e.target as HTMLSelectElement).value)}>
            <option value="">All agents</option>
            {agents.map((a) => (
              <option key={a.id} value={String(a.id)}>{a.name}</option>
            ))}
          </select>
        </label>
        <Select name="analysis_status" label="Analysis" values={ANALYSIS} value={filters.analysis_status}
          onChange={(v) => setFilter("analysis_status", v)} />
        <Select name="transcription_status" label="Transcription" values={TRANSCRIPTION}
          value={filters.transcription_status} onChange={(v) => setFilter("transcription_status", v)} />
        <Select name="observation_type" label="Type" values={["voice", "text"]} value={filters.observation_type}
          onChange={(v) => setFilter("observation_type", v)} />
        <label>
          Tag
          <input name="tag" value={filters.tag ?? ""}
            onChange={(e) => setFilter("tag", (e.target as HTMLInputElement).value.trim())} />
        </label>
        <label>
          From
          <input type="date" name="from" value={isDay(filters.from) ? filters.from : ""}
            onChange={(e) => setFilter("from", (e.target as HTMLInputElement).value)} />
        </label>
        <label>
          To
          <input type="date" name="to" value={isDay(filters.to) ? filters.to : ""}
            onChange={(e) => setFilter("to", (e.target as HTMLInputElement).value)} />
        </label>
        {(filters.from && !isDay(filters.from)) || (filters.to && !isDay(filters.to)) ? (
          <span class="chip" data-testid="time-range">
            {formatDateTime(filters.from ?? "")} – {formatDateTime(filters.to ?? "")}
          </span>
        ) : null}
        {Object.keys(filters).length > 0 && (
          <button type="button" class="link" onClick={() => navigate(href("/calls"), true)}>
            Clear filters
          </button>
        )}
      </form>
      <ErrorBanner error={error} onRetry={() => load().catch(setError)} />
      {loading && !list ? (
        <Loading />
      ) : list && list.data.length === 0 ? (
        <Empty>
          {Object.keys(filters).length > 0
            ? "No call matches these filters."
            : "No calls yet. Send one with POST /api/public/v1/calls or callevalctl calls push."}
        </Empty>
      ) : list ? (
        <>
          <p class="muted count" aria-live="polite">
            {list.pagination.total_count.toLocaleString()} calls
          </p>
          <div class="table-wrap">
            <table class="calls">
              <thead>
                <tr>
                  <th scope="col">Call</th>
                  <th scope="col" class="opt">Agent</th>
                  <th scope="col">When</th>
                  <th scope="col" class="opt">Length</th>
                  <th scope="col">Analysis</th>
                  <th scope="col" class="opt">Transcription</th>
                  <th scope="col" class="opt">Tag</th>
                  <th scope="col" class="opt">Label</th>
                </tr>
              </thead>
              <tbody>
                {list.data.map((c) => (
                  <tr key={c.id} data-call-id={c.id}>
                    <td>
                      <a href={href(`/calls/${c.id}`)}>{c.call_identifier}</a>
                      <span class="muted type"> {c.observation_type}</span>
                    </td>
                    <td class="opt">{agentName(c.agent_id)}</td>
                    <td>{formatDateTime(c.call_timestamp)}</td>
                    <td class="opt">{formatDuration(c.duration_seconds)}</td>
                    <td><StatusBadge status={c.analysis_status} /></td>
                    <td class="opt"><StatusBadge status={c.transcription_status} /></td>
                    <td class="opt">{c.tag ?? ""}</td>
                    <td class="opt">{c.label ?? ""}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <Pager page={list.pagination.current_page} totalPages={list.pagination.total_pages}
            onPage={(p) => navigate(href("/calls", { ...filters, page: p }))} />
        </>
      ) : null}
    </main>
  );
}

function summary(c: Call) {
  return [c.id, c.analysis_status, c.transcription_status, c.label, c.tag];
}

function Select({ name, label, values, value, onChange }: {
  name: string;
  label: string;
  values: string[];
  value?: string;
  onChange: (v: string) => void;
}) {
  return (
    <label>
      {label}
      <select name={name} value={value ?? ""} onChange={(e) => onChange((e.target as HTMLSelectElement).value)}>
        <option value="">Any</option>
        {values.map((v) => (
          <option key={v} value={v}>{v}</option>
        ))}
      </select>
    </label>
  );
}
