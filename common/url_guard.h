#pragma once

// The outbound URL guard of docs/api.md §8: every URL the service fetches or dials must be http(s)
// (ws(s) where a caller allows it) and reach only public unicast addresses.
//
// The guard runs twice. CheckUrlLiteral() runs at request time on the URL as written: it
// rejects disallowed schemes, every spelling of a non-public IP literal (0x7f.1, 2130706433,
// 0177.0.0.1, [::ffff:7f00:1], NAT64/6to4/Teredo embeddings, ...) and localhost names. Host
// names are otherwise accepted there, because only the resolver knows where they point; the
// fetcher checks the resolved address again with IsPublicAddress() at connect time, which is
// what defeats DNS rebinding.
//
// Credentials in the URL (https://user:secret@host/r.wav) are accepted: recording providers
// use them for basic auth. They never appear in messages (see RedactUrl()).
//
// Error codes: "invalid_url" when the text is not an absolute URL with a usable host;
// "url_not_public" when the scheme is not allowed (docs/api.md §2: "must be http(s) and public") or
// the host is not public. Both are 422 (kInvalidArgument) with a details entry for the field.

#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace calleval {

inline constexpr absl::string_view kInvalidUrlCode = "invalid_url";
inline constexpr absl::string_view kUrlNotPublicCode = "url_not_public";

struct UrlGuardOptions {
  // Lower case; compared case-insensitively.
  std::vector<std::string> allowed_schemes = {"http", "https"};
  // CALLEVAL_ALLOW_PRIVATE_HOSTS: an entry matches only the host exactly as written in the URL
  // (ASCII case aside; an IPv6 entry may be written with or without brackets). "127.0.0.1"
  // does not allow "localhost", "127.1", "0x7f.1" or "127.0.0.1.".
  std::vector<std::string> allowed_hosts;
};

// Parses a comma-separated CALLEVAL_ALLOW_PRIVATE_HOSTS value (blanks around entries ignored).
std::vector<std::string> ParseAllowedHosts(absl::string_view comma_list);

struct ParsedUrl {
  std::string scheme;     // lower case
  std::string host;       // exactly as written (IPv6 literals keep their brackets)
  std::string curl_host;  // as libcurl will use it (IPv4 normalized to dotted quad)
  int port = 0;           // explicit, else the scheme's default (0 when it has none)
  std::string path;       // path and query, at least "/"
  bool has_credentials = false;
  bool allowed_host = false;  // host is in UrlGuardOptions::allowed_hosts
  std::string url;            // libcurl's normalized form of the whole URL
};

// Parses an absolute URL: the scheme check and the syntax of the host as written (strictly, and
// consistently with libcurl's reading of it), but not whether the host is public.
absl::StatusOr<ParsedUrl> ParseUrl(absl::string_view url, const UrlGuardOptions& options,
                                   absl::string_view field = "recording_url");

// Request-time check on the literal host (see the file comment). Returns the parsed URL so
// callers do not parse twice.
absl::StatusOr<ParsedUrl> CheckAndParseUrl(absl::string_view url, const UrlGuardOptions& options,
                                           absl::string_view field = "recording_url");
absl::Status CheckUrlLiteral(absl::string_view url, const UrlGuardOptions& options,
                             absl::string_view field = "recording_url");

// Why an address is not a public unicast address, as a phrase that completes "X is ...":
// "a loopback address", "an IPv4-mapped form of 10.0.0.1, a private address". nullopt when the
// address is public.
std::optional<std::string> NonPublicReason(const in_addr& addr);
std::optional<std::string> NonPublicReason(const in6_addr& addr);
// Any family other than AF_INET/AF_INET6 is never public.
std::optional<std::string> NonPublicReason(const struct sockaddr* addr);

bool IsPublicAddress(const in_addr& addr);
bool IsPublicAddress(const in6_addr& addr);
bool IsPublicAddress(const struct sockaddr* addr);

// Parses an IPv4 literal the way inet_aton() and URL parsers do: one to four parts, each
// decimal, octal (leading 0) or hex (0x), the last part filling the remaining bytes.
// "0x7f.1" -> 127.0.0.1. nullopt when it is not such a literal or a part overflows.
std::optional<in_addr> ParseIpv4Literal(absl::string_view text);

// The textual form of an address ("127.0.0.1", "::1") for messages.
std::string AddressToString(const struct sockaddr* addr);

// `url` without its user:password@ part, for messages and logs. Returns `url` unchanged when it
// does not parse.
std::string RedactUrl(absl::string_view url);

}  // namespace calleval
