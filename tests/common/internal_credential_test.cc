// The internal credential file (common/internal_credential.h): one secret, or a few while the
// secret is rotated, one per line; what is refused and why.

#include "common/internal_credential.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace calleval {
namespace {

using ::testing::HasSubstr;

class InternalCredentialTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::string> Read(const std::string& content) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/credential-", counter_++);
    std::ofstream(path, std::ios::binary) << content;
    return ReadInternalCredential(path);
  }
  int counter_ = 0;
};

constexpr char kA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr char kB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

TEST_F(InternalCredentialTest, OneSecretWithItsNewline) {
  EXPECT_EQ(*Read(absl::StrCat(kA, "\n")), kA);
  EXPECT_EQ(*Read(absl::StrCat("  ", kA, "  \r\n\n")), kA);
}

TEST_F(InternalCredentialTest, SeveralSecretsKeepTheirOrderWithoutBlankLines) {
  EXPECT_EQ(*Read(absl::StrCat(kB, "\n\n", kA, "\n")), absl::StrCat(kB, "\n", kA));
}

TEST_F(InternalCredentialTest, RefusesShortUnprintableEmptyAndTooMany) {
  EXPECT_THAT(Read("short\n").status().message(), HasSubstr("at least 16"));
  EXPECT_THAT(Read(absl::StrCat(kA, "\nshort\n")).status().message(), HasSubstr("at least 16"));
  EXPECT_THAT(Read(absl::StrCat(kA, "\x01", kB)).status().message(), HasSubstr("printable"));
  EXPECT_THAT(Read("\n \n").status().message(), HasSubstr("at least 16"));
  EXPECT_THAT(Read(absl::StrCat(kA, "\n", kB, "\n", kA, "\n", kB, "\n", kA)).status().message(),
              HasSubstr("at most 4"));
  EXPECT_FALSE(ReadInternalCredential("/nonexistent/credential").ok());
}

TEST_F(InternalCredentialTest, AcceptsEverySecretAndNothingElse) {
  const std::string both = absl::StrCat(kB, "\n", kA);
  EXPECT_TRUE(CheckInternalCredential(std::string(kA), both).ok());
  EXPECT_TRUE(CheckInternalCredential(std::string(kB), both).ok());
  EXPECT_EQ(CheckInternalCredential(both, both).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckInternalCredential(std::string(kA) + "x", both).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckInternalCredential(std::nullopt, both).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckInternalCredential(std::string(kA), kB).code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace calleval
