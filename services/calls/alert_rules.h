#pragma once

// Alert rules over a workspace's production figures (docs/api.md §5.11), the parts that need no
// database: reading a rule's figure, comparison and window; the damping state machine that
// decides when a rule fires and resolves; and the webhook's bodies and signature.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace calleval::calls {

// What a rule watches.
struct AlertFigure {
  enum class Kind {
    kLatencyP50,       // latency.p50_ms
    kLatencyP95,       // latency.p95_ms
    kLatencyMean,      // latency.mean_ms
    kPassRate,         // pass_rate: runs passed / (passed + failed)
    kCallsFailedRate,  // calls.failed_rate: calls settled failed / settled
    kMetricOutcome,    // metric.<id>.<outcome>_rate
  };
  Kind kind = Kind::kLatencyP95;
  int64_t metric_id = 0;  // kMetricOutcome
  std::string outcome;    // kMetricOutcome
};

// 422 validation_failed naming `figure` for anything but the figures above.
absl::StatusOr<AlertFigure> ParseAlertFigure(absl::string_view text);

// `>`, `>=`, `<`, `<=`; 422 naming `op` otherwise.
absl::Status CheckAlertOp(absl::string_view op);
bool AlertConditionHolds(absl::string_view op, double value, double threshold);

// The calls (or runs) a figure is computed over: the last `seconds` ("<n>m|h|d", 5m..30d) or
// the last `count` settled ones ("<n> calls", 10..10000). Exactly one is set.
struct AlertWindow {
  int64_t seconds = 0;
  int64_t count = 0;
};
inline constexpr int64_t kMinWindowSeconds = 5 * 60;
inline constexpr int64_t kMaxWindowSeconds = 30 * 86400;
inline constexpr int64_t kMinWindowCount = 10;
inline constexpr int64_t kMaxWindowCount = 10000;
// 422 naming `window` when malformed or out of range.
absl::StatusOr<AlertWindow> ParseAlertWindow(absl::string_view text);

// How flapping is damped (docs/api.md §5.11). An evaluation counts towards a streak only when
// it saw a new sample since the last counted one, or `min_spacing` has passed since then: a
// burst of evaluations on the same data is one piece of evidence, not three.
struct AlertDamping {
  // A firing rule resolves after the condition was false on this many counted evaluations in a
  // row.
  int resolve_after = 3;
  // A rule that resolved less than `quiet_period` ago fires again only after the condition was
  // true on this many counted evaluations in a row; otherwise one is enough.
  int refire_after = 3;
  absl::Duration quiet_period = absl::Minutes(10);
  absl::Duration min_spacing = absl::Seconds(60);
};

// What a rule remembers between evaluations.
struct AlertState {
  std::string state = "insufficient_data";  // ok | firing | insufficient_data
  int streak = 0;                           // counted evaluations in a row pointing to a change
  int64_t streak_time = 0;                  // Unix seconds of the last counted evaluation (0: none)
  int64_t streak_mark = 0;                  // the newest sample seen by it
  int64_t resolved_time = 0;                // Unix seconds of the last resolution (0: never)
};

// One evaluation: `holds` is the condition on the figure, nullopt when there were fewer samples
// than the rule's minimum (nothing changes then). `newest_sample` identifies the newest call or
// run in the window. `event` is "firing" or "resolved" when the state changed, else empty.
struct AlertStep {
  AlertState next;
  std::string event;
};
AlertStep StepAlert(const AlertState& current, std::optional<bool> holds, int64_t newest_sample,
                    int64_t now, const AlertDamping& damping);

// The X-Calleval-Signature value: "t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
std::string AlertSignature(absl::string_view secret, int64_t t, absl::string_view body);

// What a notification says, in the rule's format ("json" or "slack").
struct AlertNotice {
  std::string event;  // firing | resolved
  nlohmann::json rule;
  std::optional<double> value;
  double threshold = 0;
  int64_t samples = 0;
  std::string window;
  std::string at;  // RFC 3339
};
std::string AlertBody(absl::string_view format, const AlertNotice& notice);

}  // namespace calleval::calls
