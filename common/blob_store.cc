#include "common/blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/http_fetch.h"
#include "common/local_blob_store.h"
#include "common/s3_blob_store.h"
#include "common/status_macros.h"
#include "common/telemetry.h"

namespace calleval {
namespace {

// Closes the descriptor when the last copy of a FileBlobSource goes.
struct SharedFd {
  explicit SharedFd(int fd) : fd(fd) {}
  ~SharedFd() { close(fd); }
  SharedFd(const SharedFd&) = delete;
  SharedFd& operator=(const SharedFd&) = delete;
  int fd;
};

// "%2F" and friends in the query of an s3:// URL.
absl::StatusOr<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= text.size() || !absl::SimpleHexAtoi(text.substr(i + 1, 2), &value)) {
      return absl::InvalidArgumentError(absl::StrCat("bad percent-escape in \"", text, "\""));
    }
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

std::string Getenv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

absl::StatusOr<std::unique_ptr<BlobStore>> OpenS3(absl::string_view url,
                                                  const BlobStoreOptions& options) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("blob store URL \"", url, "\": ", why));
  };
  absl::string_view rest = url;
  absl::ConsumePrefix(&rest, "s3://");
  absl::string_view query;
  if (size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  S3Location location;
  const size_t slash = rest.find('/');
  location.bucket = std::string(rest.substr(0, slash));
  if (location.bucket.empty()) return bad("no bucket");
  for (char c : location.bucket) {
    if (!(absl::ascii_islower(static_cast<unsigned char>(c)) ||
          absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return bad("a bucket name is lower-case letters, digits, '-' and '.'");
    }
  }
  if (slash != absl::string_view::npos) {
    std::vector<absl::string_view> segments =
        absl::StrSplit(rest.substr(slash + 1), '/', absl::SkipEmpty());
    location.prefix = absl::StrJoin(segments, "/");
    if (!location.prefix.empty()) {
      absl::Status valid = CheckBlobKey(location.prefix);
      if (!valid.ok()) return bad(absl::StrCat("prefix: ", valid.message()));
    }
  }
  location.region = "us-east-1";
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    ASSIGN_OR_RETURN(std::string value, PercentDecode(kv.second));
    if (kv.first == "endpoint") {
      location.endpoint = std::move(value);
    } else if (kv.first == "region") {
      location.region = std::move(value);
    } else {
      return bad(absl::StrCat("unknown parameter \"", kv.first, "\" (endpoint, region)"));
    }
  }
  if (location.region.empty()) return bad("empty region");
  if (location.endpoint.empty()) {
    location.endpoint = absl::StrCat("https://s3.", location.region, ".amazonaws.com");
  }
  while (absl::EndsWith(location.endpoint, "/")) location.endpoint.pop_back();
  if (!absl::StartsWith(location.endpoint, "http://") &&
      !absl::StartsWith(location.endpoint, "https://")) {
    return bad("the endpoint must be an http:// or https:// URL");
  }

  S3Credentials credentials;
  if (options.credentials.has_value()) {
    credentials = *options.credentials;
  } else {
    credentials.access_key_id = Getenv("AWS_ACCESS_KEY_ID");
    credentials.secret_access_key = Getenv("AWS_SECRET_ACCESS_KEY");
    credentials.session_token = Getenv("AWS_SESSION_TOKEN");
  }
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("blob store s3://", location.bucket,
                     ": no credentials (set AWS_ACCESS_KEY_ID and "
                     "AWS_SECRET_ACCESS_KEY, e.g. from a Secret)"));
  }
  if (options.part_size < S3BlobStore::kMinPartSize) {
    return bad(absl::StrCat("part size ", FormatBytes(options.part_size),
                            " is below S3's minimum of ", FormatBytes(S3BlobStore::kMinPartSize)));
  }
  if (options.multipart_threshold < 0) return bad("negative multipart threshold");
  return std::unique_ptr<BlobStore>(
      new S3BlobStore(std::move(location), std::move(credentials), options));
}

}  // namespace

