#include "common/url_guard.h"

#include <arpa/inet.h>
#include <curl/curl.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/errors.h"

namespace calleval {
namespace {

constexpr size_t kMaxUrlLength = 8192;

struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
struct CurlFree {
  void operator()(char* p) const { curl_free(p); }
};
using CurlUrlPtr = std::unique_ptr<CURLU, CurlUrlDeleter>;
using CurlString = std::unique_ptr<char, CurlFree>;

absl::Status InvalidUrl(absl::string_view field, absl::string_view issue) {
  return ValidationError(kInvalidUrlCode, absl::StrCat(field, " is not a valid URL: ", issue),
                         {{std::string(field), std::string(issue)}});
}

absl::Status NotPublic(absl::string_view field, absl::string_view issue) {
  return ValidationError(kUrlNotPublicCode,
                         absl::StrCat(field, " must be a public http(s) URL: ", issue),
                         {{std::string(field), std::string(issue)}});
}

// One row of a special-purpose address table; `reason` completes "X is ...".
struct V4Range {
  uint32_t network;
  int prefix;
  const char* reason;
};

constexpr uint32_t V4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return (a << 24) | (b << 16) | (c << 8) | d;
}

// Most specific first: the first match names the reason. IANA IPv4 Special-Purpose Address
// Registry, minus the few entries that are globally reachable anycast (192.31.196/24 AS112,
// 192.52.193/24 AMT, 192.175.48/24 AS112).
constexpr V4Range kV4NonPublic[] = {
    {V4(0, 0, 0, 0), 32, "the unspecified address"},
    {V4(0, 0, 0, 0), 8, "an unspecified (this-network) address"},
    {V4(10, 0, 0, 0), 8, "a private address"},
    {V4(100, 64, 0, 0), 10, "a carrier-grade NAT (shared) address"},
    {V4(127, 0, 0, 0), 8, "a loopback address"},
    {V4(169, 254, 169, 254), 32, "the cloud metadata address (link-local)"},
    {V4(169, 254, 0, 0), 16, "a link-local address"},
    {V4(172, 16, 0, 0), 12, "a private address"},
    {V4(192, 0, 0, 0), 24, "an IETF protocol assignment (reserved) address"},
    {V4(192, 0, 2, 0), 24, "a documentation address"},
    {V4(192, 88, 99, 0), 24, "a 6to4 relay anycast (reserved) address"},
    {V4(192, 168, 0, 0), 16, "a private address"},
    {V4(198, 18, 0, 0), 15, "a benchmarking address"},
    {V4(198, 51, 100, 0), 24, "a documentation address"},
    {V4(203, 0, 113, 0), 24, "a documentation address"},
    {V4(224, 0, 0, 0), 4, "a multicast address"},
    {V4(255, 255, 255, 255), 32, "the broadcast address"},
    {V4(240, 0, 0, 0), 4, "a reserved address"},
};

bool InV4Range(uint32_t host_order, uint32_t network, int prefix) {
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (host_order & mask) == (network & mask);
}

std::string V4ToString(const in_addr& addr) {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &addr, buf, sizeof buf);
  return buf;
}

std::string V6ToString(const in6_addr& addr) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &addr, buf, sizeof buf);
  return buf;
}

in_addr V4FromBytes(const uint8_t* b, uint8_t xor_mask = 0) {
  in_addr out;
  std::memcpy(&out, b, 4);
  if (xor_mask != 0) {
    auto* p = reinterpret_cast<uint8_t*>(&out);
    for (int i = 0; i < 4; ++i) p[i] ^= xor_mask;
  }
  return out;
}

// "an IPv4-mapped form of 127.0.0.1, a loopback address" when the embedded address is not
// public.
std::optional<std::string> EmbeddedReason(absl::string_view form, const in_addr& embedded) {
  std::optional<std::string> inner = NonPublicReason(embedded);
  if (!inner) return std::nullopt;
  return absl::StrCat(form, " form of ", V4ToString(embedded), ", ", *inner);
}

bool V6PrefixIs(const uint8_t* b, std::initializer_list<uint8_t> prefix_bytes) {
  size_t i = 0;
  for (uint8_t p : prefix_bytes) {
    if (b[i++] != p) return false;
  }
  return true;
}

