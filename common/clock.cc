#include "common/clock.h"

#include "absl/time/clock.h"
namespace calleval {

std::string FormatTimestamp(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string NowTimestamp() { return FormatTimestamp(absl::Now()); }

std::optional<absl::Time> ParseTimestamp(absl::string_view text) {
  absl::Time t;
  std::string error;
  std::string s(text);
  if (absl::ParseTime(absl::RFC3339_full, s, &t, &error)) return t;
  if (absl::ParseTime("%Y-%m-%d%ET%H:%M:%E*S", s, absl::UTCTimeZone(), &t, &error)) return t;
  return std::nullopt;
}

int64_t NowUnixSeconds() { return absl::ToUnixSeconds(absl::Now()); }

}  // namespace calleval
