#include "common/http_fetch.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/errors.h"

namespace calleval {
namespace {

struct CurlEasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// State shared with libcurl's callbacks for one hop.
struct Transfer {
  CURL* curl = nullptr;
  std::FILE* file = nullptr;
  int64_t max_bytes = 0;
  int64_t bytes = 0;
  bool allow_any_address = false;  // the hop's literal host is in allowed_hosts
  bool over_cap = false;
  bool stopped_non_2xx = false;
  bool write_failed = false;
  int write_errno = 0;
  const std::atomic<bool>* cancel = nullptr;
  std::string refused_address;
  std::string refused_reason;
};

// Progress callback: libcurl calls it about once a second even when no data flows.
int CheckCancelled(void* userdata, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(userdata);
  return t->cancel != nullptr && t->cancel->load() ? 1 : 0;
}

size_t WriteBody(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {
    // Redirect and error bodies are not wanted; stopping here saves reading them.
    t->stopped_non_2xx = true;
    return 0;
  }
  if (t->bytes + static_cast<int64_t>(n) > t->max_bytes) {
    t->over_cap = true;
    return 0;
  }
  if (n > 0 && std::fwrite(data, 1, n, t->file) != n) {
    t->write_failed = true;
    t->write_errno = errno;
    return 0;
  }
  t->bytes += static_cast<int64_t>(n);
  return n;
}

// The connect-time half of the guard: the address the name resolved to must be public.
curl_socket_t OpenSocket(void* clientp, curlsocktype purpose, struct curl_sockaddr* address) {
  auto* t = static_cast<Transfer*>(clientp);
  if (purpose != CURLSOCKTYPE_IPCXN) {
    t->refused_address = "(listening socket)";
    t->refused_reason = "not an outgoing connection";
    return CURL_SOCKET_BAD;
  }
  if (!t->allow_any_address) {
    if (std::optional<std::string> reason = NonPublicReason(&address->addr)) {
      t->refused_address = AddressToString(&address->addr);
      t->refused_reason = std::move(*reason);
      return CURL_SOCKET_BAD;
    }
  }
  return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

std::string FormatSeconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d), " s"); }

// "a loopback address" -> "loopback address", for use in parentheses.
absl::string_view WithoutArticle(absl::string_view reason) {
  if (absl::ConsumePrefix(&reason, "an ")) return reason;
  if (absl::ConsumePrefix(&reason, "a ")) return reason;
  absl::ConsumePrefix(&reason, "the ");
  return reason;
}

