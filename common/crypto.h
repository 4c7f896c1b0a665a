#pragma once

// Small wrappers over OpenSSL for keys and signatures.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace calleval {

// Cryptographically secure random bytes (OpenSSL RAND_bytes); aborts if the generator fails,
// since nothing safe can be done without it.
std::string RandomBytes(size_t n);
// URL-safe base64 without padding.
std::string Base64Url(absl::string_view bytes);
// Standard base64 (RFC 4648 §4) with padding, as JSON protocols carry binary.
std::string Base64Encode(absl::string_view bytes);
// nullopt when `text` is not padded standard base64.
std::optional<std::string> Base64Decode(absl::string_view text);
std::string HexEncode(absl::string_view bytes);
// Raw 32-byte digests.
std::string Sha256(absl::string_view data);
std::string HmacSha256(absl::string_view key, absl::string_view data);
// Compares in time independent of where the inputs differ (equal lengths assumed public).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Authenticated encryption for secrets at rest: AES-256-GCM under a 32-byte `key`, a random
// 12-byte nonce per message. The sealed form is nonce || ciphertext || 16-byte tag.
// `associated` is bound to the message without being stored in it (e.g. "agent 7"), so a
// sealed value copied onto another row does not open.
std::string Seal(absl::string_view key, absl::string_view plaintext,
                 absl::string_view associated = {});
// The plaintext, or kDataLoss when the value was altered, sealed under another key or with
// other associated data.
absl::StatusOr<std::string> Unseal(absl::string_view key, absl::string_view sealed,
                                   absl::string_view associated = {});

}  // namespace calleval
