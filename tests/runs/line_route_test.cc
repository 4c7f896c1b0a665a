// The route a phone line's token carries to the process holding it: minted with the
// installation's credential, verified under any of its secrets, refused whole when anything in
// it was changed.

#include "services/runs/line_route.h"

#include <gtest/gtest.h>

#include "common/crypto.h"
#include "services/runs/phone_lines.h"

namespace calleval::runs {
namespace {

constexpr char kCredential[] = "0123456789abcdef0123456789abcdef";

TEST(LineRouteTest, ARoutedTokenNamesItsHolderUnderTheCredential) {
  const std::string random = Base64Url(RandomBytes(32));
  const std::string token = RoutedLineToken(random, "10.1.2.3:8081", kCredential);
  EXPECT_EQ(token.substr(0, random.size() + 1), random + ".");
  // Path-safe: base64url and the two dots.
  EXPECT_EQ(token.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."),
            std::string::npos);
  EXPECT_EQ(VerifiedLineHolder(token, kCredential), "10.1.2.3:8081");
  EXPECT_EQ(VerifiedLineHolderOfPath("/media/twilio/" + token, kCredential), "10.1.2.3:8081");
  EXPECT_EQ(VerifiedLineHolderOfPath("/media/plivo/" + token + "/answer", kCredential),
            "10.1.2.3:8081");
  // IPv6 and names survive the encoding.
  EXPECT_EQ(VerifiedLineHolder(RoutedLineToken(random, "[fd00::1]:8081", kCredential),
                               kCredential),
            "[fd00::1]:8081");
}

TEST(LineRouteTest, AnyChangeOrAnotherCredentialIsRefused) {
  const std::string random = Base64Url(RandomBytes(32));
  const std::string token = RoutedLineToken(random, "10.1.2.3:8081", kCredential);
  // Another installation's credential.
  EXPECT_EQ(VerifiedLineHolder(token, "another-installation-secret"), std::nullopt);
  // The address swapped for one of the forger's choosing, with the MAC kept.
  const size_t first = token.find('.'), second = token.rfind('.');
  const std::string forged = random + "." + Base64Url("169.254.169.254:80") + token.substr(second);
  EXPECT_EQ(VerifiedLineHolder(forged, kCredential), std::nullopt);
  // The route moved onto another line's random part.
  const std::string moved = Base64Url(RandomBytes(32)) + token.substr(first);
  EXPECT_EQ(VerifiedLineHolder(moved, kCredential), std::nullopt);
  // A MAC of the right length but the wrong value, a short one, none at all, garbage.
  std::string flipped = token;
  flipped[second + 5] = flipped[second + 5] == 'A' ? 'B' : 'A';
  EXPECT_EQ(VerifiedLineHolder(flipped, kCredential), std::nullopt);
  // Nor another spelling of the same MAC (the last character's spare bits changed).
  for (char last : std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")) {
    std::string respelled = token;
    respelled.back() = last;
    if (respelled != token) {
      EXPECT_EQ(VerifiedLineHolder(respelled, kCredential), std::nullopt);
    }
  }
  EXPECT_EQ(VerifiedLineHolder(token.substr(0, token.size() - 4), kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolder(token.substr(0, second), kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolder(random, kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolder("..", kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolder(token + ".x", kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolderOfPath("/other/twilio/" + token, kCredential), std::nullopt);
  EXPECT_EQ(VerifiedLineHolderOfPath("/media/twilio/" + token + "/events/x", kCredential),
            std::nullopt);
}

// Rotation (docs/operations.md): tokens are minted with the first secret and verified under
// each, so lines opened before the new secret came first are still reached.
TEST(LineRouteTest, EverySecretOfARotatingCredentialVerifies) {
  const std::string old_secret = "old-secret-0123456789";
  const std::string new_secret = "new-secret-0123456789";
  const std::string random = Base64Url(RandomBytes(32));
  const std::string before = RoutedLineToken(random, "10.0.0.9:8081", old_secret);
  EXPECT_EQ(VerifiedLineHolder(before, old_secret + "\n" + new_secret), "10.0.0.9:8081");
  EXPECT_EQ(VerifiedLineHolder(before, new_secret + "\n" + old_secret), "10.0.0.9:8081");
  EXPECT_EQ(VerifiedLineHolder(before, new_secret), std::nullopt);
  const std::string after =
      RoutedLineToken(random, "10.0.0.9:8081", new_secret + "\n" + old_secret);
  EXPECT_EQ(VerifiedLineHolder(after, new_secret), "10.0.0.9:8081");
}

// A registry given its listener's address mints routed tokens, which name its lines as plain
// ones do; without one, tokens are the 43 random characters they always were.
TEST(LineRouteTest, PhoneLinesMintRoutedTokensWhenGivenAnAddress) {
  PhoneLines routed("https://calls.example.com", "10.1.2.3:8081", kCredential);
  auto line = routed.Open("twilio", nullptr, absl::Minutes(1));
  EXPECT_EQ(VerifiedLineHolder(line->token(), kCredential), "10.1.2.3:8081");
  EXPECT_EQ(line->media_url(), "wss://calls.example.com/media/twilio/" + line->token());
  auto claimed = routed.ClaimMedia("/media/twilio/" + line->token());
  EXPECT_TRUE(claimed.ok()) << claimed.status();

  PhoneLines plain("https://calls.example.com");
  auto unrouted = plain.Open("twilio", nullptr, absl::Minutes(1));
  EXPECT_EQ(unrouted->token().size(), 43u);
  EXPECT_EQ(VerifiedLineHolder(unrouted->token(), kCredential), std::nullopt);
}

}  // namespace
}  // namespace calleval::runs
