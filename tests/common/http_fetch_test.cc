#include "common/http_fetch.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

class HttpFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/http_fetch_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/recording.bin";
    options_.guard.allowed_hosts = {"127.0.0.1"};
    options_.connect_timeout = absl::Seconds(5);
    options_.total_timeout = absl::Seconds(20);

    body_.resize(100 * 1000);
    for (size_t i = 0; i < body_.size(); ++i) body_[i] = static_cast<char>((i * 7919) % 256);
    server_.Serve("/a.wav", body_, "audio/wav");
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  bool Exists(const std::string& path) { return std::filesystem::exists(path); }

  // No final file and no leftover partial file.
  void ExpectNoFiles() {
    EXPECT_FALSE(Exists(path_));
    EXPECT_FALSE(Exists(path_ + ".part"));
  }

  absl::StatusOr<FetchResult> Fetch(absl::string_view url) {
    return FetchToFile(url, path_, options_);
  }

  TestHttpServer server_;
  std::string dir_;
  std::string path_;
  std::string body_;
  FetchOptions options_;
};

TEST_F(HttpFetchTest, DownloadsBodyAndContentType) {
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/a.wav"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->http_status, 200);
  EXPECT_EQ(result->content_type, "audio/wav");
  EXPECT_EQ(result->bytes, static_cast<int64_t>(body_.size()));
  EXPECT_EQ(result->final_url, server_.url("/a.wav"));
  EXPECT_EQ(ReadAll(path_), body_);
  EXPECT_FALSE(Exists(path_ + ".part"));
  std::vector<TestHttpServer::Request> requests = server_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].Header("user-agent"), "calleval/1");
}

TEST_F(HttpFetchTest, ReplacesAnExistingFile) {
  std::ofstream(path_) << "old contents";
  ASSERT_TRUE(Fetch(server_.url("/a.wav")).ok());
  EXPECT_EQ(ReadAll(path_), body_);
}

TEST_F(HttpFetchTest, EmptyBodyAndMissingContentType) {
  server_.Serve("/empty", "", "");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/empty"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bytes, 0);
  EXPECT_EQ(result->content_type, "");
  EXPECT_EQ(ReadAll(path_), "");
}

TEST_F(HttpFetchTest, LargeStreamedBody) {
  server_.Stream("/big", int64_t{6} << 20, /*chunked=*/false, "audio/mpeg");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/big"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bytes, int64_t{6} << 20);
  EXPECT_EQ(std::filesystem::file_size(path_), uint64_t{6} << 20);
}

TEST_F(HttpFetchTest, ServesFilesFromDisk) {
  std::string source = dir_ + "/source.wav";
  std::ofstream(source, std::ios::binary) << body_;
  server_.ServeFile("/file.wav", source, "audio/x-wav");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/file.wav"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->content_type, "audio/x-wav");
  EXPECT_EQ(ReadAll(path_), body_);
}

TEST_F(HttpFetchTest, NotFoundIsAnError) {
  server_.Status("/missing", 404, "no such recording");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/missing"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(result.status()),
            absl::StrCat("recording download failed: HTTP 404 from ", server_.url("/missing")));
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, UnknownPathIs404) {
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/nothing-here"));
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(Message(result.status()), HasSubstr("HTTP 404"));
}

