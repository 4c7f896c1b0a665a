#include "services/runs/carrier.h"

#include "absl/strings/str_cat.h"
#include "services/runs/plivo_carrier.h"
#include "services/runs/telnyx_carrier.h"
#include "services/runs/twilio_carrier.h"

namespace calleval::runs {

absl::StatusOr<std::unique_ptr<CarrierClient>> NewCarrierClient(const CarrierAccount& account,
                                                                const std::string& api_url) {
  if (account.carrier == "twilio") return NewTwilioCarrierClient(account, api_url);
  if (account.carrier == "telnyx") return NewTelnyxCarrierClient(account, api_url);
  if (account.carrier == "plivo") return NewPlivoCarrierClient(account, api_url);
  return absl::InvalidArgumentError(
      absl::StrCat("the telephony carrier \"", account.carrier, "\" is not supported"));
}

absl::StatusOr<std::unique_ptr<MediaDialect>> NewMediaDialect(absl::string_view carrier) {
  if (carrier == "twilio") return NewTwilioMediaDialect();
  if (carrier == "telnyx") return NewTelnyxMediaDialect();
  if (carrier == "plivo") return NewPlivoMediaDialect();
  return absl::InvalidArgumentError(
      absl::StrCat("the telephony carrier \"", carrier, "\" is not supported"));
}

}  // namespace calleval::runs