bool AllZero(const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// Parses one inet_aton part: decimal, octal with a leading 0, or hex with 0x.
std::optional<uint64_t> ParseIpv4Part(absl::string_view part) {
  if (part.empty()) return std::nullopt;
  int base = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    base = 16;
    part.remove_prefix(2);
    if (part.empty()) return 0;  // "0x" is zero for inet_aton and WHATWG alike.
  } else if (part.size() >= 2 && part[0] == '0') {
    base = 8;
    part.remove_prefix(1);
  }
  uint64_t value = 0;
  for (char c : part) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (base == 16 && absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      digit = absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    } else {
      return std::nullopt;
    }
    if (digit >= base) return std::nullopt;
    value = value * base + digit;
    if (value > 0xffffffffULL) return std::nullopt;
  }
  return value;
}

// A label that makes the host an IPv4 literal attempt when it is the last one (WHATWG "ends in a
// number"): "1", "0x7f", "0x".
bool IsNumericLabel(absl::string_view label) {
  if (label.empty()) return false;
  if (label.size() >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X')) {
    for (char c : label.substr(2)) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  }
  for (char c : label) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool IsLocalHostName(absl::string_view lower_name) {
  static constexpr absl::string_view kNames[] = {
      "localhost",     "localhost.localdomain", "localhost6", "localhost6.localdomain6",
      "ip6-localhost", "ip6-loopback",
  };
  for (absl::string_view n : kNames) {
    if (lower_name == n) return true;
  }
  return absl::EndsWith(lower_name, ".localhost");
}

bool IsHostNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// Normalizes an allowlist entry or a written host for comparison: brackets off, lower case.
std::string AllowKey(absl::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return absl::AsciiStrToLower(host);
}

int DefaultPort(absl::string_view scheme) {
  if (scheme == "http" || scheme == "ws") return 80;
  if (scheme == "https" || scheme == "wss") return 443;
  return 0;
}

// The pieces of the authority as written, split the way libcurl splits them (first '@').
struct RawAuthority {
  absl::string_view userinfo;
  absl::string_view host;
  absl::string_view port;
  bool has_userinfo = false;
};

size_t SchemeEnd(absl::string_view url) {
  if (url.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(url[0]))) {
    return absl::string_view::npos;
  }
  for (size_t i = 1; i < url.size(); ++i) {
    char c = url[i];
    if (c == ':') return i;
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return absl::string_view::npos;
    }
  }
  return absl::string_view::npos;
}

// What a host as written is, once its syntax is known to be valid.
struct HostInfo {
  enum Kind { kName, kIpv4, kIpv6 } kind = kName;
  in_addr v4{};
  in6_addr v6{};
  bool has_zone = false;
  std::string name;  // kName: lower case, without a trailing dot
};

absl::StatusOr<HostInfo> ClassifyHost(absl::string_view field, const std::string& host) {
  HostInfo info;
  if (host.front() == '[') {
    info.kind = HostInfo::kIpv6;
    std::string inner = host.substr(1, host.size() - 2);
    size_t zone = inner.find('%');
    info.has_zone = zone != std::string::npos;
    if (info.has_zone) inner.resize(zone);
    if (inet_pton(AF_INET6, inner.c_str(), &info.v6) != 1) {
      return InvalidUrl(field, absl::StrCat("host ", host, " is not a valid IPv6 address"));
    }
    return info;
  }
  for (char c : host) {
    if (!IsHostNameChar(c)) {
      return InvalidUrl(field, absl::StrCat("host \"", host,
                                            "\" may contain only letters, digits, '-', '_' and "
                                            "'.' (write internationalized names in punycode)"));
    }
  }
  absl::string_view name = host;
  absl::ConsumeSuffix(&name, ".");
  if (name.empty() || name.front() == '.' || name.back() == '.' ||
      name.find("..") != absl::string_view::npos) {
    return InvalidUrl(field, absl::StrCat("host \"", host, "\" has an empty label"));
  }
  absl::string_view last_label = name.substr(name.rfind('.') + 1);
  if (IsNumericLabel(last_label)) {
    std::optional<in_addr> v4 = ParseIpv4Literal(name);
    if (!v4) {
      return InvalidUrl(field, absl::StrCat("host ", host, " is not a valid IPv4 address"));
    }
    info.kind = HostInfo::kIpv4;
    info.v4 = *v4;
    return info;
  }
  info.name = absl::AsciiStrToLower(name);
  return info;
}

}  // namespace

