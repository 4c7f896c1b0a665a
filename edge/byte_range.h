#pragma once

// Single byte ranges of a file (RFC 9110 §14): what a browser's audio player asks for to seek.

#include <cstdint>
#include <optional>
#include <string_view>

namespace calleval::edge {

struct ByteRange {
  uint64_t first = 0;   // offset of the first byte sent
  uint64_t length = 0;  // bytes sent
};

enum class RangeOutcome {
  kWhole,          // no Range header, or one we do not serve (several ranges, other units,
                   // malformed): send the whole file with 200, as RFC 9110 allows
  kPartial,        // send `range` with 206 and Content-Range
  kUnsatisfiable,  // 416 with Content-Range: bytes */size
};

struct RangeDecision {
  RangeOutcome outcome = RangeOutcome::kWhole;
  ByteRange range;
};

// Decides how to answer a `Range` header value for a file of `size` bytes. Accepts
// `bytes=a-b`, `bytes=a-` and `bytes=-n` (the last n bytes); b past the end is clamped.
RangeDecision DecideRange(std::string_view header, uint64_t size);

}  // namespace calleval::edge
