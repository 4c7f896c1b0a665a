#include "common/schema.h"

namespace calleval {

const std::vector<db::Migration>& SchemaMigrations() {
  static const auto* migrations = new std::vector<db::Migration>{
      {1, R"sql(
CREATE TABLE workspaces (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  credit_balance INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL
);

-- Only a SHA-256 digest of each key is kept; `display_prefix` is the start of the key, enough
-- to tell keys apart in a listing without being usable.
CREATE TABLE api_keys (
  id INTEGER PRIMARY KEY,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  display_prefix TEXT NOT NULL,
  digest BLOB NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  revoked_at TEXT
);

CREATE TABLE api_key_grants (
  key_id INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  PRIMARY KEY (key_id, workspace_id)
) WITHOUT ROWID;

-- One row per charge or refund; (call_id, metric_id, kind) is unique so a metric is never
-- charged twice for the same call, whoever retries.
CREATE TABLE credit_ledger (
  id INTEGER PRIMARY KEY,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  call_id INTEGER,
  metric_id INTEGER,
  kind TEXT NOT NULL,
  amount INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  UNIQUE (call_id, metric_id, kind)
);

CREATE TABLE languages (
  id INTEGER PRIMARY KEY,
  code TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL
);
INSERT INTO languages (id, code, name) VALUES
  (1, 'en-US', 'English (United States)'),
  (2, 'en-GB', 'English (United Kingdom)'),
  (3, 'es-ES', 'Spanish (Spain)'),
  (4, 'es-MX', 'Spanish (Mexico)'),
  (5, 'fr-FR', 'French (France)'),
  (6, 'de-DE', 'German (Germany)'),
  (7, 'it-IT', 'Italian (Italy)'),
  (8, 'pt-BR', 'Portuguese (Brazil)'),
  (9, 'nl-NL', 'Dutch (Netherlands)'),
  (10, 'hi-IN', 'Hindi (India)'),
  (11, 'ja-JP', 'Japanese (Japan)'),
  (12, 'zh-CN', 'Chinese (Mandarin, Simplified)');

-- Agents. List-valued and structured fields are JSON text.
CREATE TABLE agents (
  id INTEGER PRIMARY KEY,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  name TEXT NOT NULL,
  phone_number TEXT,
  telephony_carrier TEXT,
  agent_source TEXT NOT NULL,
  assistant_id TEXT,
  call_directions TEXT NOT NULL,
  language_id INTEGER REFERENCES languages(id),
  instructions TEXT,
  opening_message TEXT,
  max_call_duration_seconds INTEGER NOT NULL,
  disabled_metric_ids TEXT NOT NULL DEFAULT '[]',
  silence_threshold_ms INTEGER,
  model TEXT,
  voice TEXT,
  web_channel TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX agents_by_workspace ON agents (workspace_id, id);

-- Calls. `transcript`, `metadata`, `standard_metrics` and `metric_results` are serialized
-- calleval.v1 protobuf messages (see services/calls/call_codec.h).
CREATE TABLE calls (
  id INTEGER PRIMARY KEY,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  agent_id INTEGER NOT NULL,
  call_identifier TEXT NOT NULL,
  observation_type TEXT NOT NULL,
  call_direction TEXT NOT NULL,
  analysis_status TEXT NOT NULL,
  transcription_status TEXT NOT NULL,
  recording_url TEXT,
  -- Recording download: NULL (no recording), 'pending', 'stored', 'failed'.
  recording_state TEXT,
  recording_lease_until INTEGER,
  recording_attempts INTEGER NOT NULL DEFAULT 0,
  recording_content_type TEXT,
  recording_bytes INTEGER,
  duration_seconds INTEGER,
  call_timestamp TEXT NOT NULL,
  call_end_reason TEXT,
  customer_number TEXT,
  tag TEXT,
  label TEXT,
  metadata BLOB,
  transcript BLOB,
  transcript_source TEXT,
  metric_ids TEXT NOT NULL DEFAULT '',  -- comma-separated ids to score; empty: all enabled
  standard_metrics BLOB,
  metric_results BLOB,
  credits_used INTEGER NOT NULL DEFAULT 0,
  failure_reason TEXT,
  failure_message TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE (workspace_id, call_identifier)
);
CREATE INDEX calls_by_agent ON calls (workspace_id, agent_id, id);
CREATE INDEX calls_by_status ON calls (workspace_id, analysis_status, id);
CREATE INDEX calls_by_tag ON calls (workspace_id, tag, id);
CREATE INDEX calls_recording_work ON calls (recording_state, recording_lease_until)
  WHERE recording_state = 'pending';
)sql"},
      {2, R"sql(
-- The analysis queue (scoring). A call is analysed once its recording is stored (or at once
-- for a text call); the worker holding it has a lease (token, expiry); reports with another
-- token are refused, and an expired lease is handed out again.
ALTER TABLE calls ADD COLUMN planned_metric_ids TEXT NOT NULL DEFAULT '';
ALTER TABLE calls ADD COLUMN silence_threshold_ms INTEGER;
ALTER TABLE calls ADD COLUMN analysis_token TEXT;
ALTER TABLE calls ADD COLUMN analysis_lease_until INTEGER;
ALTER TABLE calls ADD COLUMN analysis_attempts INTEGER NOT NULL DEFAULT 0;
CREATE INDEX calls_analysis_work ON calls (analysis_status, analysis_lease_until)
  WHERE analysis_status IN ('pending', 'processing');
)sql"},
      {3, R"sql(
-- Custom metrics (the twelve standard ones are code: common/standard_metrics.h). `name_key` is
-- the trimmed, case-folded name, unique per workspace. `definition` is a serialized
-- calleval.v1.Metric holding the type-specific fields (description, enum_values, instructions,
-- code, phrases, options, evaluation_trigger, structured_output); the columns hold what
-- listings filter on. AUTOINCREMENT: a deleted metric's id is never handed out again, so an
-- old call's results or an agent's disabled list never point at a different metric.
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  name TEXT NOT NULL,
  name_key TEXT NOT NULL,
  metrics_type TEXT NOT NULL,
  result_type TEXT NOT NULL,
  is_global INTEGER NOT NULL DEFAULT 0,
  credit_cost INTEGER NOT NULL,
  definition BLOB NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  UNIQUE (workspace_id, name_key)
);
-- Custom ids start at 101 (kFirstCustomMetricId), above the standard ids 1-12.
INSERT INTO sqlite_sequence (name, seq) VALUES ('metrics', 100);

-- Deleting an agent removes its links here (ON DELETE CASCADE; foreign_keys is on for every
-- connection), so agent_ids never lists a deleted agent, nor one that reuses its id.
CREATE TABLE metric_agents (
  metric_id INTEGER NOT NULL REFERENCES metrics(id) ON DELETE CASCADE,
  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
  PRIMARY KEY (metric_id, agent_id)
) WITHOUT ROWID;
CREATE INDEX metric_agents_by_agent ON metric_agents (agent_id, metric_id);

-- Scenarios do not exist yet: scenario ids are stored as given (no foreign key until then).
CREATE TABLE metric_scenarios (
  metric_id INTEGER NOT NULL REFERENCES metrics(id) ON DELETE CASCADE,
  scenario_id INTEGER NOT NULL,
  PRIMARY KEY (metric_id, scenario_id)
) WITHOUT ROWID;
)sql"},
      {4, R"sql(
-- Custom metrics carry their own credit cost, fixed at ingest: one cost per planned metric,
-- in the order of planned_metric_ids (NULL on calls from before: every metric cost 1).
ALTER TABLE calls ADD COLUMN planned_metric_costs TEXT;
)sql"},
      {5, R"sql(
-- Speech-to-text, a stage of its own beside the audio pass: a voice call's recording is
-- transcribed under its own lease (token, expiry, attempts) while the audio metrics are
-- computed. `generated_transcript` is the recognizer's transcript (also copied into
-- `transcript` when none was provided); `transcription_error` says why it failed.
-- `audio_results` keeps every audio metric of the audio stage (planned or not) for the
-- transcript stage, which a call in analysis_status 'computed' waits for.
ALTER TABLE calls ADD COLUMN transcription_token TEXT;
ALTER TABLE calls ADD COLUMN transcription_lease_until INTEGER;
ALTER TABLE calls ADD COLUMN transcription_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE calls ADD COLUMN transcription_error TEXT;
ALTER TABLE calls ADD COLUMN generated_transcript BLOB;
ALTER TABLE calls ADD COLUMN audio_results BLOB;
CREATE INDEX calls_transcription_work ON calls (transcription_status, transcription_lease_until)
  WHERE transcription_status IN ('pending', 'processing');
CREATE INDEX calls_analysis_computed ON calls (analysis_status, analysis_lease_until)
  WHERE analysis_status = 'computed';
)sql"},
      {6, R"sql(
-- An agent's web channel: `web_channel` holds its fields as JSON ({"fields": {...},
-- "credentials_set": [...]}); the credentials themselves are sealed (AES-256-GCM) with a key
-- kept outside the database, bound to the agent's row.
ALTER TABLE agents ADD COLUMN web_channel_credentials BLOB;
)sql"},
      {7, R"sql(
-- Scenarios (docs/api.md §5). Deleting an agent deletes its scenarios. caller_script and metric_ids
-- are JSON arrays.
CREATE TABLE scenarios (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  agent_id INTEGER NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  persona TEXT,
  goal TEXT,
  expected_outcome TEXT,
  caller_script TEXT NOT NULL DEFAULT '[]',
  max_turns INTEGER NOT NULL,
  max_duration_seconds INTEGER,
  language_id INTEGER REFERENCES languages(id),
  metric_ids TEXT NOT NULL DEFAULT '[]',
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX scenarios_by_workspace ON scenarios (workspace_id, id);
CREATE INDEX scenarios_by_agent ON scenarios (workspace_id, agent_id, id);
)sql"},
      {8, R"sql(
-- Runs and batch runs (docs/api.md §5). A run is leased to one runs worker (token, expiry,
-- attempts) like the analysis queue; a batch caps how many of its runs are in progress.
CREATE TABLE batch_runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  agent_id INTEGER NOT NULL,
  channel TEXT NOT NULL,
  concurrency INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  scenario_id INTEGER NOT NULL,
  agent_id INTEGER NOT NULL,
  batch_run_id INTEGER REFERENCES batch_runs(id),
  channel TEXT NOT NULL,
  status TEXT NOT NULL,
  call_id INTEGER,
  passed INTEGER,
  started_at TEXT,
  ended_at TEXT,
  end_reason TEXT,
  error TEXT,
  lease_token TEXT,
  lease_until INTEGER,
  attempts INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL
);
CREATE INDEX runs_work ON runs (status, lease_until) WHERE status IN ('queued', 'in_progress');
CREATE INDEX runs_by_scenario ON runs (workspace_id, scenario_id, id);
CREATE INDEX runs_by_batch ON runs (batch_run_id, status);
)sql"},
  };
  return *migrations;
}

}  // namespace calleval