std::vector<std::string> ParseAllowedHosts(absl::string_view comma_list) {
  std::vector<std::string> hosts;
  for (absl::string_view entry : absl::StrSplit(comma_list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (!entry.empty()) hosts.emplace_back(entry);
  }
  return hosts;
}

std::optional<in_addr> ParseIpv4Literal(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  if (parts.empty() || parts.size() > 4) return std::nullopt;
  uint64_t value = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::optional<uint64_t> part = ParseIpv4Part(parts[i]);
    if (!part) return std::nullopt;
    if (i + 1 < parts.size()) {
      if (*part > 255) return std::nullopt;
      value = (value << 8) | *part;
    } else {
      int remaining_bytes = 4 - static_cast<int>(i);
      uint64_t limit = remaining_bytes == 4 ? 0xffffffffULL : (1ULL << (8 * remaining_bytes)) - 1;
      if (*part > limit) return std::nullopt;
      value = (value << (8 * remaining_bytes)) | *part;
    }
  }
  in_addr out;
  out.s_addr = htonl(static_cast<uint32_t>(value));
  return out;
}

std::optional<std::string> NonPublicReason(const in_addr& addr) {
  uint32_t a = ntohl(addr.s_addr);
  for (const V4Range& r : kV4NonPublic) {
    if (InV4Range(a, r.network, r.prefix)) return std::string(r.reason);
  }
  return std::nullopt;
}

