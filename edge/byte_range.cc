#include "edge/byte_range.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace calleval::edge {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A non-empty run of digits that fits in 64 bits.
std::optional<uint64_t> ParseOffset(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t value = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

}  // namespace

RangeDecision DecideRange(std::string_view header, uint64_t size) {
  RangeDecision whole;
  header = Trim(header);
  constexpr std::string_view kUnit = "bytes=";
  if (header.size() < kUnit.size()) return whole;
  for (size_t i = 0; i < kUnit.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kUnit[i]) return whole;
  }
  std::string_view spec = Trim(header.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) return whole;  // several ranges: whole file
  const size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  const std::string_view first_text = Trim(spec.substr(0, dash));
  const std::string_view last_text = Trim(spec.substr(dash + 1));

  RangeDecision decision;
  if (first_text.empty()) {  // suffix: the last n bytes
    std::optional<uint64_t> suffix = ParseOffset(last_text);
    if (!suffix) return whole;
    if (*suffix == 0 || size == 0) {
      decision.outcome = RangeOutcome::kUnsatisfiable;
      return decision;
    }
    const uint64_t length = std::min(*suffix, size);
    decision.outcome = RangeOutcome::kPartial;
    decision.range = {size - length, length};
    return decision;
  }
  std::optional<uint64_t> first = ParseOffset(first_text);
  if (!first) return whole;
  uint64_t last = std::numeric_limits<uint64_t>::max();
  if (!last_text.empty()) {
    std::optional<uint64_t> parsed = ParseOffset(last_text);
    if (!parsed || *parsed < *first) return whole;  // invalid syntax is ignored
    last = *parsed;
  }
  if (*first >= size) {
    decision.outcome = RangeOutcome::kUnsatisfiable;
    return decision;
  }
  last = std::min(last, size - 1);
  decision.outcome = RangeOutcome::kPartial;
  decision.range = {*first, last - *first + 1};
  return decision;
}

}  // namespace calleval::edge
