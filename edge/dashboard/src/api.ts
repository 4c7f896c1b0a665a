// The public JSON API (docs/api.md), as the dashboard uses it: the key rides in the Authorization
// header, the chosen workspace as client_id, and every error becomes an ApiError that the pages
// show as it is (status, code, message, and Retry-After for 429/503).

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryAfterSeconds?: number,
    readonly details: { field?: string; issue?: string }[] = [],
  ) {
    super(message);
  }
}

export type Query = Record<string, string | number | undefined | null>;

export interface Session {
  key: string;
  workspaceId: number;
}

export class Api {
  // `onUnauthorized`: a 401 on any request (the key expired or was revoked).
  constructor(
    private readonly key: string,
    private readonly workspaceId?: number,
    private readonly onUnauthorized?: () => void,
  ) {}

  get<T>(path: string, query: Query = {}, signal?: AbortSignal): Promise<T> {
    return this.send<T>("GET", path, { ...this.workspace(), ...query }, undefined, signal);
  }

  // A route whose whole body is the request (`body: "*"` in the protos) takes the workspace in
  // the body; one whose body is a field of it (PATCH of a call: `update`) in the query.
  write<T>(
    method: "POST" | "PUT" | "PATCH" | "DELETE",
    path: string,
    body?: object,
    workspaceIn: "body" | "query" = "body",
  ): Promise<T> {
    if (body === undefined || workspaceIn === "query") {
      return this.send<T>(method, path, this.workspace(), body);
    }
    return this.send<T>(method, path, {}, { ...this.workspace(), ...body });
  }

  private workspace(): Query {
    return this.workspaceId === undefined ? {} : { client_id: this.workspaceId };
  }

  private async send<T>(
    method: string,
    path: string,
    query: Query,
    body: object | undefined,
    signal?: AbortSignal,
  ): Promise<T> {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
    }
    const url = params.toString() ? `${path}?${params}` : path;
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        signal,
        headers: {
          Authorization: `Bearer ${this.key}`,
          ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      if (e instanceof DOMException && e.name === "AbortError") throw e;
      throw new ApiError(0, "unreachable", "The service cannot be reached. Check your connection.");
    }
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    let parsed: unknown = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: a proxy's error page, say. Reported below with the status.
    }
    if (!response.ok) {
      if (response.status === 401) this.onUnauthorized?.();
      const error = (parsed as { error?: { code?: string; message?: string; details?: [] } })
        ?.error;
      const retry = Number(response.headers.get("Retry-After"));
      throw new ApiError(
        response.status,
        error?.code ?? "http_" + response.status,
        error?.message ?? `The service answered ${response.status}.`,
        Number.isFinite(retry) && retry > 0 ? retry : undefined,
        error?.details ?? [],
      );
    }
    return parsed as T;
  }
}

// What a person should read for an error, by what they can do about it.
export function describeError(error: unknown): string {
  if (!(error instanceof ApiError)) return String(error);
  switch (error.status) {
    case 401:
      return "Your API key is not valid any more. Sign in again.";
    case 429:
      return `Too many requests for this key; trying again in ${error.retryAfterSeconds ?? 1} s.`;
    case 503:
      return `The service is unavailable: ${error.message}` +
        (error.retryAfterSeconds ? ` (trying again in ${error.retryAfterSeconds} s)` : "");
    default: {
      const fields = error.details
        .filter((d) => d.field)
        .map((d) => `${d.field} ${d.issue}`)
        .join("; ");
      return fields ? `${error.message}: ${fields}` : error.message;
    }
  }
}

// --- The shapes the pages read (docs/api.md). ---

export interface Workspace {
  id: number;
  name: string;
  credit_balance: number;
}

export interface Pagination {
  current_page: number;
  total_pages: number;
  total_count: number;
  per_page: number;
}

