// What each standard metric's headline means (docs/api.md §3.1, docs/metrics.md): the figure
// shown, its unit, what good looks like, and the list of per-turn details in its result.
import type { Json } from "./api";

export interface StandardMetricInfo {
  headline: string; // the result key shown large
  unit: string;
  good: string; // what good looks like, in a line
  details?: string; // the result key holding per-turn or per-event rows
}

export const STANDARD_METRICS: Record<string, StandardMetricInfo> = {
  latency: { headline: "average_ms", unit: "ms", good: "Under 1,000 ms feels natural; over 2,000 ms callers talk over the agent.", details: "turns" },
  ai_interruptions: { headline: "count", unit: "", good: "0: the agent never starts while the caller is speaking.", details: "events" },
  user_interruptions: { headline: "count", unit: "", good: "Few: callers cut in when answers run long or go wrong.", details: "events" },
  stop_time_after_interruption: { headline: "average_ms", unit: "ms", good: "Under 500 ms: the agent stops soon when the caller cuts in.", details: "events" },
  silence_detection: { headline: "count", unit: "", good: "0 silences longer than the threshold.", details: "silences" },
  words_per_minute: { headline: "ai_wpm", unit: "wpm", good: "140–170 wpm is an easy pace on the phone." },
  transcription_accuracy: { headline: "accuracy", unit: "", good: "Close to 1: the transcript matches what was said." },
  voice_tone_clarity: { headline: "score", unit: "/ 5", good: "4 or 5: clean, level, unclipped audio." },
  voice_change_detection: { headline: "changed", unit: "", good: "false: one voice for the agent throughout.", details: "change_points_s" },
  talk_ratio: { headline: "ai_ratio", unit: "", good: "Around 0.4–0.6: neither side dominates." },
  user_sentiment: { headline: "value", unit: "", good: "positive or neutral." },
  task_completion: { headline: "value", unit: "", good: "true: the caller got what they called for." },
};

export function headlineText(value: Json | undefined, unit: string): string {
  if (value === undefined || value === null) return "–";
  if (typeof value === "number") {
    const shown = Number.isInteger(value) ? value.toLocaleString() : value.toFixed(value < 10 ? 2 : 0);
    return unit ? `${shown} ${unit}` : shown;
  }
  return String(value);
}