TEST_F(HttpFetchTest, ServerErrorsAreRetryable) {
  server_.Status("/down", 503, "busy");
  server_.Status("/slowdown", 429, "later");
  server_.Status("/forbidden", 403, "no");
  EXPECT_EQ(Fetch(server_.url("/down")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Fetch(server_.url("/slowdown")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Fetch(server_.url("/forbidden")).status().code(), absl::StatusCode::kInvalidArgument);
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, AnnouncedLengthOverTheCap) {
  server_.Stream("/big", int64_t{2} << 20);
  options_.max_bytes = int64_t{1} << 20;
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/big"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(result.status()), HasSubstr("exceeds the 1 MiB limit"));
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, StreamedBodyOverTheCap) {
  server_.Stream("/chunked", int64_t{3} << 20, /*chunked=*/true);
  options_.max_bytes = int64_t{1} << 20;
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/chunked"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Message(result.status()),
      HasSubstr(absl::StrCat("the file at ", server_.url("/chunked"), " exceeds the 1 MiB limit")));
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, BodyOfExactlyTheCapIsAccepted) {
  server_.Stream("/exact", 1000, /*chunked=*/true);
  options_.max_bytes = 1000;
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/exact"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bytes, 1000);
}

TEST_F(HttpFetchTest, FailureKeepsAnExistingFileAndRemovesThePartialOne) {
  std::ofstream(path_) << "old contents";
  server_.Stream("/chunked", int64_t{3} << 20, /*chunked=*/true);
  options_.max_bytes = int64_t{1} << 20;
  ASSERT_FALSE(Fetch(server_.url("/chunked")).ok());
  EXPECT_EQ(ReadAll(path_), "old contents");
  EXPECT_FALSE(Exists(path_ + ".part"));
}

TEST_F(HttpFetchTest, TotalTimeoutBeforeTheAnswer) {
  server_.Delay("/slow", absl::Seconds(30));
  options_.total_timeout = absl::Milliseconds(500);
  absl::Time start = absl::Now();
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/slow"));
  absl::Duration elapsed = absl::Now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Message(result.status()), "recording download failed: timed out after 0.5 s");
  EXPECT_LT(elapsed, absl::Seconds(5));
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, TotalTimeoutDuringAStalledBody) {
  TestHttpServer::Response stalled;
  stalled.generated_bytes = int64_t{1} << 20;
  stalled.chunk_delay = absl::Seconds(30);
  server_.Respond("/stalled", stalled);
  options_.total_timeout = absl::Milliseconds(700);
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/stalled"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(result.status()), HasSubstr("timed out after 0.7 s"));
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, TimeoutCoversAllRedirects) {
  TestHttpServer::Response slow_redirect;
  slow_redirect.status = 302;
  slow_redirect.delay = absl::Milliseconds(300);
  slow_redirect.headers = {{"Location", "/hop"}};
  server_.Respond("/hop", slow_redirect);
  options_.total_timeout = absl::Seconds(1);
  options_.max_redirects = 100;
  absl::Time start = absl::Now();
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/hop"));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST_F(HttpFetchTest, FollowsRedirectOnAnAllowedHost) {
  server_.Redirect("/r", server_.url("/a.wav"), 301);
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_url, server_.url("/a.wav"));
  EXPECT_EQ(ReadAll(path_), body_);
  EXPECT_EQ(server_.hits("/r"), 1);
  EXPECT_EQ(server_.hits("/a.wav"), 1);
}

TEST_F(HttpFetchTest, FollowsRelativeRedirects) {
  server_.Redirect("/dir/r1", "r2", 307);
  server_.Redirect("/dir/r2", "/dir/../r3?x=1", 308);
  server_.Redirect("/r3", absl::StrCat("//127.0.0.1:", server_.port(), "/a.wav"), 303);
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/dir/r1"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_url, server_.url("/a.wav"));
  EXPECT_EQ(server_.hits("/dir/r2"), 1);
  EXPECT_EQ(server_.hits("/r3"), 1);
}

TEST_F(HttpFetchTest, RedirectToLocalhostIsRefused) {
  std::string target = absl::StrCat("http://localhost:", server_.port(), "/a.wav");
  server_.Redirect("/r", target);
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(result.status()).code(), kUrlNotPublicCode);
  EXPECT_THAT(Message(result.status()),
              HasSubstr(absl::StrCat("redirect to ", target, " refused by the URL guard")));
  EXPECT_EQ(server_.hits("/a.wav"), 0);
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, RedirectToAnotherSpellingOfTheAllowedHostIsRefused) {
  for (std::string host : {"127.1", "0x7f.1", "2130706433", "[::ffff:127.0.0.1]", "127.0.0.1."}) {
    server_.Redirect("/r", absl::StrCat("http://", host, ":", server_.port(), "/a.wav"));
    absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << host;
  }
  EXPECT_EQ(server_.hits("/a.wav"), 0);
}

