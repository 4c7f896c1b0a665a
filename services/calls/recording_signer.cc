#include "services/calls/recording_signer.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/crypto.h"

namespace calleval::calls {

std::string RecordingSigner::Signature(int64_t call_id, int64_t expires) const {
  return HexEncode(HmacSha256(key_, absl::StrCat(call_id, ".", expires)));
}

std::string RecordingSigner::Sign(int64_t call_id, absl::Time now) const {
  // Rounded up to the minute, so repeated reads within a minute return the same link.
  int64_t expires = absl::ToUnixSeconds(now + validity_);
  expires += 60 - expires % 60;
  return absl::StrCat(base_url_, "/recordings/", call_id, "?expires=", expires,
                      "&signature=", Signature(call_id, expires));
}

bool RecordingSigner::Verify(int64_t call_id, absl::string_view expires,
                             absl::string_view signature, absl::Time now) const {
  int64_t expires_at = 0;
  if (!absl::SimpleAtoi(expires, &expires_at)) return false;
  if (!ConstantTimeEquals(Signature(call_id, expires_at), signature)) return false;
  return absl::ToUnixSeconds(now) <= expires_at;
}

}  // namespace calleval::calls