std::optional<std::string> NonPublicReason(const in6_addr& addr) {
  const uint8_t* b = addr.s6_addr;
  if (AllZero(b, 16)) return std::string("the unspecified address");
  if (AllZero(b, 15) && b[15] == 1) return std::string("a loopback address");
  // ::ffff:a.b.c.d
  if (AllZero(b, 10) && b[10] == 0xff && b[11] == 0xff) {
    return EmbeddedReason("an IPv4-mapped", V4FromBytes(b + 12));
  }
  // ::ffff:0:a.b.c.d (SIIT, RFC 2765)
  if (AllZero(b, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0) {
    return EmbeddedReason("an IPv4-translated", V4FromBytes(b + 12));
  }
  // ::a.b.c.d (deprecated IPv4-compatible)
  if (AllZero(b, 12)) return EmbeddedReason("an IPv4-compatible", V4FromBytes(b + 12));
  // 64:ff9b::/96 well-known NAT64 prefix
  if (V6PrefixIs(b, {0x00, 0x64, 0xff, 0x9b}) && AllZero(b + 4, 8)) {
    return EmbeddedReason("a NAT64", V4FromBytes(b + 12));
  }
  // 64:ff9b:1::/48 local-use NAT64 (RFC 8215)
  if (V6PrefixIs(b, {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01})) {
    return std::string("a local-use NAT64 (private) address");
  }
  if (b[0] == 0xff) return std::string("a multicast address");
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return std::string("a link-local address");
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return std::string("a site-local address");
  if ((b[0] & 0xfe) == 0xfc) return std::string("a unique local (private) address");
  if (V6PrefixIs(b, {0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00})) {
    return std::string("a discard-only address");
  }
  // Only 2000::/3 is allocated as global unicast.
  if ((b[0] & 0xe0) != 0x20) return std::string("a reserved address");
  if (V6PrefixIs(b, {0x20, 0x01, 0x0d, 0xb8})) return std::string("a documentation address");
  if (b[0] == 0x3f && b[1] == 0xff && (b[2] & 0xf0) == 0x00) {
    return std::string("a documentation address");  // 3fff::/20, RFC 9637
  }
  if (V6PrefixIs(b, {0x20, 0x01, 0x00, 0x02, 0x00, 0x00})) {
    return std::string("a benchmarking address");
  }
  if (V6PrefixIs(b, {0x20, 0x01, 0x00}) && (b[3] & 0xf0) == 0x10) {
    return std::string("a deprecated ORCHID (reserved) address");
  }
  // 2002::/16 6to4: the IPv4 address follows the prefix.
  if (b[0] == 0x20 && b[1] == 0x02) return EmbeddedReason("a 6to4", V4FromBytes(b + 2));
  // 2001::/32 Teredo: server IPv4 in bits 32-63, client IPv4 inverted in the last 32 bits.
  if (V6PrefixIs(b, {0x20, 0x01, 0x00, 0x00})) {
    if (auto reason = EmbeddedReason("a Teredo", V4FromBytes(b + 12, 0xff))) return reason;
    return EmbeddedReason("a Teredo (server)", V4FromBytes(b + 4));
  }
  return std::nullopt;
}

std::optional<std::string> NonPublicReason(const struct sockaddr* addr) {
  if (addr == nullptr) return std::string("no address");
  if (addr->sa_family == AF_INET) {
    return NonPublicReason(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr);
  }
  if (addr->sa_family == AF_INET6) {
    return NonPublicReason(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  }
  return std::string("not an internet address");
}

bool IsPublicAddress(const in_addr& addr) { return !NonPublicReason(addr).has_value(); }
bool IsPublicAddress(const in6_addr& addr) { return !NonPublicReason(addr).has_value(); }
bool IsPublicAddress(const struct sockaddr* addr) { return !NonPublicReason(addr).has_value(); }

std::string AddressToString(const struct sockaddr* addr) {
  if (addr == nullptr) return "(none)";
  if (addr->sa_family == AF_INET) {
    return V4ToString(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr);
  }
  if (addr->sa_family == AF_INET6) {
    return V6ToString(reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  }
  return absl::StrCat("(address family ", addr->sa_family, ")");
}

std::string RedactUrl(absl::string_view url) {
  size_t sep = url.find("://");
  if (sep == absl::string_view::npos) return std::string(url);
  size_t start = sep + 3;
  size_t end = url.find_first_of("/?#", start);
  if (end == absl::string_view::npos) end = url.size();
  size_t at = url.substr(start, end - start).rfind('@');
  if (at == absl::string_view::npos) return std::string(url);
  return absl::StrCat(url.substr(0, start), url.substr(start + at + 1));
}

absl::StatusOr<ParsedUrl> ParseUrl(absl::string_view url, const UrlGuardOptions& options,
                                   absl::string_view field) {
  if (url.empty()) return InvalidUrl(field, "is empty");
  if (url.size() > kMaxUrlLength) {
    return InvalidUrl(field, absl::StrCat("is longer than ", kMaxUrlLength, " characters"));
  }
  for (char c : url) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      return InvalidUrl(field, "contains spaces or control characters");
    }
  }
  size_t scheme_end = SchemeEnd(url);
  if (scheme_end == absl::string_view::npos) {
    return InvalidUrl(field, "must be an absolute URL such as https://host/file.wav");
  }
  ParsedUrl parsed;
  parsed.scheme = absl::AsciiStrToLower(url.substr(0, scheme_end));
  bool scheme_allowed = false;
  for (const std::string& s : options.allowed_schemes) {
    if (absl::EqualsIgnoreCase(s, parsed.scheme)) scheme_allowed = true;
  }
  if (!scheme_allowed) {
    return NotPublic(field, absl::StrCat("scheme \"", parsed.scheme, "\" is not allowed (use ",
                                         absl::StrJoin(options.allowed_schemes, " or "), ")"));
  }
  absl::string_view rest = url.substr(scheme_end + 1);
  if (!absl::ConsumePrefix(&rest, "//")) {
    return InvalidUrl(field, absl::StrCat("must start with ", parsed.scheme, "://"));
  }

  // The authority as written; libcurl is lenient ("http:///x" means host x, "%31" decodes), so
  // the written form is checked strictly here and must agree with libcurl's parse below.
  size_t authority_end = rest.find_first_of("/?#");
  absl::string_view authority = rest.substr(0, authority_end);
  if (authority.find('\\') != absl::string_view::npos) {
    return InvalidUrl(field, "contains a backslash in the host part");
  }
  RawAuthority raw;
  size_t at = authority.find('@');
  if (at != absl::string_view::npos) {
    if (authority.find('@', at + 1) != absl::string_view::npos) {
      return InvalidUrl(field, "contains more than one '@' before the path");
    }
    raw.has_userinfo = true;
    raw.userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
  }
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == absl::string_view::npos)
      return InvalidUrl(field, "has an unterminated [ in the host");
    raw.host = authority.substr(0, close + 1);
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidUrl(field, "has characters after the ] of the host");
      raw.port = after.substr(1);
    }
  } else {
    size_t colon = authority.find(':');
    raw.host = authority.substr(0, colon);
    if (colon != absl::string_view::npos) raw.port = authority.substr(colon + 1);
  }
  if (raw.host.empty()) return InvalidUrl(field, "has no host");
  parsed.host = std::string(raw.host);
  parsed.has_credentials = raw.has_userinfo;
  parsed.port = DefaultPort(parsed.scheme);
  if (!raw.port.empty()) {
    int port = 0;
    bool digits = true;
    for (char c : raw.port) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
    if (!digits || raw.port.size() > 5 || !absl::SimpleAtoi(raw.port, &port) || port < 1 ||
        port > 65535) {
      return InvalidUrl(field, absl::StrCat("port \"", raw.port, "\" is not in 1-65535"));
    }
    parsed.port = port;
  }

  absl::StatusOr<HostInfo> info = ClassifyHost(field, parsed.host);
  if (!info.ok()) return info.status();

  CurlUrlPtr handle(curl_url());
  if (!handle) return absl::ResourceExhaustedError("out of memory parsing a URL");
  std::string url_string(url);
  CURLUcode rc =
      curl_url_set(handle.get(), CURLUPART_URL, url_string.c_str(), CURLU_NON_SUPPORT_SCHEME);
  if (rc != CURLUE_OK) return InvalidUrl(field, curl_url_strerror(rc));
  char* part = nullptr;
  if (curl_url_get(handle.get(), CURLUPART_HOST, &part, 0) != CURLUE_OK || part == nullptr) {
    return InvalidUrl(field, "has no host");
  }
  parsed.curl_host = CurlString(part).get();
  part = nullptr;
  if (curl_url_get(handle.get(), CURLUPART_URL, &part, 0) == CURLUE_OK && part != nullptr) {
    parsed.url = CurlString(part).get();
  }
  part = nullptr;
  if (curl_url_get(handle.get(), CURLUPART_PATH, &part, 0) == CURLUE_OK && part != nullptr) {
    parsed.path = CurlString(part).get();
  }
  part = nullptr;
  if (curl_url_get(handle.get(), CURLUPART_QUERY, &part, 0) == CURLUE_OK && part != nullptr) {
    absl::StrAppend(&parsed.path, "?", CurlString(part).get());
  }
  if (parsed.path.empty()) parsed.path = "/";

  // libcurl must connect to the host that was checked.
  bool same_host = absl::EqualsIgnoreCase(parsed.curl_host, parsed.host);
  if (info->kind == HostInfo::kIpv4) {
    same_host = same_host || parsed.curl_host == V4ToString(info->v4);
  } else if (info->kind == HostInfo::kIpv6) {
    std::string curl_inner = parsed.curl_host;
    if (curl_inner.size() >= 2 && curl_inner.front() == '[') {
      curl_inner = curl_inner.substr(1, curl_inner.size() - 2);
    }
    in6_addr curl_v6;
    same_host = inet_pton(AF_INET6, curl_inner.c_str(), &curl_v6) == 1 &&
                std::memcmp(&curl_v6, &info->v6, sizeof curl_v6) == 0;
  }
  if (!same_host) return InvalidUrl(field, absl::StrCat("host ", parsed.host, " is ambiguous"));

  for (const std::string& entry : options.allowed_hosts) {
    if (AllowKey(entry) == AllowKey(parsed.host)) parsed.allowed_host = true;
  }
  return parsed;
}

