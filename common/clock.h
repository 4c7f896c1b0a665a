#pragma once

// Time helpers: the API's timestamps are ISO 8601 UTC with a trailing Z (docs/api.md §1).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace calleval {

// "2026-11-22T10:15:00Z" (whole seconds, as docs/api.md §1 writes them).
std::string FormatTimestamp(absl::Time t);
std::string NowTimestamp();
// Accepts RFC 3339 / ISO 8601 with a zone ("Z" or "+02:00"), and a date-time without zone
// taken as UTC. Returns nullopt for anything else.
std::optional<absl::Time> ParseTimestamp(absl::string_view text);
int64_t NowUnixSeconds();

}  // namespace calleval