bool IsRedirect(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

bool HasScheme(absl::string_view ref) {
  if (ref.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(ref[0]))) return false;
  for (char c : ref.substr(1)) {
    if (c == ':') return true;
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return false;
}

class Fetcher {
 public:
  explicit Fetcher(const FetchOptions& options) : options_(options) {}

  absl::StatusOr<FetchResult> Run(absl::string_view url, const std::string& path) {
    deadline_ = absl::Now() + options_.total_timeout;
    absl::StatusOr<ParsedUrl> parsed = CheckAndParseUrl(url, options_.guard, "url");
    if (!parsed.ok()) return GuardRefusal(parsed.status(), "");

    curl_.reset(curl_easy_init());
    if (!curl_) return Failure(absl::StatusCode::kInternal, "could not start libcurl");
    for (const std::string& entry : options_.resolve_override) {
      curl_slist* next = curl_slist_append(resolve_.get(), entry.c_str());
      if (next == nullptr) return Failure(absl::StatusCode::kInternal, "out of memory");
      resolve_.release();
      resolve_.reset(next);
    }

    std::string part_path = path + ".part";
    std::FILE* raw_file = std::fopen(part_path.c_str(), "wbe");
    if (raw_file == nullptr) {
      return Failure(absl::StatusCode::kInternal,
                     absl::StrCat("cannot create ", part_path, ": ", std::strerror(errno)));
    }
    std::unique_ptr<std::FILE, FileCloser> file(raw_file);
    absl::StatusOr<FetchResult> result = FetchHops(*std::move(parsed), file.get());
    if (result.ok()) {
      if (std::fflush(file.get()) != 0 || fsync(fileno(file.get())) != 0) {
        result = Failure(absl::StatusCode::kInternal,
                         absl::StrCat("cannot write ", part_path, ": ", std::strerror(errno)));
      }
    }
    if (std::fclose(file.release()) != 0 && result.ok()) {
      result = Failure(absl::StatusCode::kInternal,
                       absl::StrCat("cannot write ", part_path, ": ", std::strerror(errno)));
    }
    if (result.ok() && std::rename(part_path.c_str(), path.c_str()) != 0) {
      result = Failure(absl::StatusCode::kInternal,
                       absl::StrCat("cannot rename ", part_path, ": ", std::strerror(errno)));
    }
    if (!result.ok()) std::remove(part_path.c_str());
    return result;
  }

 private:
  absl::StatusOr<FetchResult> FetchHops(ParsedUrl current, std::FILE* file) {
    for (int redirects = 0;; ++redirects) {
      absl::Duration remaining = deadline_ - absl::Now();
      if (remaining <= absl::ZeroDuration()) return TimedOut();

      // Members, not locals: libcurl keeps pointers to them until the next reset.
      hop_ = Transfer();
      hop_.curl = curl_.get();
      hop_.file = file;
      hop_.max_bytes = options_.max_bytes;
      hop_.allow_any_address = current.allowed_host;
      hop_.cancel = options_.cancel;
      error_buffer_[0] = '\0';
      SetHopOptions(current, remaining);
      CURLcode rc = curl_easy_perform(curl_.get());
      const Transfer& t = hop_;
      if (rc == CURLE_ABORTED_BY_CALLBACK) {
        return Failure(absl::StatusCode::kCancelled, "cancelled");
      }
      const std::string shown_url = RedactUrl(current.url);

      if (!t.refused_address.empty() && rc != CURLE_OK && !t.stopped_non_2xx) {
        return MakeError(
            absl::StatusCode::kFailedPrecondition, kUrlNotPublicCode,
            absl::StrCat(options_.label, " failed: connection to ", t.refused_address,
                         " refused by the URL guard (", WithoutArticle(t.refused_reason), ")"),
            {{std::nullopt,
              absl::StrCat("address ", t.refused_address, " is ", t.refused_reason)}});
      }
      if (t.over_cap || rc == CURLE_FILESIZE_EXCEEDED) {
        return Failure(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("the file at ", shown_url, " exceeds the ",
                                    FormatBytes(options_.max_bytes), " limit"));
      }
      if (t.write_failed) {
        return Failure(absl::StatusCode::kInternal,
                       absl::StrCat("cannot write the download: ", std::strerror(t.write_errno)));
      }
      if (rc == CURLE_OPERATION_TIMEDOUT) {
        if (absl::Now() + absl::Milliseconds(50) >= deadline_) return TimedOut();
        return Failure(absl::StatusCode::kUnavailable,
                       absl::StrCat("connecting to ", current.host, " timed out after ",
                                    FormatSeconds(options_.connect_timeout)));
      }
      if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && t.stopped_non_2xx)) {
        return NetworkFailure(rc, current);
      }

      long status = 0;
      curl_easy_getinfo(curl_.get(), CURLINFO_RESPONSE_CODE, &status);
      if (status >= 200 && status < 300) {
        FetchResult result;
        result.http_status = static_cast<int>(status);
        char* content_type = nullptr;
        curl_easy_getinfo(curl_.get(), CURLINFO_CONTENT_TYPE, &content_type);
        if (content_type != nullptr) result.content_type = content_type;
        result.bytes = t.bytes;
        result.final_url = shown_url;
        return result;
      }
      if (!IsRedirect(status)) {
        absl::StatusCode code = (status == 408 || status == 429 || status >= 500)
                                    ? absl::StatusCode::kUnavailable
                                    : absl::StatusCode::kInvalidArgument;
        return Failure(code, absl::StrCat("HTTP ", status, " from ", shown_url));
      }
      if (redirects >= options_.max_redirects) {
        return Failure(
            absl::StatusCode::kInvalidArgument,
            absl::StrCat("too many redirects (more than ", options_.max_redirects, ") from ",
                         RedactUrl(first_url_.empty() ? current.url : first_url_)));
      }
      if (first_url_.empty()) first_url_ = current.url;
      absl::StatusOr<std::string> target = RedirectTarget(current, status);
      if (!target.ok()) return target.status();
      absl::StatusOr<ParsedUrl> next = CheckAndParseUrl(*target, options_.guard, "redirect");
      if (!next.ok()) return GuardRefusal(next.status(), *target);
      current = *std::move(next);
    }
  }

  void SetHopOptions(const ParsedUrl& url, absl::Duration remaining) {
    CURL* c = curl_.get();
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    // An environment proxy would make the connect-time check see the proxy, not the target.
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_USERAGENT, options_.user_agent.c_str());
    int64_t remaining_ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(remaining));
    int64_t connect_ms = std::max<int64_t>(
        1, std::min(remaining_ms, absl::ToInt64Milliseconds(options_.connect_timeout)));
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(remaining_ms));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_ms));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options_.max_bytes));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &hop_);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, &OpenSocket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &hop_);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer_);
    if (options_.cancel != nullptr) {
      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &CheckCancelled);
      curl_easy_setopt(c, CURLOPT_XFERINFODATA, &hop_);
    }
    if (resolve_) curl_easy_setopt(c, CURLOPT_RESOLVE, resolve_.get());
  }

  // The Location of a redirect, made absolute. A relative reference keeps the current host,
  // which was checked already; an absolute one is returned as written so that the allowlist
  // sees the host exactly as the server wrote it.
  absl::StatusOr<std::string> RedirectTarget(const ParsedUrl& current, long status) {
    curl_header* location = nullptr;
    if (curl_easy_header(curl_.get(), "Location", 0, CURLH_HEADER, -1, &location) != CURLHE_OK ||
        location == nullptr || location->value == nullptr || location->value[0] == '\0') {
      return Failure(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("HTTP ", status, " without a Location from ", RedactUrl(current.url)));
    }
    std::string ref = location->value;
    if (HasScheme(ref)) return ref;
    if (absl::StartsWith(ref, "//")) return absl::StrCat(current.scheme, ":", ref);
    std::unique_ptr<CURLU, CurlUrlDeleter> base(curl_url());
    char* resolved = nullptr;
    if (!base ||
        curl_url_set(base.get(), CURLUPART_URL, current.url.c_str(), CURLU_NON_SUPPORT_SCHEME) !=
            CURLUE_OK ||
        curl_url_set(base.get(), CURLUPART_URL, ref.c_str(), CURLU_NON_SUPPORT_SCHEME) !=
            CURLUE_OK ||
        curl_url_get(base.get(), CURLUPART_URL, &resolved, 0) != CURLUE_OK) {
      return Failure(absl::StatusCode::kInvalidArgument,
                     absl::StrCat("HTTP ", status, " with an unusable Location \"", ref, "\" from ",
                                  RedactUrl(current.url)));
    }
    std::string out = resolved;
    curl_free(resolved);
    return out;
  }

  // A guard error from url_guard (422, with ErrorInfo) as a download failure.
  absl::Status GuardRefusal(const absl::Status& guard, absl::string_view redirect_target) {
    v1::ErrorInfo info = ErrorInfoOf(guard);
    std::string issue =
        info.details_size() > 0 ? info.details(0).issue() : std::string(guard.message());
    std::string message =
        redirect_target.empty()
            ? absl::StrCat(options_.label, " failed: the URL was refused by the URL guard: ", issue)
            : absl::StrCat(options_.label, " failed: redirect to ", RedactUrl(redirect_target),
                           " refused by the URL guard: ", issue);
    return MakeError(absl::StatusCode::kFailedPrecondition, info.code(), message,
                     {{std::nullopt, issue}});
  }

  absl::Status Failure(absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat(options_.label, " failed: ", what));
  }

  absl::Status TimedOut() {
    return Failure(absl::StatusCode::kUnavailable,
                   absl::StrCat("timed out after ", FormatSeconds(options_.total_timeout)));
  }

  absl::Status NetworkFailure(CURLcode rc, const ParsedUrl& url) {
    if (rc == CURLE_COULDNT_RESOLVE_HOST) {
      return Failure(absl::StatusCode::kUnavailable,
                     absl::StrCat("could not resolve host ", url.host));
    }
    std::string detail = error_buffer_[0] != '\0' ? error_buffer_ : curl_easy_strerror(rc);
    return Failure(absl::StatusCode::kUnavailable,
                   absl::StrCat("fetching ", RedactUrl(url.url), ": ", detail));
  }

  const FetchOptions& options_;
  absl::Time deadline_;
  std::string first_url_;
  Transfer hop_;
  char error_buffer_[CURL_ERROR_SIZE] = {0};
  std::unique_ptr<curl_slist, CurlSlistDeleter> resolve_;
  // Declared after what its options point to, so it is cleaned up first.
  std::unique_ptr<CURL, CurlEasyDeleter> curl_;
};

}  // namespace

std::string FormatBytes(int64_t bytes) {
  constexpr int64_t kKiB = 1024;
  constexpr int64_t kMiB = kKiB * 1024;
  constexpr int64_t kGiB = kMiB * 1024;
  auto scaled = [bytes](int64_t unit, absl::string_view name) {
    if (bytes % unit == 0) return absl::StrCat(bytes / unit, " ", name);
    return absl::StrCat(std::round(static_cast<double>(bytes) * 10 / unit) / 10, " ", name);
  };
  if (bytes >= kGiB) return scaled(kGiB, "GiB");
  if (bytes >= kMiB) return scaled(kMiB, "MiB");
  if (bytes >= 10 * kKiB) return scaled(kKiB, "KiB");
  return absl::StrCat(bytes, bytes == 1 ? " byte" : " bytes");
}

absl::StatusOr<FetchResult> FetchToFile(absl::string_view url, const std::string& path,
                                        const FetchOptions& options) {
  GlobalInitOnce();
  Fetcher fetcher(options);
  return fetcher.Run(url, path);
}

}  // namespace calleval
