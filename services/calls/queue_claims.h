#pragma once

// How the workers find the next call of a queue (recording download, transcription, analysis).
// Each queue has two indexes (schema 16): the calls ready and under no lease, by id, and the calls
// under a lease, by its expiry. A claim asks for an expired lease first (a dead worker's work
// resumes before new work) and then for the oldest ready call; each lookup's WHERE names its
// index's predicate term for term, so SQLite's planner can use the partial index and
// PostgreSQL's reads it in order and stops at the first row it may lock, whatever its statistics
// say (a fresh table has none; a burst of ingests makes them stale). Before, one claim with an OR
// over every state sorted the whole waiting queue: 70 ms a claim on PostgreSQL with 68,000 calls
// waiting; on SQLite, a walk of the table from its oldest call.
//
// The lookups end without a lock clause: the claims add Connection::ForUpdateSkipLocked(). Kept
// here, not in the store's code, so a test can ask each backend's planner how it runs them.

#include "absl/strings/string_view.h"

namespace calleval::calls::queue_claims {

// Recording downloads: a pending recording is ready when no one holds it; a lease that expired
// (or a retry's delay that passed) makes it claimable again. Bind: now.
inline constexpr absl::string_view kRecordingLeased =
    "SELECT id FROM calls WHERE recording_state = 'pending' AND recording_lease_until IS NOT NULL "
    "AND recording_lease_until <= ? ORDER BY recording_lease_until, id LIMIT 1";
inline constexpr absl::string_view kRecordingReady =
    "SELECT id FROM calls WHERE recording_state = 'pending' AND recording_lease_until IS NULL "
    "ORDER BY id LIMIT 1";

// Transcriptions: a stored recording whose analysis has been claimed once; a worker's lease that
// expired. Columns: id, transcription_attempts, has a provided transcript, metadata, the
// recording's key in the blob store, when the call was ingested.
inline constexpr absl::string_view kTranscriptionColumns =
    "SELECT id, transcription_attempts, transcript_source IS NOT NULL, metadata, "
    "COALESCE(recording_key, CAST(id AS TEXT)), created_at FROM calls ";
// Bind: now.
inline constexpr absl::string_view kTranscriptionLeased =
    "WHERE transcription_status = 'processing' AND transcription_lease_until <= ? "
    "ORDER BY transcription_lease_until, id LIMIT 1";
inline constexpr absl::string_view kTranscriptionReady =
    "WHERE transcription_status = 'pending' AND recording_state = 'stored' AND "
    "analysis_status IN ('processing', 'computed', 'completed') ORDER BY id LIMIT 1";

// Analyses: a pending call with its recording stored (or none), or a computed call whose
// transcription has ended, under no lease; a lease that expired, of a call being reserved for
// (pending), scored (processing) or finished (computed). Columns: id, workspace_id,
// analysis_status, analysis_attempts, query_rows.
inline constexpr absl::string_view kAnalysisColumns =
    "SELECT id, workspace_id, analysis_status, analysis_attempts, query_rows FROM calls ";
// Bind: now.
inline constexpr absl::string_view kAnalysisLeased =
    "WHERE analysis_lease_until IS NOT NULL AND analysis_status IN ('pending', 'processing', "
    "'computed') AND analysis_lease_until <= ? AND (analysis_status = 'processing' OR "
    "(analysis_status = 'pending' AND (recording_state IS NULL OR recording_state = 'stored')) OR "
    "(analysis_status = 'computed' AND transcription_status IN ('completed', 'failed'))) "
    "ORDER BY analysis_lease_until, id LIMIT 1";
inline constexpr absl::string_view kAnalysisReady =
    "WHERE analysis_lease_until IS NULL AND ((analysis_status = 'pending' AND "
    "(recording_state IS NULL OR recording_state = 'stored')) OR (analysis_status = 'computed' AND "
    "transcription_status IN ('completed', 'failed'))) ORDER BY id LIMIT 1";

}  // namespace calleval::calls::queue_claims
