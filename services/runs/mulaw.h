#pragma once

// G.711 mu-law, the 8 kHz telephone encoding Twilio Media Streams carries.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace calleval::runs {

uint8_t MuLawEncode(int16_t sample);
int16_t MuLawDecode(uint8_t byte);

// One byte per sample.
std::string MuLawEncode(absl::Span<const int16_t> samples);
std::vector<int16_t> MuLawDecode(absl::string_view bytes);

}  // namespace calleval::runs