absl::StatusOr<ParsedUrl> CheckAndParseUrl(absl::string_view url, const UrlGuardOptions& options,
                                           absl::string_view field) {
  absl::StatusOr<ParsedUrl> parsed = ParseUrl(url, options, field);
  if (!parsed.ok()) return parsed.status();
  const std::string& host = parsed->host;
  absl::StatusOr<HostInfo> info = ClassifyHost(field, host);
  if (!info.ok()) return info.status();
  switch (info->kind) {
    case HostInfo::kIpv6:
      if (info->has_zone) {
        return NotPublic(field, absl::StrCat("host ", host,
                                             " has a zone id; scoped addresses are never public"));
      }
      if (parsed->allowed_host) return parsed;
      if (auto reason = NonPublicReason(info->v6)) {
        return NotPublic(field, absl::StrCat("host ", host, " is ", *reason));
      }
      return parsed;
    case HostInfo::kIpv4: {
      if (parsed->allowed_host) return parsed;
      std::string canonical = V4ToString(info->v4);
      if (auto reason = NonPublicReason(info->v4)) {
        if (canonical == host)
          return NotPublic(field, absl::StrCat("host ", host, " is ", *reason));
        return NotPublic(field, absl::StrCat("host ", host, " is ", canonical, ", ", *reason));
      }
      return parsed;
    }
    case HostInfo::kName:
      if (parsed->allowed_host) return parsed;
      if (IsLocalHostName(info->name)) {
        return NotPublic(field, absl::StrCat("host ", host, " names the local machine"));
      }
      return parsed;
  }
  return parsed;
}

absl::Status CheckUrlLiteral(absl::string_view url, const UrlGuardOptions& options,
                             absl::string_view field) {
  return CheckAndParseUrl(url, options, field).status();
}

}  // namespace calleval
