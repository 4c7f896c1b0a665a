#include "common/crypto.h"

#include <gtest/gtest.h>

namespace calleval {
namespace {

const std::string kKey(32, 'k');

TEST(SealTest, RoundTripsAndNeverRepeatsACiphertext) {
  const std::string a = Seal(kKey, "sk-secret-token", "agent 7");
  const std::string b = Seal(kKey, "sk-secret-token", "agent 7");
  EXPECT_NE(a, b);  // a fresh nonce each time
  EXPECT_EQ(a.find("sk-secret-token"), std::string::npos);
  EXPECT_EQ(a.size(), 12 + 15 + 16u);
  EXPECT_EQ(*Unseal(kKey, a, "agent 7"), "sk-secret-token");
  EXPECT_EQ(*Unseal(kKey, Seal(kKey, ""), ""), "");
}

TEST(SealTest, AlteredWrongKeyOrOtherRowDoesNotOpen) {
  const std::string sealed = Seal(kKey, "secret", "agent 7");
  std::string altered = sealed;
  altered[14] ^= 1;
  EXPECT_EQ(Unseal(kKey, altered, "agent 7").status().code(), absl::StatusCode::kDataLoss);
  std::string tag_altered = sealed;
  tag_altered.back() ^= 1;
  EXPECT_FALSE(Unseal(kKey, tag_altered, "agent 7").ok());
  EXPECT_FALSE(Unseal(std::string(32, 'x'), sealed, "agent 7").ok());
  EXPECT_FALSE(Unseal(kKey, sealed, "agent 8").ok());
  EXPECT_FALSE(Unseal(kKey, "short", "agent 7").ok());
  EXPECT_FALSE(Unseal("short key", sealed, "agent 7").ok());
}

TEST(Base64Test, StandardAlphabetWithPadding) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
  EXPECT_EQ(*Base64Decode("Zg=="), "f");
  EXPECT_EQ(*Base64Decode("Zm8="), "fo");
  EXPECT_EQ(*Base64Decode("//4A"), std::string("\xff\xfe\x00", 3));
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(*Base64Decode(Base64Encode(all)), all);
  EXPECT_FALSE(Base64Decode("Zg=").has_value());
  EXPECT_FALSE(Base64Decode("Z!==").has_value());
}

}  // namespace
}  // namespace calleval
