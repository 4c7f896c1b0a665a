#include "common/local_blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace calleval {
namespace {

constexpr size_t kBlockSize = 256 << 10;
constexpr absl::string_view kContentTypeSuffix = ".content-type";
constexpr absl::string_view kDefaultContentType = "application/octet-stream";

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string Errno() { return std::strerror(errno); }

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(Errno());
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A name no other writer in this or another process picks at the same time.
std::string TempName(const std::string& dir) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(dir, "/.tmp-", getpid(), "-", counter.fetch_add(1), "-",
                      absl::ToUnixNanos(absl::Now()));
}

// fsync on a directory makes a rename in it durable.
void SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalDirBlobStore>> LocalDirBlobStore::Open(
    const std::string& root) {
  if (root.empty()) return absl::InvalidArgumentError("blob store: empty directory");
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(root, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("blob store ", root, ": ", ec.message()));
  path = path.lexically_normal();
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("blob store ", path.string(),
                                            ": cannot create the directory: ", ec.message()));
  }
  std::string normalized = path.string();
  while (normalized.size() > 1 && normalized.back() == '/') normalized.pop_back();
  return std::unique_ptr<LocalDirBlobStore>(new LocalDirBlobStore(std::move(normalized)));
}

std::string LocalDirBlobStore::Describe() const { return absl::StrCat("file://", root_); }

std::optional<std::string> LocalDirBlobStore::LocalPath(absl::string_view key) const {
  if (!CheckBlobKey(key).ok()) return std::nullopt;
  return absl::StrCat(root_, "/", key);
}

absl::Status LocalDirBlobStore::Error(absl::StatusCode code, absl::string_view op,
                                      absl::string_view key, absl::string_view what) const {
  return absl::Status(code,
                      absl::StrCat("blob store ", Describe(), ": ", op, " ", key, ": ", what));
}

absl::Status LocalDirBlobStore::Put(absl::string_view key, const BlobSource& source,
                                    absl::string_view content_type) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  const std::string path = absl::StrCat(root_, "/", key);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(absl::StatusCode::kInternal, "PUT", key, ec.message());

  const std::string data_tmp = TempName(dir);
  const std::string type_tmp = data_tmp + ".type";
  auto cleanup = [&] {
    std::remove(data_tmp.c_str());
    std::remove(type_tmp.c_str());
  };
  auto write_file = [&](const std::string& tmp, auto&& fill) -> absl::Status {
    Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return Error(absl::StatusCode::kInternal, "PUT", key, Errno());
    RETURN_IF_ERROR(fill(fd.get()));
    if (fsync(fd.get()) != 0 || close(fd.Release()) != 0) {
      return Error(absl::StatusCode::kInternal, "PUT", key, Errno());
    }
    return absl::OkStatus();
  };

  absl::Status status = write_file(data_tmp, [&](int fd) -> absl::Status {
    std::vector<char> block(kBlockSize);
    int64_t offset = 0;
    while (offset < source.size) {
      const size_t want = static_cast<size_t>(std::min<int64_t>(kBlockSize, source.size - offset));
      absl::StatusOr<size_t> n = source.read_at(offset, block.data(), want);
      if (!n.ok()) return Error(n.status().code(), "PUT", key, n.status().message());
      if (*n == 0) {
        return Error(absl::StatusCode::kInternal, "PUT", key, "the source ended early");
      }
      absl::Status written = WriteAll(fd, block.data(), *n);
      if (!written.ok()) return Error(absl::StatusCode::kInternal, "PUT", key, written.message());
      offset += static_cast<int64_t>(*n);
    }
    return absl::OkStatus();
  });
  if (status.ok()) {
    const std::string type(content_type.empty() ? kDefaultContentType : content_type);
    status = write_file(type_tmp, [&](int fd) -> absl::Status {
      absl::Status written = WriteAll(fd, type.data(), type.size());
      if (!written.ok()) return Error(absl::StatusCode::kInternal, "PUT", key, written.message());
      return absl::OkStatus();
    });
  }
  if (status.ok() &&
      (std::rename(type_tmp.c_str(), absl::StrCat(path, kContentTypeSuffix).c_str()) != 0 ||
       std::rename(data_tmp.c_str(), path.c_str()) != 0)) {
    status = Error(absl::StatusCode::kInternal, "PUT", key, absl::StrCat("rename: ", Errno()));
  }
  if (!status.ok()) {
    cleanup();
    return status;
  }
  SyncDirectory(dir);
  return absl::OkStatus();
}

absl::StatusOr<BlobInfo> LocalDirBlobStore::Stat(absl::string_view key) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  const std::string path = absl::StrCat(root_, "/", key);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return Error(absl::StatusCode::kNotFound, "HEAD", key, "no such object");
    }
    return Error(absl::StatusCode::kInternal, "HEAD", key, Errno());
  }
  // A directory is a prefix of other keys, not an object.
  if (!S_ISREG(st.st_mode))
    return Error(absl::StatusCode::kNotFound, "HEAD", key, "no such object");
  BlobInfo info;
  info.size = st.st_size;
  info.content_type = std::string(kDefaultContentType);
  if (std::FILE* f = std::fopen(absl::StrCat(path, kContentTypeSuffix).c_str(), "rbe")) {
    char buffer[1024];
    const size_t n = std::fread(buffer, 1, sizeof(buffer), f);
    std::fclose(f);
    if (n > 0) info.content_type.assign(buffer, n);
  }
  return info;
}

absl::Status LocalDirBlobStore::Read(absl::string_view key, int64_t offset, int64_t length,
                                     const BlobSink& sink) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  if (offset < 0 || length < kToEnd) {
    return Error(absl::StatusCode::kInvalidArgument, "GET", key, "negative offset or length");
  }
  const std::string path = absl::StrCat(root_, "/", key);
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd.get() < 0 && errno != ENOENT && errno != ENOTDIR) {
      return Error(absl::StatusCode::kInternal, "GET", key, Errno());
    }
    return Error(absl::StatusCode::kNotFound, "GET", key, "no such object");
  }
  const int64_t size = st.st_size;
  if (length == 0) return absl::OkStatus();
  if (offset >= size && !(offset == 0 && length == kToEnd)) {
    return Error(absl::StatusCode::kOutOfRange, "GET", key,
                 absl::StrCat("offset ", offset, " is past the end (", size, " bytes)"));
  }
  const int64_t end = length == kToEnd ? size : std::min(size, offset + length);
  std::vector<char> block(kBlockSize);
  while (offset < end) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(kBlockSize, end - offset));
    const ssize_t n = pread(fd.get(), block.data(), want, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error(absl::StatusCode::kInternal, "GET", key, Errno());
    if (n == 0) break;  // truncated under us; the caller sees fewer bytes
    RETURN_IF_ERROR(sink(absl::string_view(block.data(), static_cast<size_t>(n))));
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status LocalDirBlobStore::Delete(absl::string_view key) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  const std::string path = absl::StrCat(root_, "/", key);
  // unlink, not remove: a key that names a directory (a prefix of other keys) is left alone.
  if (unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR) {
    return Error(absl::StatusCode::kInternal, "DELETE", key, Errno());
  }
  unlink(absl::StrCat(path, kContentTypeSuffix).c_str());
  return absl::OkStatus();
}

}  // namespace calleval
