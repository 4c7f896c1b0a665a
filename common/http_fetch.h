#pragma once

// Downloads a URL to a file with libcurl under the docs/api.md §8 guard: the literal check on the
// URL and on every redirect target (followed by hand, so each hop is checked as written), and the
// resolved-address check in CURLOPT_OPENSOCKETFUNCTION on every connection, which defeats DNS
// rebinding. Proxies from the environment are ignored: through a proxy the guard would only see
// the proxy's address.
//
// Failures carry a message meant for a user (a call's failure message), always starting with
// "<label> failed: ". Codes say what the caller should do:
//   kInvalidArgument     the server's answer is unusable (HTTP 404, a redirect without Location,
//                        too many redirects, over the size limit); retrying will not help.
//   kFailedPrecondition  the URL guard refused the URL, a redirect or a connection
//                        (ErrorInfo code "url_not_public" / "invalid_url").
//   kUnavailable         network trouble, timeouts, HTTP 408/429/5xx: worth retrying later.
//   kInternal            the local file could not be written.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/url_guard.h"

namespace calleval {

struct FetchOptions {
  UrlGuardOptions guard;
  absl::Duration connect_timeout = absl::Seconds(10);
  // For the whole download, redirects included.
  absl::Duration total_timeout = absl::Minutes(5);
  int64_t max_bytes = int64_t{512} << 20;
  int max_redirects = 5;
  std::string user_agent = "calleval/1";
  // Names the download in messages: "recording download failed: HTTP 404 from ...".
  std::string label = "recording download";
  // CURLOPT_RESOLVE entries ("host:port:address") that pin names to addresses without DNS.
  // For tests (a public-looking name resolving to loopback exercises the connect-time check)
  // and for operators who pin a name; the connect-time check still applies.
  std::vector<std::string> resolve_override;
  // When set and it becomes true, the download stops within about a second with kCancelled
  // (a shutting-down server gives its work back instead of waiting out a long download).
  const std::atomic<bool>* cancel = nullptr;
};

struct FetchResult {
  int http_status = 0;
  std::string content_type;  // as sent by the server; empty when absent
  int64_t bytes = 0;
  std::string final_url;  // the URL that answered, after redirects, without credentials
};

// Writes the body to `path + ".part"` and renames it to `path` on success; the partial file is
// removed on failure. Only 2xx answers succeed. Thread-safe; blocks for up to total_timeout.
absl::StatusOr<FetchResult> FetchToFile(absl::string_view url, const std::string& path,
                                        const FetchOptions& options);

// Formats a byte count for messages: "512 MiB", "1.5 KiB", "12 bytes".
std::string FormatBytes(int64_t bytes);

}  // namespace calleval