TEST_F(HttpFetchTest, RedirectToAPrivateAddressIsRefused) {
  server_.Redirect("/r", "http://10.0.0.1/a.wav");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(result.status()),
            "recording download failed: redirect to http://10.0.0.1/a.wav refused by the URL "
            "guard: host 10.0.0.1 is a private address");
}

TEST_F(HttpFetchTest, RedirectToMetadataAndOtherSchemesIsRefused) {
  for (std::string target : {"http://169.254.169.254/latest/meta-data/", "ftp://127.0.0.1/a.wav",
                             "file:///etc/passwd", "gopher://127.0.0.1:70/x"}) {
    server_.Redirect("/r", target);
    absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << target;
    EXPECT_EQ(ErrorInfoOf(result.status()).code(), kUrlNotPublicCode) << target;
  }
}

TEST_F(HttpFetchTest, RedirectLimit) {
  for (int i = 0; i < 7; ++i) {
    server_.Redirect(absl::StrCat("/hop", i), absl::StrCat("/hop", i + 1));
  }
  server_.Serve("/hop7", "done", "text/plain");
  options_.max_redirects = 5;
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/hop0"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(result.status()),
            absl::StrCat("recording download failed: too many redirects (more than 5) from ",
                         server_.url("/hop0")));
  EXPECT_EQ(server_.hits("/hop6"), 0);
  ExpectNoFiles();

  // Exactly five redirects are fine.
  result = Fetch(server_.url("/hop2"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ReadAll(path_), "done");
}

TEST_F(HttpFetchTest, RedirectLoop) {
  server_.Redirect("/loop", "/loop");
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/loop"));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server_.hits("/loop"), 6);
}

TEST_F(HttpFetchTest, RedirectWithoutLocation) {
  server_.Status("/nowhere", 302);
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/nowhere"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(result.status()), HasSubstr("HTTP 302 without a Location"));
}

