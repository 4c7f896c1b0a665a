// Trends of an agent or a scenario over time, from the stats endpoints (docs/api.md §5.7):
// latency p50 and p95, interruptions and silences, the runs' pass rate, and the outcome counts
// of each custom metric. Clicking a point opens the calls of that bucket.
import { useEffect, useState } from "preact/hooks";
import type { Metric, MetricList } from "../api";
import { ErrorBanner, Loading } from "../components";
import { href, navigate, type Route } from "../router";
import { useSession } from "../session";

interface Bucket {
  start: string;
  end: string;
  calls: { total: number; completed: number; failed: number };
  latency_turns: number;
  latency_p50_ms: number | null;
  latency_p95_ms: number | null;
  ai_interruptions: number;
  user_interruptions: number;
  silences: number;
  runs: { total: number; passed: number; failed: number; pass_rate: number | null };
  metric_outcomes: { metric_id: number; outcome: string; count: number }[];
}
interface Stats { from: string; to: string; bucket: string; buckets: Bucket[]; total: Bucket }

const RANGES: Record<string, { bucket: string; days: number; label: string }> = {
  "24h": { bucket: "hour", days: 1, label: "Last 24 hours" },
  "30d": { bucket: "day", days: 30, label: "Last 30 days" },
  "12w": { bucket: "week", days: 84, label: "Last 12 weeks" },
};

export function TrendsPage({ kind, id, route }: { kind: "agents" | "scenarios"; id: string; route: Route }) {
  const { api } = useSession();
  const range = RANGES[route.query.get("range") ?? "30d"] ? route.query.get("range") ?? "30d" : "30d";
  const [stats, setStats] = useState<Stats | null>(null);
  const [name, setName] = useState("");
  const [agentId, setAgentId] = useState<number | null>(kind === "agents" ? Number(id) : null);
  const [metrics, setMetrics] = useState<Metric[]>([]);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    const r = RANGES[range];
    const to = new Date();
    const from = new Date(to.getTime() - r.days * 86400_000);
    setStats(null);
    api.get<Stats>(`/api/v1/${kind}/${id}/stats`, { bucket: r.bucket, from: from.toISOString(), to: to.toISOString() })
      .then(setStats, setError);
  }, [api, kind, id, range]);
  useEffect(() => {
    api.get<{ name: string; agent_id?: number }>(`/api/v1/${kind}/${id}`).then((o) => {
      setName(o.name);
      if (kind === "scenarios" && o.agent_id) setAgentId(o.agent_id);
    }, () => undefined);
    api.get<MetricList>("/api/v1/metrics", { per_page: 100 }).then((m) => setMetrics([...m.global_metrics, ...m.data]), () => undefined);
  }, [api, kind, id]);

  // A bucket's calls: the list, filtered by the agent and the bucket's exact time range.
  const open = (b: Bucket) => navigate(href("/calls", { agent_id: agentId ?? undefined, from: b.start, to: b.end }));
  const back = kind === "agents" ? href(`/agents/${id}`) : href(`/scenarios/${id}`);
  return (
    <main class="page">
      <p><a href={back}>← {name || (kind === "agents" ? "Agent" : "Scenario")}</a></p>
      <div class="title-row">
        <h1>Trends{name && `: ${name}`}</h1>
        <nav class="segmented" aria-label="Range">
          {Object.entries(RANGES).map(([k, r]) => (
            <a key={k} href={href(`/${kind}/${id}/trends`, { range: k })} aria-current={k === range ? "page" : undefined}>{r.label}</a>
          ))}
        </nav>
      </div>
      <ErrorBanner error={error} />
      {!stats ? (!error && <Loading />) : (
        <>
          <p class="muted">
            {stats.total.calls.total.toLocaleString()} calls, {stats.total.runs.total.toLocaleString()} runs in range.
            Click a point to see its calls.
          </p>
          <div class="charts">
            <Chart title="Latency (ms)" buckets={stats.buckets} onPick={open} series={[
              { name: "p50", cls: "s1", value: (b) => b.latency_p50_ms },
              { name: "p95", cls: "s2", value: (b) => b.latency_p95_ms },
            ]} />
            <Chart title="Interruptions and silences" buckets={stats.buckets} onPick={open} series={[
              { name: "agent interrupts", cls: "s3", value: (b) => b.ai_interruptions },
              { name: "caller interrupts", cls: "s4", value: (b) => b.user_interruptions },
              { name: "silences", cls: "s5", value: (b) => b.silences },
            ]} />
            <Chart title="Pass rate of runs (%)" buckets={stats.buckets} onPick={open} max={100} series={[
              { name: "pass rate", cls: "s1", value: (b) => (b.runs.pass_rate === null ? null : b.runs.pass_rate * 100) },
            ]} />
            {outcomeSeries(stats).map(([metricId, outcomes]) => (
              <Chart key={metricId} title={`Outcomes: ${metrics.find((m) => m.id === metricId)?.name ?? `metric ${metricId}`}`}
                buckets={stats.buckets} onPick={open} series={outcomes.map((o, i) => ({
                  name: o.replace(/_/g, " "), cls: `s${(i % 5) + 1}`,
                  value: (b: Bucket) => b.metric_outcomes.find((x) => x.metric_id === metricId && x.outcome === o)?.count ?? 0,
                }))} />
            ))}
          </div>
        </>
      )}
    </main>
  );
}

