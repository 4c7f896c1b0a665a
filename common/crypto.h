#pragma once

// Small wrappers over OpenSSL for keys and signatures.

#include <string>

#include "absl/strings/string_view.h"

namespace calleval {

// Cryptographically secure random bytes (OpenSSL RAND_bytes); aborts if the generator fails,
// since nothing safe can be done without it.
std::string RandomBytes(size_t n);
// URL-safe base64 without padding.
std::string Base64Url(absl::string_view bytes);
std::string HexEncode(absl::string_view bytes);
// Raw 32-byte digests.
std::string Sha256(absl::string_view data);
std::string HmacSha256(absl::string_view key, absl::string_view data);
// Compares in time independent of where the inputs differ (equal lengths assumed public).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace calleval
