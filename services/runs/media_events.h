#pragma once

// What the carriers' JSON media events have in common (Twilio Media Streams, Telnyx media
// streaming, Plivo audio streams): the audio rides base64 in `media.payload`, and the other
// fields read are strings that may be absent.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace calleval::runs {

// The bytes of `event`'s media.payload; InvalidArgument naming `dialect` ("Twilio", "Telnyx",
// "Plivo") when it is missing, not a string, or not base64.
absl::StatusOr<std::string> MediaPayload(const nlohmann::json& event, absl::string_view dialect);

// object[key] when `object` is an object and that is a string; "" otherwise.
std::string JsonString(const nlohmann::json& object, const char* key);

}  // namespace calleval::runs