TEST_F(HttpFetchTest, LoopbackWithoutAllowlistIsRefused) {
  options_.guard.allowed_hosts.clear();
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/a.wav"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(result.status()), HasSubstr("host 127.0.0.1 is a loopback address"));
  EXPECT_EQ(server_.hits("/a.wav"), 0);
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, LocalhostIsRefusedEvenWithLoopbackAllowed) {
  absl::StatusOr<FetchResult> result =
      Fetch(absl::StrCat("http://localhost:", server_.port(), "/a.wav"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(result.status()).code(), kUrlNotPublicCode);
  EXPECT_EQ(server_.hits("/a.wav"), 0);
}

// DNS rebinding: a public-looking name that resolves to loopback passes the literal check and
// must be stopped when the connection is opened.
TEST_F(HttpFetchTest, NameResolvingToLoopbackIsRefusedAtConnectTime) {
  options_.guard.allowed_hosts.clear();
  options_.resolve_override = {absl::StrCat("public.test:", server_.port(), ":127.0.0.1")};
  std::string url = absl::StrCat("http://public.test:", server_.port(), "/a.wav");
  ASSERT_TRUE(CheckUrlLiteral(url, options_.guard).ok());
  absl::StatusOr<FetchResult> result = Fetch(url);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(result.status()).code(), kUrlNotPublicCode);
  EXPECT_EQ(Message(result.status()),
            "recording download failed: connection to 127.0.0.1 refused by the URL guard "
            "(loopback address)");
  EXPECT_EQ(server_.hits("/a.wav"), 0);
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, AllowlistingTheLoopbackLiteralDoesNotAllowANameResolvingToIt) {
  options_.resolve_override = {absl::StrCat("public.test:", server_.port(), ":127.0.0.1")};
  server_.Redirect("/r", absl::StrCat("http://public.test:", server_.port(), "/a.wav"));
  absl::StatusOr<FetchResult> result = Fetch(server_.url("/r"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(result.status()), HasSubstr("connection to 127.0.0.1 refused"));
  EXPECT_EQ(server_.hits("/a.wav"), 0);
}

TEST_F(HttpFetchTest, AllowlistedNameMayResolveToLoopback) {
  options_.guard.allowed_hosts = {"recordings.internal"};
  options_.resolve_override = {absl::StrCat("recordings.internal:", server_.port(), ":127.0.0.1")};
  absl::StatusOr<FetchResult> result =
      Fetch(absl::StrCat("http://recordings.internal:", server_.port(), "/a.wav"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ReadAll(path_), body_);
}

TEST_F(HttpFetchTest, IPv4MappedResolutionIsRefused) {
  options_.guard.allowed_hosts.clear();
  options_.resolve_override = {absl::StrCat("mapped.test:", server_.port(), ":[::ffff:127.0.0.1]")};
  absl::StatusOr<FetchResult> result =
      Fetch(absl::StrCat("http://mapped.test:", server_.port(), "/a.wav"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_EQ(server_.hits("/a.wav"), 0);
}

TEST_F(HttpFetchTest, NonHttpSchemesAreRefused) {
  for (std::string url : {absl::StrCat("ftp://127.0.0.1:", server_.port(), "/a.wav"),
                          std::string("file:///etc/passwd"),
                          absl::StrCat("gopher://127.0.0.1:", server_.port(), "/_GET"),
                          absl::StrCat("ws://127.0.0.1:", server_.port(), "/a.wav")}) {
    absl::StatusOr<FetchResult> result = Fetch(url);
    ASSERT_FALSE(result.ok()) << url;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << url;
    EXPECT_EQ(ErrorInfoOf(result.status()).code(), kUrlNotPublicCode) << url;
  }
  EXPECT_TRUE(server_.requests().empty());
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, UnparsableUrl) {
  absl::StatusOr<FetchResult> result = Fetch("not a url");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(result.status()).code(), kInvalidUrlCode);
}

TEST_F(HttpFetchTest, ConnectionRefusedIsRetryable) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);  // Nobody listens on this port now.
  absl::StatusOr<FetchResult> result =
      Fetch(absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port), "/a.wav"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  ExpectNoFiles();
}

TEST_F(HttpFetchTest, CredentialsAreSentButNeverShown) {
  server_.Status("/private", 401);
  std::string url = absl::StrCat("http://user:hunter2@127.0.0.1:", server_.port(), "/private");
  absl::StatusOr<FetchResult> result = Fetch(url);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(Message(result.status()), Not(HasSubstr("hunter2")));
  EXPECT_THAT(Message(result.status()), HasSubstr(server_.url("/private")));
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0].Header("authorization"), "Basic dXNlcjpodW50ZXIy");

  result = Fetch(absl::StrCat("http://user:hunter2@127.0.0.1:", server_.port(), "/a.wav"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->final_url, server_.url("/a.wav"));
}

TEST_F(HttpFetchTest, CustomLabelInMessages) {
  options_.label = "audio fetch";
  server_.Status("/gone", 410);
  EXPECT_THAT(Message(Fetch(server_.url("/gone")).status()),
              HasSubstr("audio fetch failed: HTTP 410"));
}

TEST_F(HttpFetchTest, ConcurrentDownloads) {
  server_.Stream("/big", int64_t{2} << 20);
  std::vector<std::thread> threads;
  std::vector<absl::Status> statuses(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<FetchResult> r =
          FetchToFile(server_.url(i % 2 ? "/big" : "/a.wav"), absl::StrCat(path_, i), options_);
      statuses[i] = r.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
    EXPECT_EQ(std::filesystem::file_size(absl::StrCat(path_, i)),
              i % 2 ? uint64_t{2} << 20 : body_.size());
  }
}