export interface Turn {
  role: "AI Assistant" | "User" | "Function Call" | "Function Call Result";
  content?: string;
  start_time?: number;
  end_time?: number;
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface StandardMetricResult {
  metric_id: number;
  standard_metric_key: string;
  name: string;
  status: string;
  result: { [key: string]: Json };
  score?: number | null;
  credits_used: number;
  error?: string | null;
}

export interface MetricResult {
  metric_id: number;
  name: string;
  metrics_type: string;
  result_type: string;
  status: string;
  value: Json;
  explanation?: string | null;
  structured_output?: { outcome?: string; [key: string]: Json | undefined } | null;
  credits_used: number;
  error?: string | null;
  agreement?: number | null;
}

export interface Call {
  id: number;
  call_identifier: string;
  client_id: number;
  agent_id: number;
  observation_type: "voice" | "text";
  call_direction: string;
  analysis_status: string;
  transcription_status: string;
  recording_url?: string | null;
  presigned_recording_url?: string | null;
  duration_seconds?: number | null;
  call_timestamp: string;
  call_end_reason?: string | null;
  customer_number?: string | null;
  tag?: string | null;
  label?: string | null;
  metadata?: { [key: string]: Json } | null;
  transcript: Turn[];
  transcript_source?: "provided" | "generated" | null;
  standard_metrics: StandardMetricResult[];
  metric_results: MetricResult[];
  credits_used: number;
  failure_reason?: string | null;
  failure_message?: string | null;
  created_at: string;
  updated_at: string;
  // The agent's version label when the call was ingested.
  version?: string | null;
  // The voice platform's own version of the agent that took the call (Retell's).
  platform_version?: string | null;
}

export interface CallList {
  data: Call[];
  pagination: Pagination;
}

export interface Agent {
  id: number;
  name: string;
}

export interface Waveform {
  channels: number;
  buckets: number;
  duration_seconds: number;
  peaks: string; // base64 of int8 (min, max) pairs, channel after channel
}

// Final: nothing about the call will change without a user's action.
export function isFinal(call: Pick<Call, "analysis_status" | "transcription_status">): boolean {
  const analysisDone = ["completed", "failed", "skipped"].includes(call.analysis_status);
  const transcriptionDone = ["completed", "failed"].includes(call.transcription_status);
  return analysisDone && transcriptionDone;
}

export interface OutcomeRule {
  condition: string;
  set_metrics_name?: string | null;
  as_metrics_expected_value: string;
  outcome_classification: string;
}

export interface Metric {
  id: number;
  name: string;
  description?: string | null;
  metrics_type: string;
  result_type: string;
  standard_metric_key?: string | null;
  is_custom: boolean;
  scope: string;
  mark_as_global: boolean;
  agent_ids: number[];
  scenario_ids: number[];
  structured_output: OutcomeRule[];
  credit_cost: number;
  enum_values?: string[] | null;
  llm_instructions?: string | null;
  judge_samples?: number | null;
  code_snippet?: string | null;
  phrases?: string[] | null;
  match?: string | null;
  speaker?: string | null;
  case_sensitive?: boolean | null;
  permitted_options?: string[] | null;
  forbidden_options?: string[] | null;
}

export interface MetricList {
  standard_metrics: Metric[];
  data: Metric[];
  global_metrics: Metric[];
  pagination: Pagination;
}

export interface CodeTest {
  result: Json;
  explanation: string;
  metric_result: string | null;
  structured_output: { outcome_classification?: string } | null;
  execution_time_ms: number;
  error: { type: string; message: string; line?: number | null } | null;
  call: { id: number; identifier: string; duration: number | null };
}

export interface CodeValidation {
  valid: boolean;
  errors: { line?: number | null; column?: number | null; message: string }[];
}

export interface Scenario {
  id: number;
  agent_id: number;
  name: string;
  persona?: string | null;
  goal?: string | null;
  expected_outcome?: string | null;
  caller_script: string[];
  max_turns: number;
  metric_ids: number[];
  created_at: string;
  // The call this scenario replays (POST /api/v1/calls/{id}/scenario).
  source_call_id?: number | null;
}

export interface Run {
  id: number;
  scenario_id: number;
  agent_id: number;
  batch_run_id?: number | null;
  channel: string;
  status: string;
  call_id?: number | null;
  passed?: boolean | null;
  started_at?: string | null;
  ended_at?: string | null;
  end_reason?: string | null;
  error?: string | null;
  created_at: string;
  // The agent's version label when the run started.
  version?: string | null;
  // The voice platform's own version of the agent the run's call reached (Retell's).
  platform_version?: string | null;
}

export interface BatchRun {
  id: number;
  agent_id: number;
  channel: string;
  concurrency: number;
  status: string;
  run_ids: number[];
  summary: { total: number; completed: number; failed: number; passed: number; pass_rate: number | null };
  created_at: string;
  repeat: number;
  baseline_batch_run_id: number | null;
}

export type Verdict = "improved" | "regressed" | "unchanged" | "inconclusive";

/** One figure of one scenario in a batch run's comparison with its baseline (docs/api.md §5.6). */
export interface ComparedFigure {
  metric_id: number | null;
  metric: string;
  kind: "pass_rate" | "mean";
  baseline: number | null;
  current: number | null;
  difference: number | null;
  ci_low: number | null;
  ci_high: number | null;
  p_value: number | null;
  baseline_runs: number;
  current_runs: number;
  verdict: Verdict;
}

export interface BatchRunComparison {
  batch_run_id: number;
  baseline_batch_run_id: number;
  complete: boolean;
  scenarios: { scenario_id: number; metrics: ComparedFigure[] }[];
  verdict: Verdict;
}
