#include "edge/dashboard_assets.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace calleval::edge {

const char kDashboardContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "media-src 'self'; connect-src 'self'; font-src 'self'; manifest-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

namespace {

std::string Header(const LocalRequest& request, const char* name) {
  auto it = request.headers.find(name);
  return it == request.headers.end() ? std::string() : it->second;
}

// Whether Accept-Encoding allows gzip: listed (or `*`) without q=0.
bool AcceptsGzip(absl::string_view accept_encoding) {
  bool gzip = false, star = false, gzip_refused = false;
  for (absl::string_view item : absl::StrSplit(accept_encoding, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ';');
    const std::string coding = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    double q = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      if (absl::ConsumePrefix(&p, "q=") || absl::ConsumePrefix(&p, "Q=")) {
        if (!absl::SimpleAtod(p, &q)) q = 0;
      }
    }
    if (coding == "gzip" || coding == "x-gzip") (q > 0 ? gzip : gzip_refused) = true;
    if (coding == "*" && q > 0) star = true;
  }
  return gzip || (star && !gzip_refused);
}

// If-None-Match: `*` or a list of (possibly weak) entity tags.
bool Matches(absl::string_view if_none_match, absl::string_view etag) {
  for (absl::string_view tag : absl::StrSplit(if_none_match, ',')) {
    tag = absl::StripAsciiWhitespace(tag);
    absl::ConsumePrefix(&tag, "W/");
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

void AddCommonHeaders(LocalResponse& response) {
  response.headers.emplace_back("Content-Security-Policy", kDashboardContentSecurityPolicy);
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back("X-Frame-Options", "DENY");
}

}  // namespace

LocalResponse ServeDashboardAsset(absl::Span<const DashboardAsset> assets,
                                  const LocalRequest& request) {
  LocalResponse response;
  AddCommonHeaders(response);
  const DashboardAsset* asset = nullptr;
  for (const DashboardAsset& a : assets) {
    if (a.path == request.path) asset = &a;
  }
  if (asset == nullptr) {
    response.status = 404;
    response.body =
        R"({"error":{"status":404,"code":"not_found","message":"no such dashboard file; )"
        R"(reload / for the current version","details":[]}})";
    response.headers.emplace_back("Cache-Control", "no-store");
    return response;
  }
  response.headers.emplace_back("ETag", std::string(asset->etag));
  response.headers.emplace_back("Cache-Control", asset->immutable
                                                     ? "public, max-age=31536000, immutable"
                                                     : "no-cache");
  response.headers.emplace_back("Vary", "Accept-Encoding");
  response.content_type = std::string(asset->content_type);
  if (Matches(Header(request, "if-none-match"),
              absl::string_view(asset->etag.data(), asset->etag.size()))) {
    response.status = 304;
    return response;
  }
  if (AcceptsGzip(Header(request, "accept-encoding"))) {
    response.headers.emplace_back("Content-Encoding", "gzip");
    response.body = std::string(asset->gzip);
  } else {
    response.body = std::string(asset->bytes);
  }
  return response;
}

}  // namespace calleval::edge
