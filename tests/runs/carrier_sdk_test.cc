// The service's webhook verification held to the carriers' real wire format: every webhook
// below is signed here (Telnyx: Ed25519 with a key made here; Plivo: the service's own signature
// V3), then both the service and the carrier's official SDK (pinned in tools/carrier-sdks,
// installed by scripts/setup, run by tests/runs/carrier_sdk_check.js) judge it, and they must
// agree, on the genuine ones and on the forgeries.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/crypto.h"
#include "nlohmann/json.hpp"
#include "services/runs/plivo_carrier.h"
#include "services/runs/telnyx_carrier.h"
#include "tests/support/fake_carriers.h"

namespace calleval::runs {
namespace {

using nlohmann::json;

// The SDKs' verdicts on `cases`, in order.
std::vector<bool> SdkVerdicts(const json& cases) {
  const std::string dir = CALLEVAL_CARRIER_SDKS_DIR;
  EXPECT_TRUE(std::filesystem::exists(dir + "/node_modules/telnyx/package.json") &&
              std::filesystem::exists(dir + "/node_modules/plivo/package.json"))
      << "the carriers' SDKs are not installed in " << dir
      << " (run scripts/setup, or `npm ci` there)";
  const std::string file = absl::StrCat(testing::TempDir(), "/carrier_sdk_cases_", getpid(),
                                        ".json");
  std::ofstream(file) << cases.dump();
  const std::string command = absl::StrCat("node '", CALLEVAL_CARRIER_SDK_CHECK, "' '", dir,
                                           "' '", file, "'");
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  size_t n = 0;
  while (pipe != nullptr && (n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = pipe == nullptr ? -1 : pclose(pipe);
  std::filesystem::remove(file);
  EXPECT_EQ(status, 0) << command << ": " << out;
  json verdicts = json::parse(out, nullptr, false);
  std::vector<bool> result;
  if (verdicts.is_array()) {
    for (const json& v : verdicts) result.push_back(v.is_boolean() && v.get<bool>());
  }
  EXPECT_EQ(result.size(), cases.size()) << out;
  return result;
}

TEST(CarrierSdkTest, TelnyxsSdkAndTheServiceAgreeOnEd25519Webhooks) {
  Ed25519TestKey key, other;
  const absl::Time now = absl::Now();
  const std::string timestamp = absl::StrCat(absl::ToUnixSeconds(now));
  const std::string body =
      R"({"data":{"event_type":"call.hangup","id":"0ccc7b54-4df3-4bca-a65a-3da1ecc777f0",)"
      R"("occurred_at":"2025-11-28T14:26:40.000000Z","payload":{"call_control_id":"v3:x",)"
      R"("hangup_cause":"normal_clearing","hangup_source":"callee","to":"+15550002222",)"
      R"("caller_id_name":"Zoë"},"record_type":"event"},"meta":{"attempt":1}})";
  struct Case {
    std::string what, body, timestamp, signature;
    bool genuine;
  };
  std::string tampered = body;
  tampered.replace(tampered.find("callee"), 6, "caller");
  const std::string stale = absl::StrCat(absl::ToUnixSeconds(now) - 600);
  const std::vector<Case> cases = {
      {"genuine", body, timestamp, key.Sign(absl::StrCat(timestamp, "|", body)), true},
      {"tampered body", tampered, timestamp, key.Sign(absl::StrCat(timestamp, "|", body)), false},
      {"another key", body, timestamp, other.Sign(absl::StrCat(timestamp, "|", body)), false},
      {"signed without the timestamp", body, timestamp, key.Sign(body), false},
      {"stale", body, stale, key.Sign(absl::StrCat(stale, "|", body)), false},
  };
  json requests = json::array();
  std::vector<bool> ours;
  for (const Case& c : cases) {
    requests.push_back({{"carrier", "telnyx"},
                        {"public_key", key.PublicKeyBase64()},
                        {"body", c.body},
                        {"headers",
                         {{"telnyx-timestamp", c.timestamp},
                          {"telnyx-signature-ed25519", c.signature}}}});
    ours.push_back(
        VerifyTelnyxSignature(key.PublicKeyBase64(), c.timestamp, c.signature, c.body, now).ok());
    EXPECT_EQ(ours.back(), c.genuine) << c.what;
  }
  std::vector<bool> sdk = SdkVerdicts(requests);
  for (size_t i = 0; i < sdk.size() && i < cases.size(); ++i) {
    EXPECT_EQ(sdk[i], ours[i]) << cases[i].what;
  }
}

TEST(CarrierSdkTest, PlivosSdkAndTheServiceAgreeOnSignatureV3) {
  const std::string token = "plivo_auth_token_0123456789";
  const std::string nonce = "05429567804466091622";
  using Params = std::multimap<std::string, std::string>;
  struct Case {
    std::string what, method, url;
    Params params;
    std::string signed_with;  // the token the signature is made with
    Params sent;              // what the SDK is told was posted, when not `params`
  };
  const Params hangup = {{"CallUUID", "e6a7fd9a-cc87-11ef-8ab5-b9e4c5b1b0d4"},
                         {"CallStatus", "completed"},
                         {"From", "+15550001111"},
                         {"HangupCauseName", "Normal Hangup"},
                         {"HangupSource", "Callee"},
                         {"RequestUUID", "5b40a428-bfc7-4daf-9d06-726c558bf3b8"}};
  Params tampered = hangup;
  tampered.find("HangupSource")->second = "Caller";
  const std::vector<Case> cases = {
      {"hangup callback", "POST", "https://calleval.example/media/plivo/tok/events", hangup,
       token, {}},
      {"URL with a query", "POST", "https://calleval.example/media/plivo/tok/events?run=7&a=b",
       hangup, token, {}},
      {"no parameters", "POST", "https://calleval.example/media/plivo/tok/answer", {}, token, {}},
      {"GET with a query", "GET", "https://calleval.example/media/plivo/tok/answer?b=2&a=1", {},
       token, {}},
      {"port and one parameter", "POST", "https://calleval.example:8443/media/plivo/t/events",
       {{"Machine", "true"}}, token, {}},
      {"another token", "POST", "https://calleval.example/media/plivo/tok/events", hangup,
       "other_token", {}},
      {"tampered parameters", "POST", "https://calleval.example/media/plivo/tok/events", hangup,
       token, tampered},
  };
  json requests = json::array();
  std::vector<bool> ours;
  for (const Case& c : cases) {
    const std::string signature =
        PlivoSignatureV3(c.signed_with, PlivoSignatureV3Base(c.method, c.url, c.params), nonce);
    const Params& sent = c.sent.empty() ? c.params : c.sent;
    json params = json::object();
    for (const auto& [k, v] : sent) params[k] = v;
    requests.push_back({{"carrier", "plivo"},
                        {"method", c.method},
                        {"url", c.url},
                        {"nonce", nonce},
                        {"auth_token", token},
                        {"signature", signature},
                        {"params", params}});
    ours.push_back(VerifyPlivoSignature(token, c.method, c.url, sent, nonce, signature).ok());
  }
  std::vector<bool> sdk = SdkVerdicts(requests);
  for (size_t i = 0; i < sdk.size() && i < cases.size(); ++i) {
    const bool genuine = cases[i].signed_with == token && cases[i].sent.empty();
    EXPECT_EQ(ours[i], genuine) << cases[i].what;
    EXPECT_EQ(sdk[i], ours[i]) << cases[i].what;
  }
}

}  // namespace
}  // namespace calleval::runs
