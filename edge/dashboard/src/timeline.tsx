// The call's two lanes under the player: agent and caller turns in time, with what the standard
// metrics found marked where it happened (latency between turns, interruptions, silences, voice
// changes) and a playhead in step with the player. Clicking a point seeks the player there.
import type { Call, Json, Turn } from "./api";
import { formatClock } from "./format";

export interface Marker {
  kind: "latency" | "ai_interruption" | "user_interruption" | "silence" | "voice_change";
  start: number; // seconds
  end?: number;
  label: string;
}

const num = (v: Json | undefined) => (typeof v === "number" ? v : undefined);
const rows = (v: Json | undefined) =>
  (Array.isArray(v) ? v : []).filter((r): r is { [k: string]: Json } =>
    !!r && typeof r === "object" && !Array.isArray(r));

// What the standard metrics' results place on the timeline (docs/api.md §3.1).
export function markersOf(call: Call): Marker[] {
  const out: Marker[] = [];
  for (const m of call.standard_metrics) {
    const r = m.result ?? {};
    switch (m.standard_metric_key) {
      case "latency":
        for (const t of rows(r.turns)) {
          const from = num(t.user_end_s), to = num(t.agent_start_s), ms = num(t.latency_ms);
          if (from !== undefined && to !== undefined) {
            out.push({ kind: "latency", start: from, end: to, label: `latency ${Math.round(ms ?? (to - from) * 1000)} ms` });
          }
        }
        break;
      case "ai_interruptions":
      case "user_interruptions":
        for (const e of rows(r.events)) {
          const at = num(e.at_second);
          if (at !== undefined) {
            const who = m.standard_metric_key === "ai_interruptions" ? "agent" : "caller";
            out.push({
              kind: m.standard_metric_key === "ai_interruptions" ? "ai_interruption" : "user_interruption",
              start: at,
              end: at + (num(e.duration_ms) ?? 0) / 1000,
              label: `${who} interrupted (${Math.round(num(e.duration_ms) ?? 0)} ms overlap)`,
            });
          }
        }
        break;
      case "silence_detection":
        for (const s of rows(r.silences)) {
          const from = num(s.start_s), to = num(s.end_s);
          if (from !== undefined && to !== undefined) {
            out.push({ kind: "silence", start: from, end: to, label: `silence ${Math.round(num(s.duration_ms) ?? (to - from) * 1000)} ms` });
          }
        }
        break;
      case "voice_change_detection":
        for (const at of Array.isArray(r.change_points_s) ? r.change_points_s : []) {
          if (typeof at === "number") out.push({ kind: "voice_change", start: at, label: "voice change" });
        }
        break;
    }
  }
  return out;
}

export function callLength(call: Call): number {
  let end = call.duration_seconds ?? 0;
  for (const t of call.transcript) end = Math.max(end, t.end_time ?? 0, t.start_time ?? 0);
  return end;
}

const LANES: { name: string; roles: Turn["role"][] }[] = [
  { name: "Agent", roles: ["AI Assistant"] },
  { name: "Caller", roles: ["User"] },
];

export function Timeline({ call, length, position, onSeek }: {
  call: Call;
  length: number;
  position: number;
  onSeek: (seconds: number) => void;
}) {
  if (length <= 0) return null;
  const W = 1000, laneH = 28, top = 4;
  const x = (s: number) => (Math.min(Math.max(s, 0), length) / length) * W;
  const markers = markersOf(call);
  const seek = (e: MouseEvent) => {
    const box = (e.currentTarget as SVGSVGElement).getBoundingClientRect();
    onSeek(((e.clientX - box.left) / box.width) * length);
  };
  const turns = call.transcript.filter((t) => t.start_time !== undefined && t.end_time !== undefined);
  return (
    <figure class="timeline">
      <div class="lane-names" aria-hidden="true">
        {LANES.map((l) => <span key={l.name}>{l.name}</span>)}
      </div>
      <svg viewBox={`0 0 ${W} ${top + laneH * 2 + 14}`} preserveAspectRatio="none" role="img"
        aria-label={`Timeline of ${turns.length} turns and ${markers.length} events`} onClick={seek}>
        {LANES.map((lane, i) => (
          <g key={lane.name} class={`lane lane-${lane.name.toLowerCase()}`}>
            <rect class="lane-bg" x={0} y={top + i * laneH} width={W} height={laneH - 4} />
            {turns.filter((t) => lane.roles.includes(t.role)).map((t, k) => (
              <rect key={k} class="turn" x={x(t.start_time!)} y={top + i * laneH + 3}
                width={Math.max(1, x(t.end_time!) - x(t.start_time!))} height={laneH - 10}>
                <title>{`${lane.name} ${formatClock(t.start_time)}–${formatClock(t.end_time)}: ${t.content ?? ""}`}</title>
              </rect>
            ))}
          </g>
        ))}
        {markers.map((m, k) => (
          <g key={k} class={`marker marker-${m.kind}`}>
            {m.end !== undefined && m.end > m.start ? (
              <rect x={x(m.start)} y={top} width={Math.max(2, x(m.end) - x(m.start))} height={laneH * 2 - 4} />
            ) : (
              <line x1={x(m.start)} x2={x(m.start)} y1={top} y2={top + laneH * 2 - 4} />
            )}
            <title>{`${formatClock(m.start)} ${m.label}`}</title>
          </g>
        ))}
        <line class="playhead" x1={x(position)} x2={x(position)} y1={0} y2={top + laneH * 2 + 14} />
      </svg>
      <figcaption class="legend">
        <span class="key key-latency">latency</span>
        <span class="key key-ai_interruption">agent interrupts</span>
        <span class="key key-user_interruption">caller interrupts</span>
        <span class="key key-silence">silence</span>
        <span class="key key-voice_change">voice change</span>
      </figcaption>
    </figure>
  );
}