absl::StatusOr<BlobSource> FileBlobSource(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::Status(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  auto shared = std::make_shared<SharedFd>(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InternalError(absl::StrCat(path, " is not a readable regular file"));
  }
  BlobSource source;
  source.size = st.st_size;
  source.read_at = [shared, path, size = source.size](int64_t offset, char* out,
                                                      size_t max) -> absl::StatusOr<size_t> {
    if (offset >= size) return size_t{0};
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(max), size - offset));
    for (;;) {
      const ssize_t n = pread(shared->fd, out, want, offset);
      if (n >= 0) {
        // A file that shrank after the source was made would send fewer bytes than its
        // Content-Length promised; say so rather than let the upload hang.
        if (n == 0 && want > 0) {
          return absl::InternalError(absl::StrCat(path, " shrank while being uploaded"));
        }
        return static_cast<size_t>(n);
      }
      if (errno != EINTR) {
        return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
      }
    }
  };
  return source;
}

BlobSource StringBlobSource(std::string bytes) {
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  BlobSource source;
  source.size = static_cast<int64_t>(shared->size());
  source.read_at = [shared](int64_t offset, char* out, size_t max) -> absl::StatusOr<size_t> {
    if (offset >= static_cast<int64_t>(shared->size())) return size_t{0};
    const size_t n = std::min(max, shared->size() - static_cast<size_t>(offset));
    std::memcpy(out, shared->data() + offset, n);
    return n;
  };
  return source;
}

absl::Status CheckBlobKey(absl::string_view key) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("blob key \"", key, "\" ", why));
  };
  if (key.empty()) return absl::InvalidArgumentError("empty blob key");
  if (key.size() > 1024) return bad("is longer than 1024 bytes");
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e || c == '\\') {
      return bad("has a character other than printable ASCII (no space, no backslash)");
    }
  }
  if (key.front() == '/') return bad("is absolute");
  for (absl::string_view segment : absl::StrSplit(key, '/')) {
    if (segment.empty()) return bad("has an empty segment");
    if (segment == "." || segment == "..") return bad("has a \".\" or \"..\" segment");
    if (absl::StartsWith(segment, ".tmp-")) return bad("has a segment starting with \".tmp-\"");
    if (absl::EndsWith(segment, ".content-type")) {
      return bad("has a segment ending in \".content-type\"");
    }
  }
  return absl::OkStatus();
}

absl::Status BlobStore::Download(absl::string_view key, const std::string& local_path,
                                 int64_t max_bytes) {
  ASSIGN_OR_RETURN(BlobInfo info, Stat(key));
  if (info.size > max_bytes) {
    return absl::FailedPreconditionError(absl::StrCat("blob store ", Describe(), ": ", key, " is ",
                                                      FormatBytes(info.size), ", over the ",
                                                      FormatBytes(max_bytes), " download limit"));
  }
  const std::string part_path = local_path + ".part";
  std::FILE* file = std::fopen(part_path.c_str(), "wbe");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create ", part_path, ": ", std::strerror(errno)));
  }
  int64_t written = 0;
  absl::Status status = Read(key, 0, kToEnd, [&](absl::string_view bytes) -> absl::Status {
    // The object may have been replaced by a larger one since Stat.
    if (written + static_cast<int64_t>(bytes.size()) > max_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("blob store ", Describe(), ": ", key,
                                                        " grew over the ", FormatBytes(max_bytes),
                                                        " download limit"));
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
      return absl::InternalError(
          absl::StrCat("cannot write ", part_path, ": ", std::strerror(errno)));
    }
    written += static_cast<int64_t>(bytes.size());
    return absl::OkStatus();
  });
  if (status.ok() && (std::fflush(file) != 0 || fsync(fileno(file)) != 0)) {
    status =
        absl::InternalError(absl::StrCat("cannot write ", part_path, ": ", std::strerror(errno)));
  }
  if (std::fclose(file) != 0 && status.ok()) {
    status =
        absl::InternalError(absl::StrCat("cannot write ", part_path, ": ", std::strerror(errno)));
  }
  if (status.ok() && std::rename(part_path.c_str(), local_path.c_str()) != 0) {
    status =
        absl::InternalError(absl::StrCat("cannot rename ", part_path, ": ", std::strerror(errno)));
  }
  if (!status.ok()) std::remove(part_path.c_str());
  return status;
}

