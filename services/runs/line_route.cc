#include "services/runs/line_route.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"

namespace calleval::runs {
namespace {

// Truncated HMAC-SHA256: 128 bits, far beyond what online guessing at an edge can reach.
constexpr size_t kMacBytes = 16;
// Longer than any HOST:PORT (a bracketed IPv6 address with a port is at most 47 characters;
// DNS names at most 253): a longer route is refused before any MAC is computed.
constexpr size_t kMaxAddressBytes = 300;

// The route's key: derived from the secret, so the credential itself never keys anything but
// the comparison it was made for.
std::string RouteKey(absl::string_view secret) {
  return HmacSha256(secret, "calleval phone line route key v1");
}

// The MAC binds the address to this line's random part: a route copied from one token onto
// another random part does not verify, so the edge makes no connection for a token no process
// minted.
std::string RouteMac(absl::string_view secret, absl::string_view random,
                     absl::string_view address) {
  return HmacSha256(RouteKey(secret), absl::StrCat(random, "\n", address)).substr(0, kMacBytes);
}

std::vector<absl::string_view> Secrets(absl::string_view credential) {
  return absl::StrSplit(credential, '\n', absl::SkipEmpty());
}

}  // namespace

std::string RoutedLineToken(absl::string_view random, absl::string_view address,
                            absl::string_view credential) {
  const std::vector<absl::string_view> secrets = Secrets(credential);
  const absl::string_view secret = secrets.empty() ? absl::string_view() : secrets.front();
  return absl::StrCat(random, ".", Base64Url(address), ".",
                      Base64Url(RouteMac(secret, random, address)));
}

std::optional<std::string> VerifiedLineHolder(absl::string_view token,
                                              absl::string_view credential) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() ||
      parts[1].size() > kMaxAddressBytes * 4 / 3 + 4) {
    return std::nullopt;
  }
  std::string address, mac;
  // Only the canonical encoding: the decoder ignores the spare low bits of a last character, so
  // several spellings would otherwise pass for one route.
  if (!absl::WebSafeBase64Unescape(parts[1], &address) ||
      !absl::WebSafeBase64Unescape(parts[2], &mac) || address.empty() ||
      mac.size() != kMacBytes || Base64Url(address) != parts[1] || Base64Url(mac) != parts[2]) {
    return std::nullopt;
  }
  bool verified = false;
  // Every secret is tried, whichever matches: the time taken says nothing about which one did.
  for (absl::string_view secret : Secrets(credential)) {
    verified |= ConstantTimeEquals(RouteMac(secret, parts[0], address), mac);
  }
  if (!verified) return std::nullopt;
  return address;
}

std::optional<std::string> VerifiedLineHolderOfPath(absl::string_view path,
                                                    absl::string_view credential) {
  if (!absl::ConsumePrefix(&path, "/media/")) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) return std::nullopt;
  return VerifiedLineHolder(parts[1], credential);
}

}  // namespace calleval::runs
