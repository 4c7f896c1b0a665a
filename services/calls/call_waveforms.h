#pragma once

// The peaks of a call's recording (services/scoring/waveform_peaks.h), kept in call_waveforms
// (schema 18), one row per call, deleted with it. Written in the transaction that records the
// analysis; read by CallsStore::GetWaveform.

#include <cstdint>

#include "absl/status/status.h"
#include "calleval/v1/calls.pb.h"
#include "common/database.h"

namespace calleval::calls {

// Whether `waveform` is what the scoring workers produce: 1 or 2 channels, and exactly
// channels × buckets (min, max) pairs.
bool WellFormedWaveform(const v1::CallWaveform& waveform);

// Stores (or replaces) the call's peaks. A malformed waveform is not stored and not an error:
// the call's results matter more than its picture, so it is logged and the call answers 404.
absl::Status WriteWaveform(db::Connection& c, int64_t call_id, const v1::CallWaveform& waveform);

}  // namespace calleval::calls