// Per custom metric, the outcomes seen anywhere in the range.
function outcomeSeries(stats: Stats): [number, string[]][] {
  const by = new Map<number, Set<string>>();
  for (const o of stats.total.metric_outcomes) {
    if (!by.has(o.metric_id)) by.set(o.metric_id, new Set());
    by.get(o.metric_id)!.add(o.outcome);
  }
  return [...by.entries()].sort((a, b) => a[0] - b[0]).map(([id, s]) => [id, [...s].sort()]);
}

interface Series { name: string; cls: string; value: (b: Bucket) => number | null }

// A line chart in SVG: one line per series, a dot per bucket with a value (a button for the
// keyboard), the range's first and last dates under it, the largest value beside it.
function Chart({ title, buckets, series, onPick, max }: {
  title: string; buckets: Bucket[]; series: Series[]; onPick: (b: Bucket) => void; max?: number;
}) {
  const W = 600, H = 160, pad = 8;
  const values = series.flatMap((s) => buckets.map(s.value)).filter((v): v is number => v !== null);
  const top = max ?? Math.max(1, ...values);
  const x = (i: number) => pad + (buckets.length <= 1 ? (W - 2 * pad) / 2 : (i / (buckets.length - 1)) * (W - 2 * pad));
  const y = (v: number) => H - pad - (v / top) * (H - 2 * pad);
  const date = (iso: string) => new Date(iso).toLocaleDateString(undefined, { month: "short", day: "numeric" });
  return (
    <figure class="chart">
      <figcaption><strong>{title}</strong>
        <span class="legend">{series.map((s) => <span key={s.name} class={`key ${s.cls}`}>{s.name}</span>)}</span>
      </figcaption>
      {values.length === 0 ? <p class="muted empty-chart">No data in this range.</p> : (
        <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`${title}, ${buckets.length} points`}>
          <line class="axis" x1={pad} x2={W - pad} y1={H - pad} y2={H - pad} />
          <text class="tick" x={pad} y={12}>{Math.round(top).toLocaleString()}</text>
          {series.map((s) => {
            let d = "";
            buckets.forEach((b, i) => {
              const v = s.value(b);
              if (v === null) return;
              d += `${d && buckets[i - 1] && s.value(buckets[i - 1]) !== null ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
            });
            return <path key={s.name} class={`line ${s.cls}`} d={d} />;
          })}
          {series.map((s) => buckets.map((b, i) => {
            const v = s.value(b);
            if (v === null) return null;
            return (
              <circle key={`${s.name}-${i}`} class={`dot ${s.cls}`} cx={x(i)} cy={y(v)} r={4} tabIndex={0} role="button"
                aria-label={`${s.name} ${Math.round(v * 10) / 10} on ${date(b.start)}: open its calls`}
                onClick={() => onPick(b)} onKeyDown={(e) => (e.key === "Enter" || e.key === " ") && onPick(b)}>
                <title>{`${date(b.start)}: ${s.name} ${Math.round(v * 10) / 10}`}</title>
              </circle>
            );
          }))}
        </svg>
      )}
      <div class="range-dates muted"><span>{buckets[0] && date(buckets[0].start)}</span>
        <span>{buckets.length > 0 && date(buckets[buckets.length - 1].start)}</span></div>
    </figure>
  );
}
