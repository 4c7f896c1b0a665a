#include "services/calls/call_waveforms.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "services/calls/call_rows.h"
#include "services/calls/calls_store.h"

namespace calleval::calls {

bool WellFormedWaveform(const v1::CallWaveform& waveform) {
  return (waveform.channels() == 1 || waveform.channels() == 2) && waveform.buckets() >= 0 &&
         waveform.peaks().size() ==
             static_cast<size_t>(waveform.channels()) * static_cast<size_t>(waveform.buckets()) * 2;
}

absl::Status WriteWaveform(db::Connection& c, int64_t call_id, const v1::CallWaveform& waveform) {
  if (!WellFormedWaveform(waveform)) {
    LogWarn("malformed waveform not stored", {{"call_id", call_id},
                                               {"channels", waveform.channels()},
                                               {"buckets", waveform.buckets()},
                                               {"bytes", waveform.peaks().size()}});
    return absl::OkStatus();
  }
  // A report that runs the audio pass again (a lease retried after its report was lost) replaces
  // the peaks rather than failing on the key.
  ASSIGN_OR_RETURN(auto upsert,
                   c.Prepare("INSERT INTO call_waveforms (call_id, channels, buckets, "
                             "duration_seconds, peaks) VALUES (?, ?, ?, ?, ?) ON CONFLICT "
                             "(call_id) DO UPDATE SET channels = excluded.channels, buckets = "
                             "excluded.buckets, duration_seconds = excluded.duration_seconds, "
                             "peaks = excluded.peaks"));
  upsert.Bind(1, call_id)
      .Bind(2, waveform.channels())
      .Bind(3, waveform.buckets())
      .Bind(4, waveform.duration_seconds())
      .BindBlob(5, waveform.peaks());
  return upsert.Run();
}

absl::StatusOr<v1::CallWaveform> CallsStore::GetWaveform(int64_t workspace_id,
                                                         absl::string_view key) {
  // One statement, as Get: the call (by id first, then by identifier) and its peaks if any.
  static const CallKeyRead* const read = new CallKeyRead(
      "SELECT c.recording_state, c.analysis_status, w.channels, w.buckets, w.duration_seconds, "
      "w.peaks FROM calls c LEFT JOIN call_waveforms w ON w.call_id = c.id WHERE ",
      "c.");
  return db::ReadResult<v1::CallWaveform>(
      *db_, db::kSingleStatementRead, [&](db::Connection& c) -> absl::StatusOr<v1::CallWaveform> {
        ASSIGN_OR_RETURN(auto stmt, read->Prepare(c, workspace_id, key));
        ASSIGN_OR_RETURN(bool found, stmt.Step());
        if (!found) return NotFoundError(absl::StrCat("call ", key));
        if (stmt.IsNull(0)) {
          return MakeError(absl::StatusCode::kNotFound, "no_recording",
                           absl::StrCat("call ", key, " has no recording, so no waveform"));
        }
        if (stmt.IsNull(2)) {
          const std::string status = stmt.Text(1);
          const bool waiting = status == "pending" || status == "processing";
          return MakeError(
              absl::StatusCode::kNotFound, "no_waveform",
              waiting ? absl::StrCat("the waveform of call ", key,
                                     " is not computed yet: its analysis is ", status)
                      : absl::StrCat("call ", key, " has no waveform: its analysis is ", status,
                                     " and did not compute one"));
        }
        v1::CallWaveform waveform;
        waveform.set_channels(static_cast<int32_t>(stmt.Int64(2)));
        waveform.set_buckets(static_cast<int32_t>(stmt.Int64(3)));
        waveform.set_duration_seconds(stmt.Double(4));
        waveform.set_peaks(stmt.Text(5));
        return waveform;
      });
}

}  // namespace calleval::calls
