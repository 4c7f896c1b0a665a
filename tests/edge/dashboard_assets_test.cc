// How the edge answers for the dashboard's files (edge/dashboard_assets.h): the bytes or their
// gzip copy by Accept-Encoding, 304 for a current ETag, the caching headers by kind, the
// security headers on every answer; and the embedded build itself: an index page naming only
// files that are embedded, no inline script or style, under the size budget.

#include "edge/dashboard_assets.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace calleval::edge {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr DashboardAsset kAssets[] = {
    {"/", "text/html; charset=utf-8", "<html>page</html>", "GZ-PAGE", "\"etag-page\"", false},
    {"/assets/main-ABC.js", "text/javascript; charset=utf-8", "code()", "GZ-CODE",
     "\"etag-code\"", true},
};

LocalRequest Get(std::string path, std::vector<std::pair<std::string, std::string>> headers = {}) {
  LocalRequest request;
  request.method = "GET";
  request.path = std::move(path);
  for (auto& [k, v] : headers) request.headers[k] = v;
  return request;
}

std::string HeaderOf(const LocalResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

TEST(DashboardAssetsTest, ServesBytesOrGzipByAcceptEncoding) {
  LocalResponse plain = ServeDashboardAsset(kAssets, Get("/"));
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body, "<html>page</html>");
  EXPECT_EQ(plain.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(HeaderOf(plain, "Content-Encoding"), "");
  EXPECT_EQ(HeaderOf(plain, "Vary"), "Accept-Encoding");

  for (const char* accepted : {"gzip", "br, gzip;q=0.5", "deflate, *", "GZIP"}) {
    LocalResponse gz = ServeDashboardAsset(kAssets, Get("/", {{"accept-encoding", accepted}}));
    EXPECT_EQ(gz.body, "GZ-PAGE") << accepted;
    EXPECT_EQ(HeaderOf(gz, "Content-Encoding"), "gzip") << accepted;
  }
  for (const char* refused : {"br", "gzip;q=0", "*, gzip;q=0", "identity"}) {
    LocalResponse r = ServeDashboardAsset(kAssets, Get("/", {{"accept-encoding", refused}}));
    EXPECT_EQ(r.body, "<html>page</html>") << refused;
  }
}

TEST(DashboardAssetsTest, CachingByKindAndNotModified) {
  LocalResponse page = ServeDashboardAsset(kAssets, Get("/"));
  EXPECT_EQ(HeaderOf(page, "Cache-Control"), "no-cache");
  EXPECT_EQ(HeaderOf(page, "ETag"), "\"etag-page\"");
  LocalResponse code = ServeDashboardAsset(kAssets, Get("/assets/main-ABC.js"));
  EXPECT_EQ(HeaderOf(code, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(code.body, "code()");

  for (const char* tag : {"\"etag-page\"", "W/\"etag-page\"", "\"x\", \"etag-page\"", "*"}) {
    LocalResponse again = ServeDashboardAsset(kAssets, Get("/", {{"if-none-match", tag}}));
    EXPECT_EQ(again.status, 304) << tag;
    EXPECT_TRUE(again.body.empty());
    EXPECT_EQ(HeaderOf(again, "ETag"), "\"etag-page\"");
  }
  EXPECT_EQ(ServeDashboardAsset(kAssets, Get("/", {{"if-none-match", "\"old\""}})).status, 200);
}

TEST(DashboardAssetsTest, UnknownFileIs404AndEveryAnswerCarriesThePolicy) {
  LocalResponse missing = ServeDashboardAsset(kAssets, Get("/assets/main-OLD.js"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("\"not_found\""));
  EXPECT_EQ(HeaderOf(missing, "Cache-Control"), "no-store");
  for (const LocalResponse& r : {missing, ServeDashboardAsset(kAssets, Get("/"))}) {
    EXPECT_EQ(HeaderOf(r, "Content-Security-Policy"), kDashboardContentSecurityPolicy);
    EXPECT_EQ(HeaderOf(r, "X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(HeaderOf(r, "X-Frame-Options"), "DENY");
  }
  EXPECT_THAT(std::string(kDashboardContentSecurityPolicy), HasSubstr("script-src 'self';"));
  EXPECT_THAT(std::string(kDashboardContentSecurityPolicy), HasSubstr("frame-ancestors 'none'"));
}

// The build embedded in this binary.
TEST(DashboardAssetsTest, TheEmbeddedBuildIsWholeAndSmall) {
  absl::Span<const DashboardAsset> assets = DashboardAssets();
  const DashboardAsset* page = nullptr;
  size_t gzipped = 0;
  for (const DashboardAsset& a : assets) {
    if (a.path == "/") page = &a;
    gzipped += a.gzip.size();
    EXPECT_FALSE(a.bytes.empty()) << a.path;
    EXPECT_EQ(a.immutable, a.path != "/") << a.path;
  }
  ASSERT_NE(page, nullptr);
  const std::string html(page->bytes);
  // Every file the page names is embedded; no inline code for the policy to refuse.
  for (const DashboardAsset& a : assets) {
    if (a.path != "/") EXPECT_THAT(html, HasSubstr(std::string(a.path))) << a.path;
  }
  EXPECT_THAT(html, HasSubstr("<script type=\"module\" src=\"/assets/"));
  EXPECT_FALSE(absl::StrContains(html, "<style"));
  EXPECT_FALSE(absl::StrContains(html, " style="));
  EXPECT_FALSE(absl::StrContains(html, "<script>"));
  // The budget: the first page's files under 500 KB gzipped.
  EXPECT_LT(gzipped, 500u * 1024);
}

}  // namespace
}  // namespace calleval::edge