TEST(FormatBytesTest, Units) {
  EXPECT_EQ(FormatBytes(int64_t{512} << 20), "512 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatBytes(1000), "1000 bytes");
  EXPECT_EQ(FormatBytes(1), "1 byte");
  EXPECT_EQ(FormatBytes(64 * 1024), "64 KiB");
}

// The test server itself: HEAD, Content-Length, POST bodies, prefix routes, clean shutdown.
size_t Discard(char*, size_t size, size_t nmemb, void*) { return size * nmemb; }

TEST(TestHttpServerTest, HeadAnswersHeadersOnly) {
  TestHttpServer server;
  server.Serve("/a.wav", std::string(1234, 'x'), "audio/wav");
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, server.url("/a.wav").c_str());
  curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  ASSERT_EQ(curl_easy_perform(curl), CURLE_OK);
  curl_off_t length = -1;
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(length, 1234);
  EXPECT_EQ(server.requests().at(0).method, "HEAD");
}

TEST(TestHttpServerTest, PostBodiesAndPrefixRoutes) {
  TestHttpServer server;
  server.HandlePrefix("/v1/", [](const TestHttpServer::Request& request) {
    TestHttpServer::Response r;
    r.content_type = "application/json";
    r.body = absl::StrCat("{\"path\":\"", request.path, "\",\"echo\":", request.body, "}");
    return r;
  });
  CURL* curl = curl_easy_init();
  std::string received;
  curl_easy_setopt(curl, CURLOPT_URL, server.url("/v1/chat/completions?x=1").c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "{\"a\":1}");
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t nmemb, void* out) {
        static_cast<std::string*>(out)->append(data, size * nmemb);
        return size * nmemb;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &received);
  ASSERT_EQ(curl_easy_perform(curl), CURLE_OK);
  curl_easy_cleanup(curl);
  EXPECT_EQ(received, "{\"path\":\"/v1/chat/completions\",\"echo\":{\"a\":1}}");
  EXPECT_EQ(server.requests().at(0).query, "x=1");
  EXPECT_EQ(server.hits("/v1/chat/completions"), 1);
}

TEST(TestHttpServerTest, DestructorInterruptsSlowResponses) {
  auto server = std::make_unique<TestHttpServer>();
  server->Delay("/slow", absl::Seconds(60));
  TestHttpServer::Response stalled;
  stalled.generated_bytes = int64_t{100} << 20;
  stalled.chunk_delay = absl::Seconds(60);
  server->Respond("/stalled", stalled);
  std::string url_slow = server->url("/slow");
  std::string url_stalled = server->url("/stalled");
  FetchOptions options;
  options.guard.allowed_hosts = {"127.0.0.1"};
  std::string dir = ::testing::TempDir();
  absl::Status slow_status, stalled_status;
  std::thread slow(
      [&] { slow_status = FetchToFile(url_slow, dir + "/slow.bin", options).status(); });
  std::thread stall(
      [&] { stalled_status = FetchToFile(url_stalled, dir + "/stalled.bin", options).status(); });
  while (server->hits("/slow") + server->hits("/stalled") < 2)
    absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(100));
  absl::Time start = absl::Now();
  server.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  slow.join();
  stall.join();
  EXPECT_FALSE(slow_status.ok());
  EXPECT_FALSE(stalled_status.ok());
}

TEST(TestHttpServerTest, ManyConcurrentConnections) {
  TestHttpServer server;
  server.Serve("/x", "hello", "text/plain");
  server.Delay("/d", absl::Milliseconds(500), "late");
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  absl::Time start = absl::Now();
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      CURL* curl = curl_easy_init();
      curl_easy_setopt(curl, CURLOPT_URL, server.url(i % 2 ? "/x" : "/d").c_str());
      curl_easy_setopt(curl, CURLOPT_PROXY, "");
      curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Discard);
      long status = 0;
      if (curl_easy_perform(curl) == CURLE_OK &&
          curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200) {
        ++ok;
      }
      curl_easy_cleanup(curl);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 16);
  // The eight delayed answers overlap instead of queueing behind each other (4 s in a row).
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace calleval