namespace {

// Times every operation of the store it wraps for the operators' metrics
// (calleval_blob_store_duration_seconds, calleval_blob_store_errors_total).
class TimedBlobStore final : public BlobStore {
 public:
  TimedBlobStore(std::unique_ptr<BlobStore> store, std::string backend)
      : store_(std::move(store)), backend_(std::move(backend)) {}

  absl::Status Put(absl::string_view key, const BlobSource& source,
                   absl::string_view content_type) override {
    return Timed("put", [&] { return store_->Put(key, source, content_type); });
  }
  absl::StatusOr<BlobInfo> Stat(absl::string_view key) override {
    absl::StatusOr<BlobInfo> info;
    Timed("stat", [&] {
      info = store_->Stat(key);
      return info.status();
    }).IgnoreError();
    return info;
  }
  absl::Status Read(absl::string_view key, int64_t offset, int64_t length,
                    const BlobSink& sink) override {
    return Timed("read", [&] { return store_->Read(key, offset, length, sink); });
  }
  absl::Status Delete(absl::string_view key) override {
    return Timed("delete", [&] { return store_->Delete(key); });
  }
  std::string Describe() const override { return store_->Describe(); }
  std::optional<std::string> LocalPath(absl::string_view key) const override {
    return store_->LocalPath(key);
  }

 private:
  template <typename Operation>
  absl::Status Timed(absl::string_view operation, const Operation& run) {
    static telemetry::HistogramFamily& durations = telemetry::DefaultRegistry().Histogram(
        "calleval_blob_store_duration_seconds",
        "Time of one recording store operation, by backend (local, s3) and operation.",
        {"backend", "operation"});
    static telemetry::CounterFamily& errors = telemetry::DefaultRegistry().Counter(
        "calleval_blob_store_errors_total",
        "Recording store operations that failed (a missing object included), by backend and "
        "operation.",
        {"backend", "operation"});
    const absl::Time start = absl::Now();
    absl::Status status = run();
    const telemetry::LabelValues labels = {backend_, std::string(operation)};
    durations.WithLabels(labels).ObserveDuration(absl::Now() - start);
    if (!status.ok()) errors.WithLabels(labels).Increment();
    return status;
  }

  const std::unique_ptr<BlobStore> store_;
  const std::string backend_;
};

absl::StatusOr<std::unique_ptr<BlobStore>> OpenUntimed(absl::string_view url,
                                                       const BlobStoreOptions& options) {
  if (absl::StartsWith(url, "s3://")) return OpenS3(url, options);
  absl::string_view path = url;
  if (absl::ConsumePrefix(&path, "file://")) {
    if (!absl::StartsWith(path, "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blob store URL \"", url, "\": file:// takes an absolute path (file:///dir)"));
    }
  } else if (absl::StrContains(url, "://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob store URL \"", url, "\": not a directory, file:// or s3:// URL"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalDirBlobStore> store,
                   LocalDirBlobStore::Open(std::string(path)));
  return std::unique_ptr<BlobStore>(std::move(store));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlobStore>> OpenBlobStore(absl::string_view url,
                                                         const BlobStoreOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<BlobStore> store, OpenUntimed(url, options));
  return std::unique_ptr<BlobStore>(std::make_unique<TimedBlobStore>(
      std::move(store), absl::StartsWith(url, "s3://") ? "s3" : "local"));
}

}  // namespace calleval
