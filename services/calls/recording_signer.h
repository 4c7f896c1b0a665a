#pragma once

// Presigned links to stored recordings (docs/api.md §2):
// {base}/recordings/{call_id}?expires=&signature= where signature = hex(HMAC-SHA256(key,
// "<call_id>.<expires>")). The service serves the link itself; a tampered or expired link gets 403.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace calleval::calls {

class RecordingSigner {
 public:
  RecordingSigner(std::string key, std::string public_base_url, absl::Duration validity)
      : key_(std::move(key)), base_url_(std::move(public_base_url)), validity_(validity) {}

  // A link valid for `validity` from `now`.
  std::string Sign(int64_t call_id, absl::Time now) const;
  // True when `signature` is right for (call_id, expires) and `expires` is not past.
  bool Verify(int64_t call_id, absl::string_view expires, absl::string_view signature,
              absl::Time now) const;

 private:
  std::string Signature(int64_t call_id, int64_t expires) const;

  std::string key_;
  std::string base_url_;
  absl::Duration validity_;
};

}  // namespace calleval::calls
