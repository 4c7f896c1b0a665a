#include "common/blob_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_s3.h"

namespace calleval {
namespace {

using ::testing::HasSubstr;
using testing::TestS3;

constexpr int64_t kMiB = int64_t{1} << 20;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Deterministic bytes that differ at every offset class, so a shifted or repeated block shows.
char PatternByte(int64_t offset) {
  const uint64_t x = static_cast<uint64_t>(offset) * 0x9E3779B97F4A7C15ull;
  return static_cast<char>(x >> 56);
}

std::string Pattern(int64_t offset, int64_t size) {
  std::string out(static_cast<size_t>(size), '\0');
  for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(i)] = PatternByte(offset + i);
  return out;
}

absl::StatusOr<std::string> ReadRange(BlobStore& store, absl::string_view key, int64_t offset,
                                      int64_t length) {
  std::string out;
  absl::Status status = store.Read(key, offset, length, [&](absl::string_view bytes) {
    out.append(bytes.data(), bytes.size());
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

std::string MakeTempDir(const std::string& name) {
  std::string tmpl = ::testing::TempDir() + "/" + name + "_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// A TCP proxy in front of the S3 server that can cut the connection carrying the Nth byte sent
// to the server: a store that fails in the middle of an upload.
class CuttingProxy {
 public:
  explicit CuttingProxy(int upstream_port) : upstream_port_(upstream_port) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(listener_, 16);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~CuttingProxy() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    absl::MutexLock lock(&mu_);
    for (std::thread& t : connections_) t.join();
  }

  int port() const { return port_; }
  // The connection that carries the byte number `bytes` (counted over all connections from
  // now on) toward the server is closed before that byte is sent. Once.
  void CutAfter(int64_t bytes) {
    forwarded_ = 0;
    cut_at_ = bytes;
  }
  bool did_cut() const { return did_cut_; }

 private:
  void AcceptLoop() {
    while (!stopping_) {
      const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      absl::MutexLock lock(&mu_);
      connections_.emplace_back([this, client] { Relay(client); });
    }
  }

  void Relay(int client) {
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(server);
      close(client);
      return;
    }
    std::vector<char> buffer(64 << 10);
    bool open = true;
    while (open && !stopping_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (poll(fds, 2, 100) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = i == 0 ? client : server;
        const int to = i == 0 ? server : client;
        ssize_t n = read(from, buffer.data(), buffer.size());
        if (n <= 0) {
          open = false;
          break;
        }
        if (i == 0 && cut_at_ >= 0) {
          const int64_t before = forwarded_.fetch_add(n);
          if (before + n >= cut_at_) {
            n = static_cast<ssize_t>(std::max<int64_t>(0, cut_at_ - before - 1));
            if (n > 0) (void)!write(to, buffer.data(), static_cast<size_t>(n));
            cut_at_ = -1;
            did_cut_ = true;
            open = false;
            break;
          }
        }
        if (write(to, buffer.data(), static_cast<size_t>(n)) != n) open = false;
      }
    }
    close(server);
    close(client);
  }

  int upstream_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> cut_at_{-1};
  std::atomic<int64_t> forwarded_{0};
  std::atomic<bool> did_cut_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<std::thread> connections_;
};

BlobStoreOptions S3Options() {
  BlobStoreOptions options;
  options.credentials = S3Credentials{TestS3::kAccessKeyId, TestS3::kSecretAccessKey, ""};
  options.connect_timeout = absl::Seconds(5);
  return options;
}

// ---------------------------------------------------------------------------------------------
// The contract, on both stores.

enum class Kind { kLocal, kS3 };

class BlobStoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("blob_store");
    ASSERT_FALSE(dir_.empty());
    store_ = Open(S3Options());
    ASSERT_NE(store_, nullptr);
  }

  void TearDown() override {
    store_.reset();
    s3_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<BlobStore> Open(const BlobStoreOptions& options) {
    if (GetParam() == Kind::kLocal) {
      auto store = OpenBlobStore(dir_ + "/objects", options);
      EXPECT_TRUE(store.ok()) << store.status();
      return store.ok() ? *std::move(store) : nullptr;
    }
    if (s3_ == nullptr) {
      auto started = TestS3::Start(dir_ + "/s3");
      EXPECT_TRUE(started.ok()) << started.status();
      if (!started.ok()) return nullptr;
      s3_ = *std::move(started);
    }
    auto store = OpenBlobStore(s3_->Url("calls"), options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_;
  std::unique_ptr<TestS3> s3_;
  std::unique_ptr<BlobStore> store_;
};

INSTANTIATE_TEST_SUITE_P(Stores, BlobStoreTest, ::testing::Values(Kind::kLocal, Kind::kS3),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kLocal ? "Local" : "S3";
                         });

TEST_P(BlobStoreTest, PutThenStatAndReadGiveExactBytesAndContentType) {
  const std::string bytes = Pattern(0, 300 * 1000);
  ASSERT_TRUE(store_->Put("ws1/call-1.wav", StringBlobSource(bytes), "audio/wav").ok());

  auto info = store_->Stat("ws1/call-1.wav");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 300 * 1000);
  EXPECT_EQ(info->content_type, "audio/wav");
  auto read = ReadRange(*store_, "ws1/call-1.wav", 0, kToEnd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == bytes);
}

// The local store names the file a reader may open in place; S3 has none to name.
TEST_P(BlobStoreTest, LocalPathIsTheStoredFileOnlyOnTheLocalStore) {
  const std::string bytes = Pattern(3, 5000);
  ASSERT_TRUE(store_->Put("ws1/7", StringBlobSource(bytes), "audio/wav").ok());
  const std::optional<std::string> path = store_->LocalPath("ws1/7");
  if (GetParam() == Kind::kS3) {
    EXPECT_EQ(path, std::nullopt);
    return;
  }
  ASSERT_TRUE(path.has_value());
  std::ifstream in(*path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bytes);
  EXPECT_EQ(store_->LocalPath("../escape"), std::nullopt);
}

TEST_P(BlobStoreTest, PutFromFileAndDefaultContentType) {
  const std::string path = dir_ + "/upload.bin";
  const std::string bytes = Pattern(7, 70 * 1000);
  std::ofstream(path, std::ios::binary) << bytes;
  auto source = FileBlobSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(store_->Put("a.bin", *source, "").ok());
  auto info = store_->Stat("a.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->content_type, "application/octet-stream");
  auto read = ReadRange(*store_, "a.bin", 0, kToEnd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == bytes);
}

TEST_P(BlobStoreTest, RangesAreExactAndClampedAtTheEnd) {
  const std::string bytes = Pattern(0, 10000);
  ASSERT_TRUE(store_->Put("r.bin", StringBlobSource(bytes), "application/octet-stream").ok());

  EXPECT_EQ(*ReadRange(*store_, "r.bin", 0, 10), bytes.substr(0, 10));            // first bytes
  EXPECT_EQ(*ReadRange(*store_, "r.bin", 4321, 1000), bytes.substr(4321, 1000));  // middle
  EXPECT_EQ(*ReadRange(*store_, "r.bin", 9999, 1), bytes.substr(9999, 1));        // last byte
  EXPECT_EQ(*ReadRange(*store_, "r.bin", 9000, kToEnd), bytes.substr(9000));      // suffix
  // A range running past the end is clamped, as HTTP Range is.
  EXPECT_EQ(*ReadRange(*store_, "r.bin", 9990, 500), bytes.substr(9990));
  // Length 0: the key exists, nothing is read.
  EXPECT_EQ(*ReadRange(*store_, "r.bin", 50, 0), "");

  // Starting at or past the end is out of range.
  for (int64_t offset : {int64_t{10000}, int64_t{20000}}) {
    auto past = ReadRange(*store_, "r.bin", offset, 10);
    EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange) << past.status();
  }
}

TEST_P(BlobStoreTest, EmptyObjectRoundTrips) {
  ASSERT_TRUE(store_->Put("empty", StringBlobSource(""), "text/plain").ok());
  auto info = store_->Stat("empty");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 0);
  auto read = ReadRange(*store_, "empty", 0, kToEnd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST_P(BlobStoreTest, MissingKeyIsNotFoundAndDeleteIsIdempotent) {
  EXPECT_EQ(store_->Stat("nope.wav").status().code(), absl::StatusCode::kNotFound);
  auto read = ReadRange(*store_, "nope.wav", 0, kToEnd);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(read.status()), HasSubstr("nope.wav"));
  EXPECT_THAT(Message(read.status()), HasSubstr(store_->Describe()));
  EXPECT_EQ(store_->Download("nope.wav", dir_ + "/out").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out.part"));
  EXPECT_TRUE(store_->Delete("nope.wav").ok());

  ASSERT_TRUE(store_->Put("d.wav", StringBlobSource("x"), "audio/wav").ok());
  ASSERT_TRUE(store_->Delete("d.wav").ok());
  EXPECT_EQ(store_->Stat("d.wav").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("d.wav").ok());
}

TEST_P(BlobStoreTest, PutReplacesAndDownloadWritesABoundedFile) {
  ASSERT_TRUE(store_->Put("k", StringBlobSource("first version"), "text/plain").ok());
  const std::string bytes = Pattern(3, 50000);
  ASSERT_TRUE(store_->Put("k", StringBlobSource(bytes), "audio/mpeg").ok());
  EXPECT_EQ(store_->Stat("k")->content_type, "audio/mpeg");

  const std::string out = dir_ + "/download.bin";
  ASSERT_TRUE(store_->Download("k", out).ok());
  std::ifstream in(out, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == bytes);
  EXPECT_FALSE(std::filesystem::exists(out + ".part"));

  absl::Status too_big = store_->Download("k", dir_ + "/small.bin", /*max_bytes=*/1000);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kFailedPrecondition) << too_big;
  EXPECT_THAT(Message(too_big), HasSubstr("download limit"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/small.bin"));
}

TEST_P(BlobStoreTest, UnsafeKeysAreRefused) {
  for (const char* key : {"", "/abs", "../up", "a/../../b", "a//b", "a/./b", "a\\b", "sp ace",
                          "x.content-type", ".tmp-1"}) {
    EXPECT_EQ(store_->Put(key, StringBlobSource("x"), "").code(),
              absl::StatusCode::kInvalidArgument)
        << key;
    EXPECT_EQ(store_->Stat(key).status().code(), absl::StatusCode::kInvalidArgument) << key;
  }
  // Characters S3 needs encoded in a path still round-trip.
  ASSERT_TRUE(store_->Put("odd/k=v+1%2B&(x)", StringBlobSource("odd"), "").ok());
  EXPECT_EQ(*ReadRange(*store_, "odd/k=v+1%2B&(x)", 0, kToEnd), "odd");
}

// A ~100 MiB recording goes up and comes back through the streaming paths; the process's
// peak memory must not follow the file's size.
TEST_P(BlobStoreTest, MemoryStaysFlatWithFileSize) {
  constexpr int64_t kSize = 100 * kMiB + 12345;
  const std::string path = dir_ + "/big.bin";
  {
    std::ofstream out(path, std::ios::binary);
    for (int64_t offset = 0; offset < kSize; offset += kMiB) {
      out << Pattern(offset, std::min(kMiB, kSize - offset));
    }
  }
  const int64_t before = PeakRssBytes();
  auto source = FileBlobSource(path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::Status put = store_->Put("big.wav", *source, "audio/wav");
  ASSERT_TRUE(put.ok()) << put;

  int64_t offset = 0;
  bool same = true;
  absl::Status read = store_->Read("big.wav", 0, kToEnd, [&](absl::string_view bytes) {
    for (char c : bytes) same = same && c == PatternByte(offset++);
    return absl::OkStatus();
  });
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(offset, kSize);
  EXPECT_TRUE(same);
  const int64_t growth = PeakRssBytes() - before;
  EXPECT_LT(growth, 32 * kMiB) << "peak RSS grew by " << growth / kMiB << " MiB";
}

// ---------------------------------------------------------------------------------------------
// S3 only: multipart, failures on the way, credentials.

class S3BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("s3_blob_store");
    ASSERT_FALSE(dir_.empty());
    auto started = TestS3::Start(dir_ + "/s3");
    ASSERT_TRUE(started.ok()) << started.status();
    s3_ = *std::move(started);
  }
  void TearDown() override {
    s3_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<BlobStore> Open(const std::string& url, const BlobStoreOptions& options) {
    auto store = OpenBlobStore(url, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static BlobStoreOptions SmallParts() {
    BlobStoreOptions options = S3Options();
    options.multipart_threshold = 5 * kMiB;
    options.part_size = 5 * kMiB;
    return options;
  }

  // Multipart uploads s3rver still holds (created, neither completed nor aborted).
  int PendingUploads() const {
    const std::string uploads = s3_->dir() + "/" + s3_->bucket() + "/._S3rver_uploads";
    if (!std::filesystem::exists(uploads)) return 0;
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(uploads)) {
      (void)entry;
      ++n;
    }
    return n;
  }

  std::string dir_;
  std::unique_ptr<TestS3> s3_;
};

TEST_F(S3BlobStoreTest, MultipartRoundTripsAsOneObject) {
  auto store = Open(s3_->Url("calls"), SmallParts());
  ASSERT_NE(store, nullptr);
  const std::string bytes = Pattern(11, 12 * kMiB);
  ASSERT_TRUE(store->Put("ws/big.wav", StringBlobSource(bytes), "audio/wav").ok());

  auto info = store->Stat("ws/big.wav");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, 12 * kMiB);
  EXPECT_EQ(info->content_type, "audio/wav");
  auto read = ReadRange(*store, "ws/big.wav", 0, kToEnd);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == bytes);
  // A range across a part boundary.
  EXPECT_TRUE(*ReadRange(*store, "ws/big.wav", 5 * kMiB - 10, 20) ==
              bytes.substr(5 * kMiB - 10, 20));
  EXPECT_EQ(PendingUploads(), 0);
}

TEST_F(S3BlobStoreTest, UploadCutMidwayIsUnavailableLeavesNothingAndRetrySucceeds) {
  CuttingProxy proxy(s3_->port());
  const std::string via_proxy =
      absl::StrCat("s3://", s3_->bucket(), "/calls?endpoint=http://127.0.0.1:", proxy.port());
  auto store = Open(via_proxy, S3Options());
  auto direct = Open(s3_->Url("calls"), S3Options());
  ASSERT_NE(store, nullptr);
  ASSERT_NE(direct, nullptr);
  const std::string bytes = Pattern(5, 2 * kMiB);

  proxy.CutAfter(kMiB);
  absl::Status put = store->Put("cut.wav", StringBlobSource(bytes), "audio/wav");
  EXPECT_TRUE(proxy.did_cut());
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_THAT(Message(put), HasSubstr("cut.wav"));
  EXPECT_EQ(direct->Stat("cut.wav").status().code(), absl::StatusCode::kNotFound)
      << direct->Stat("cut.wav").status();

  // The store is back: the caller's retry goes through.
  absl::Status retry = store->Put("cut.wav", StringBlobSource(bytes), "audio/wav");
  ASSERT_TRUE(retry.ok()) << retry;
  EXPECT_TRUE(*ReadRange(*direct, "cut.wav", 0, kToEnd) == bytes);
}

TEST_F(S3BlobStoreTest, MultipartCutMidwayIsAbortedAndRetrySucceeds) {
  CuttingProxy proxy(s3_->port());
  const std::string via_proxy =
      absl::StrCat("s3://", s3_->bucket(), "/calls?endpoint=http://127.0.0.1:", proxy.port());
  auto store = Open(via_proxy, SmallParts());
  auto direct = Open(s3_->Url("calls"), S3Options());
  ASSERT_NE(store, nullptr);
  ASSERT_NE(direct, nullptr);
  const std::string bytes = Pattern(9, 12 * kMiB);

  // In the second part.
  proxy.CutAfter(7 * kMiB);
  absl::Status put = store->Put("mp.wav", StringBlobSource(bytes), "audio/wav");
  EXPECT_TRUE(proxy.did_cut());
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_THAT(Message(put), HasSubstr("UploadPart 2/3"));
  EXPECT_THAT(Message(put), ::testing::Not(HasSubstr("abort failed")));
  EXPECT_EQ(direct->Stat("mp.wav").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(PendingUploads(), 0);

  ASSERT_TRUE(store->Put("mp.wav", StringBlobSource(bytes), "audio/wav").ok());
  EXPECT_TRUE(*ReadRange(*direct, "mp.wav", 0, kToEnd) == bytes);
  EXPECT_EQ(PendingUploads(), 0);
}

TEST_F(S3BlobStoreTest, UnreachableEndpointIsUnavailableQuicklyAndNamesIt) {
  // A port nothing listens on: bind one, then close it.
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len);
  const int closed_port = ntohs(addr.sin_port);
  close(probe);

  const std::string endpoint = absl::StrCat("http://127.0.0.1:", closed_port);
  auto store = Open(absl::StrCat("s3://recordings?endpoint=", endpoint), S3Options());
  ASSERT_NE(store, nullptr);
  const absl::Time start = absl::Now();
  absl::Status put = store->Put("a.wav", StringBlobSource("abc"), "audio/wav");
  EXPECT_EQ(put.code(), absl::StatusCode::kUnavailable) << put;
  EXPECT_THAT(Message(put), HasSubstr(endpoint));
  EXPECT_THAT(Message(put), HasSubstr("a.wav"));
  EXPECT_EQ(store->Stat("a.wav").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ReadRange(*store, "a.wav", 0, kToEnd).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A server that takes the connection and never answers: the request's time limit ends it.
TEST_F(S3BlobStoreTest, SilentServerTimesOutAsUnavailable) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);  // the kernel completes handshakes; nobody reads
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);

  BlobStoreOptions options = S3Options();
  options.request_timeout = absl::Seconds(1);
  auto store = Open(
      absl::StrCat("s3://recordings?endpoint=http://127.0.0.1:", ntohs(addr.sin_port)), options);
  ASSERT_NE(store, nullptr);
  const absl::Time start = absl::Now();
  absl::Status stat = store->Stat("a.wav").status();
  EXPECT_EQ(stat.code(), absl::StatusCode::kUnavailable) << stat;
  EXPECT_THAT(Message(stat), HasSubstr("timed out"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  close(listener);
}

TEST_F(S3BlobStoreTest, WrongSecretIsPermissionDenied) {
  BlobStoreOptions options = S3Options();
  options.credentials->secret_access_key = "not-the-secret";
  auto store = Open(s3_->Url(), options);
  ASSERT_NE(store, nullptr);
  absl::Status put = store->Put("a.wav", StringBlobSource("abc"), "audio/wav");
  EXPECT_EQ(put.code(), absl::StatusCode::kPermissionDenied) << put;
  EXPECT_THAT(Message(put), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(Message(put), HasSubstr("wrong secret"));
  EXPECT_EQ(store->Stat("a.wav").status().code(), absl::StatusCode::kPermissionDenied);

  options.credentials = S3Credentials{"NOBODY", TestS3::kSecretAccessKey, ""};
  auto unknown = Open(s3_->Url(), options);
  ASSERT_NE(unknown, nullptr);
  absl::Status read = ReadRange(*unknown, "a.wav", 0, kToEnd).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kPermissionDenied) << read;
  EXPECT_THAT(Message(read), HasSubstr("InvalidAccessKeyId"));
}

TEST_F(S3BlobStoreTest, SessionTokenIsSentAndSigned) {
  BlobStoreOptions options = S3Options();
  options.credentials->session_token = "token-123";
  auto store = Open(s3_->Url(), options);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Put("t.txt", StringBlobSource("t"), "text/plain").ok());
}

TEST_F(S3BlobStoreTest, MissingBucketIsFailedPrecondition) {
  auto store = Open(absl::StrCat("s3://no-such-bucket?endpoint=", s3_->Endpoint()), S3Options());
  ASSERT_NE(store, nullptr);
  absl::Status put = store->Put("a.wav", StringBlobSource("abc"), "audio/wav");
  EXPECT_EQ(put.code(), absl::StatusCode::kFailedPrecondition) << put;
  EXPECT_THAT(Message(put), HasSubstr("NoSuchBucket"));
}

TEST_F(S3BlobStoreTest, PrefixesKeepStoresApart) {
  auto a = Open(s3_->Url("tenant-a"), S3Options());
  auto b = Open(s3_->Url("tenant-b/x"), S3Options());
  ASSERT_TRUE(a->Put("k", StringBlobSource("a"), "").ok());
  EXPECT_EQ(b->Stat("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->Describe(), "s3://recordings/tenant-a");
  EXPECT_EQ(b->Describe(), "s3://recordings/tenant-b/x");
  EXPECT_TRUE(std::filesystem::exists(s3_->dir() + "/recordings/tenant-a"));
}

// ---------------------------------------------------------------------------------------------
// Opening stores.

TEST(OpenBlobStoreTest, S3NeedsCredentials) {
  const char* saved_id = getenv("AWS_ACCESS_KEY_ID");
  const char* saved_secret = getenv("AWS_SECRET_ACCESS_KEY");
  std::string id = saved_id ? saved_id : "", secret = saved_secret ? saved_secret : "";
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  auto store = OpenBlobStore("s3://recordings/p?region=eu-west-1");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(store.status()), HasSubstr("AWS_ACCESS_KEY_ID"));

  setenv("AWS_ACCESS_KEY_ID", "AK", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
  auto from_env = OpenBlobStore("s3://recordings/p/?region=eu-west-1");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ((*from_env)->Describe(), "s3://recordings/p");
  if (saved_id)
    setenv("AWS_ACCESS_KEY_ID", id.c_str(), 1);
  else
    unsetenv("AWS_ACCESS_KEY_ID");
  if (saved_secret)
    setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  else
    unsetenv("AWS_SECRET_ACCESS_KEY");
}

TEST(OpenBlobStoreTest, RefusesBadUrlsAndOptions) {
  BlobStoreOptions options = S3Options();
  for (const char* url : {"s3://", "s3:///p", "s3://Bad_Bucket", "s3://b?endpoint=ftp://x",
                          "s3://b?color=red", "s3://b/../x", "ftp://x/y", "file://relative"}) {
    EXPECT_EQ(OpenBlobStore(url, options).status().code(), absl::StatusCode::kInvalidArgument)
        << url;
  }
  options.part_size = kMiB;
  auto small = OpenBlobStore("s3://b", options);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(small.status()), HasSubstr("5 MiB"));
}

TEST(OpenBlobStoreTest, LocalFromPathOrFileUrl) {
  const std::string dir =
      std::filesystem::path(MakeTempDir("blob_open")).lexically_normal().string();
  auto plain = OpenBlobStore(dir + "/a/b");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->Describe(), "file://" + dir + "/a/b");
  auto url = OpenBlobStore("file://" + dir + "/a/b/");
  ASSERT_TRUE(url.ok()) << url.status();
  ASSERT_TRUE((*plain)->Put("x/y.wav", StringBlobSource("y"), "audio/wav").ok());
  EXPECT_EQ((*url)->Stat("x/y.wav")->content_type, "audio/wav");
  // Only the object and its sidecar: no temporary file left behind.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/a/b/x")) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("y.wav", "y.wav.content-type"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace calleval
