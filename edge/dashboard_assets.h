#pragma once

// The dashboard's built files (edge/dashboard, bundled by its build.mjs at build time and
// compiled into the binary), and how the edge answers for them.

#include <string_view>

#include "absl/types/span.h"
#include "edge/http_server.h"

namespace calleval::edge {

struct DashboardAsset {
  std::string_view path;  // "/" (index.html) or "/assets/<name>-<hash>.<ext>"
  std::string_view content_type;
  std::string_view bytes;
  std::string_view gzip;  // the same bytes, gzip-compressed
  std::string_view etag;  // quoted, from the bytes' hash
  // Named by its content's hash: never changes under that name, so clients may keep it a year.
  bool immutable;
};

// Defined in the source build.mjs generates.
absl::Span<const DashboardAsset> DashboardAssets();

// Answers a GET of `/` or `/assets/...` from `assets`: 200 with the bytes (gzip when the client
// accepts it), 304 when If-None-Match names the current ETag, 404 for a name not built. Every
// answer carries the dashboard's Content-Security-Policy (scripts, styles, images, media and API
// calls from this origin only; no inline code; not framed) and caching headers: immutable for
// hashed assets, revalidate every time for `/`.
LocalResponse ServeDashboardAsset(absl::Span<const DashboardAsset> assets,
                                  const LocalRequest& request);

// The policy, for tests and docs.
extern const char kDashboardContentSecurityPolicy[];

}  // namespace calleval::edge
