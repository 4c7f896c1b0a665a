#pragma once

// Twilio as the phone channel's carrier (docs/channels.md, Twilio): calls placed with the
// Programmable Voice REST API (`POST /2010-04-01/Accounts/{AccountSid}/Calls.json` with
// `<Connect><Stream>` TwiML), its status and answering-machine callbacks verified by
// X-Twilio-Signature, and Media Streams spoken from the application's side.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "services/runs/carrier.h"

namespace calleval::runs {

using FormFields = std::vector<std::pair<std::string, std::string>>;

// application/x-www-form-urlencoded, both ways ('+' is a space; bad escapes are kept as sent).
FormFields ParseForm(absl::string_view body);
std::string EncodeForm(const FormFields& fields);

// Twilio's request signature: base64 of the HMAC-SHA1, keyed with the account's auth token, of
// the full URL the request was sent to followed by every form parameter sorted by name, each
// name then its value, with no separators.
std::string TwilioSignature(absl::string_view auth_token, absl::string_view url, FormFields params);

// The TwiML that connects the answered call to the media websocket.
std::string TwilioStreamTwiml(absl::string_view media_url);

// The status callback's fields as the run's events: CallStatus (ringing, in-progress,
// completed, busy, no-answer, failed, canceled) and AnsweredBy (machine_* and fax: a machine).
std::vector<CarrierEvent> TwilioEvents(const FormFields& fields);

std::unique_ptr<CarrierClient> NewTwilioCarrierClient(const CarrierAccount& account,
                                                      const std::string& api_url);
// Media Streams from the application's side: reads connected/start/media/mark/stop, writes
// media/mark/clear.
std::unique_ptr<MediaDialect> NewTwilioMediaDialect();

}  // namespace calleval::runs
