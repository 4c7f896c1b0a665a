// Alert rules end to end (docs/api.md §5.11): a real server scores transcript-only calls on a
// phrase metric (no LLM), `metric.<id>.false_rate > 0.2 over 10 calls` fires once and resolves
// once against local webhook receivers, the signature verifies with an HMAC computed here with
// OpenSSL, the Slack format is Slack's shape, a receiver answering 500 first is retried and the
// delivery log shows both attempts; bad rules are refused.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cmd/calleval/server.h"
#include "common/database.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "tests/integration/http_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/test_http_server.h"

namespace calleval {
namespace {

using ::nlohmann::json;
using testing::HttpClient;
using testing::HttpResponse;

// What a receiver got: each request's headers and body.
struct Received {
  std::string signature;
  std::string event;
  std::string delivery;
  std::string content_type;
  std::string body;
};

class Receiver {
 public:
  // Answers `statuses` in turn, then 204.
  void Listen(TestHttpServer& server, const std::string& path, std::vector<int> statuses = {}) {
    statuses_ = std::move(statuses);
    server.Handle(path, [this](const TestHttpServer::Request& r) {
      TestHttpServer::Response response;
      absl::MutexLock lock(&mu_);
      if (r.method != "POST") {
        response.status = 405;
        return response;
      }
      got_.push_back({r.Header("x-calleval-signature"), r.Header("x-calleval-event"),
                      r.Header("x-calleval-delivery"), r.Header("content-type"), r.body});
      response.status = got_.size() <= statuses_.size() ? statuses_[got_.size() - 1] : 204;
      return response;
    });
  }
  std::vector<Received> got() {
    absl::MutexLock lock(&mu_);
    return got_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Received> got_ ABSL_GUARDED_BY(mu_);
  std::vector<int> statuses_;
};

// The HMAC-SHA256 of `message` under `key`, in hex, with OpenSSL directly.
std::string HexHmac(const std::string& key, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += absl::StrFormat("%02x", mac[i]);
  return hex;
}

// A receiver's check of X-Calleval-Signature: "t=<unix>,v1=<hex>", the HMAC of "<t>.<body>",
// compared in constant time, the timestamp recent.
bool SignatureVerifies(const Received& r, const std::string& secret) {
  std::string t, v1;
  for (absl::string_view part : absl::StrSplit(r.signature, ',')) {
    if (absl::ConsumePrefix(&part, "t=")) t = std::string(part);
    if (absl::ConsumePrefix(&part, "v1=")) v1 = std::string(part);
  }
  int64_t when = 0;
  if (!absl::SimpleAtoi(t, &when) || std::abs(absl::ToUnixSeconds(absl::Now()) - when) > 300) {
    return false;
  }
  const std::string expected = HexHmac(secret, absl::StrCat(t, ".", r.body));
  return v1.size() == expected.size() && CRYPTO_memcmp(v1.data(), expected.data(), v1.size()) == 0;
}

// Waits up to `seconds` for `done`, polling; true when it came.
bool WaitFor(const std::function<bool()>& done, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

class AlertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("alerts");
    ServerConfig config = testing::TestServerConfig(dir_);
    config.workers = 2;
    // Seconds, not minutes: evaluations every second, the first retry after one.
    config.alert_evaluation_interval = absl::Seconds(1);
    config.alert_retry_base = absl::Seconds(1);
    auto server = Server::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<HttpClient>(server_->http_base_url());
    client_->set_api_key(server_->bootstrap()->key.api_key);
    HttpResponse agent = client_->Post("/api/v1/agents", json{{"name", "alerted"},
                                                              {"phone_number", "+14155550123"},
                                                              {"language_id", 1},
                                                              {"instructions", "x"}});
    ASSERT_EQ(agent.status, 201) << agent.body;
    agent_ = agent.json()["id"];
    HttpResponse metric =
        client_->Post("/api/v1/metrics", json{{"name", "Thanks the caller"},
                                              {"metrics_type", "specific_text_/_phrase_check"},
                                              {"phrases", {"thank you for calling"}},
                                              {"agent_ids", {agent_}}});
    ASSERT_EQ(metric.status, 201) << metric.body;
    metric_ = metric.json()["id"];
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  json CreateRule(const std::string& url, const std::string& format) {
    HttpResponse r = client_->Post("/api/v1/alert_rules",
                                   json{{"name", "Thanks missing"},
                                        {"agent_id", agent_},
                                        {"figure", absl::StrCat("metric.", metric_, ".false_rate")},
                                        {"op", ">"},
                                        {"threshold", 0.2},
                                        {"window", "10 calls"},
                                        {"webhook_url", url},
                                        {"format", format}});
    EXPECT_EQ(r.status, 201) << r.body;
    return r.json();
  }

  // A transcript-only call, passing the phrase metric or not; waits for it to settle.
  void Call(bool thanks) {
    const std::string id = absl::StrCat("alert-call-", ++calls_);
    HttpResponse r = client_->Post(
        "/api/public/v1/calls",
        json{{"call_identifier", id},
             {"agent_id", agent_},
             {"transcript",
              {{{"role", "AI Assistant"},
                {"content", thanks ? "Thank you for calling, how can I help?" : "Yes?"}},
               {{"role", "User"}, {"content", "Just checking."}}}}});
    ASSERT_EQ(r.status, 201) << r.body;
    ASSERT_TRUE(WaitFor([&] {
      const std::string status =
          client_->Get("/api/public/v1/calls/" + id).json().value("analysis_status", "");
      return status == "completed" || status == "failed";
    })) << id;
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpClient> client_;
  int64_t agent_ = 0;
  int64_t metric_ = 0;
  int calls_ = 0;
};

TEST_F(AlertsTest, FiresAndResolvesOnceEachSignedInJsonAndSlack) {
  TestHttpServer receivers;
  Receiver json_hook, slack_hook, flaky_hook;
  json_hook.Listen(receivers, "/hook");
  slack_hook.Listen(receivers, "/slack");
  flaky_hook.Listen(receivers, "/flaky", {500});
  const json rule = CreateRule(receivers.url("/hook"), "json");
  const json slack = CreateRule(receivers.url("/slack"), "slack");
  const json flaky = CreateRule(receivers.url("/flaky"), "json");
  ASSERT_TRUE(rule["secret"].is_string());
  const std::string secret = rule["secret"];
  EXPECT_EQ(secret.rfind("whsec_", 0), 0u);
  EXPECT_EQ(rule["state"], "insufficient_data");
  EXPECT_EQ(rule["min_samples"], 10);
  // Shown once: not in a read.
  EXPECT_FALSE(client_->Get(absl::StrCat("/api/v1/alert_rules/", rule["id"].get<int64_t>()))
                   .json()
                   .contains("secret"));

  // Ten calls, four without the phrase: a false rate of 0.4 over the last 10 calls.
  for (int i = 0; i < 10; ++i) Call(i % 5 != 0 && i % 2 != 0 ? false : true);
  ASSERT_TRUE(WaitFor([&] { return !json_hook.got().empty(); })) << "no firing delivered";
  const std::string path = absl::StrCat("/api/v1/alert_rules/", rule["id"].get<int64_t>());
  json now = client_->Get(path).json();
  EXPECT_EQ(now["state"], "firing");
  EXPECT_DOUBLE_EQ(now["last_value"].get<double>(), 0.4);

  // Ten passing calls: the last 10 have no false result; the rule resolves.
  for (int i = 0; i < 10; ++i) Call(true);
  ASSERT_TRUE(WaitFor([&] { return json_hook.got().size() >= 2; })) << "no resolution delivered";
  ASSERT_TRUE(WaitFor([&] { return slack_hook.got().size() >= 2; }));
  EXPECT_EQ(client_->Get(path).json()["state"], "ok");
  // Three more evaluations of the rule (one a second): nothing else arrives.
  std::set<std::string> checked;
  ASSERT_TRUE(WaitFor([&] {
    checked.insert(client_->Get(path).json().value("last_checked_at", ""));
    return checked.size() >= 4;
  }));
  const std::vector<Received> got = json_hook.got();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].event, "firing");
  EXPECT_EQ(got[1].event, "resolved");
  for (const Received& r : got) {
    SCOPED_TRACE(r.body);
    EXPECT_TRUE(SignatureVerifies(r, secret)) << r.signature;
    EXPECT_FALSE(SignatureVerifies(r, "whsec_wrong"));
    EXPECT_EQ(r.content_type, "application/json");
    EXPECT_FALSE(r.delivery.empty());
    json body = json::parse(r.body);
    EXPECT_EQ(body["type"], "alert." + r.event);
    EXPECT_EQ(body["rule"]["id"], rule["id"]);
    EXPECT_EQ(body["rule"]["figure"], rule["figure"]);
    EXPECT_EQ(body["threshold"], 0.2);
    EXPECT_EQ(body["window"], "10 calls");
    EXPECT_EQ(body["samples"], 10);
    EXPECT_TRUE(body["at"].is_string());
  }
  EXPECT_DOUBLE_EQ(json::parse(got[0].body)["value"].get<double>(), 0.4);
  EXPECT_LE(json::parse(got[1].body)["value"].get<double>(), 0.2);

  // Slack's incoming-webhook shape, signed with its own rule's secret.
  const std::vector<Received> slacked = slack_hook.got();
  ASSERT_EQ(slacked.size(), 2u);
  for (const Received& r : slacked) {
    EXPECT_TRUE(SignatureVerifies(r, slack["secret"])) << r.signature;
    json body = json::parse(r.body);
    ASSERT_TRUE(body["text"].is_string()) << r.body;
    ASSERT_TRUE(body["blocks"].is_array()) << r.body;
    for (const json& block : body["blocks"]) {
      ASSERT_TRUE(block["type"].is_string());
      if (block["type"] == "header") EXPECT_EQ(block["text"]["type"], "plain_text");
      if (block["type"] == "section") EXPECT_TRUE(block["fields"].is_array());
    }
  }
  EXPECT_THAT(json::parse(slacked[0].body)["text"].get<std::string>(),
              ::testing::HasSubstr("Alert firing"));

  // The receiver that answered 500 first: the firing retried after about a second; the log
  // shows both attempts, newest first.
  ASSERT_TRUE(WaitFor([&] { return flaky_hook.got().size() >= 3; }));
  const std::string flaky_log =
      absl::StrCat("/api/v1/alert_rules/", flaky["id"].get<int64_t>(), "/deliveries");
  json log;
  ASSERT_TRUE(WaitFor([&] {
    log = client_->Get(flaky_log).json();
    return log["data"].size() >= 3;
  })) << log.dump();
  ASSERT_EQ(log["data"].size(), 3u) << log.dump();
  // Newest first: the ids fall. (The resolution may be sent before or after the retry.)
  EXPECT_GT(log["data"][0]["id"], log["data"][1]["id"]);
  EXPECT_GT(log["data"][1]["id"], log["data"][2]["id"]);
  const json* failed = nullptr;
  const json* retried = nullptr;
  const json* resolved = nullptr;
  for (const json& attempt : log["data"]) {
    if (attempt["event"] == "resolved") resolved = &attempt;
    if (attempt["event"] == "firing" && attempt["attempt"] == 1) failed = &attempt;
    if (attempt["event"] == "firing" && attempt["attempt"] == 2) retried = &attempt;
  }
  ASSERT_TRUE(failed != nullptr && retried != nullptr && resolved != nullptr) << log.dump();
  EXPECT_EQ((*failed)["http_status"], 500);
  EXPECT_EQ((*failed)["delivered"], false);
  EXPECT_TRUE((*failed)["next_retry_at"].is_string());
  EXPECT_TRUE((*failed)["error"].is_string());
  EXPECT_EQ((*retried)["delivered"], true);
  EXPECT_EQ((*retried)["http_status"], 204);
  EXPECT_EQ((*retried)["next_retry_at"], nullptr);
  EXPECT_EQ((*retried)["delivery_id"], (*failed)["delivery_id"]);
  EXPECT_GT((*retried)["id"], (*failed)["id"]);
  // The retry waited for its time (--alert-retry-base-seconds 1 here), both in whole seconds.
  const std::string failed_at = (*failed)["attempted_at"];
  const std::string retry_at = (*failed)["next_retry_at"];
  const std::string retried_at = (*retried)["attempted_at"];
  EXPECT_GT(retry_at, failed_at);
  EXPECT_GE(retried_at, retry_at);
  EXPECT_EQ((*resolved)["attempt"], 1);
  EXPECT_EQ((*resolved)["delivered"], true);
  EXPECT_EQ(log["pagination"]["total_count"], 3);
  const std::vector<Received> flaky_got = flaky_hook.got();
  // The first two requests were the firing, sent again as it was.
  EXPECT_EQ(flaky_got[0].event, "firing");
  for (const Received& r : flaky_got) {
    if (r.delivery != flaky_got[0].delivery) continue;
    EXPECT_EQ(r.body, flaky_got[0].body);
    EXPECT_TRUE(SignatureVerifies(r, flaky["secret"]));
  }
}

TEST_F(AlertsTest, RefusesBadRulesAndHidesOtherWorkspaces) {
  TestHttpServer receivers;
  auto post = [&](json body) { return client_->Post("/api/v1/alert_rules", body); };
  const json good = {{"name", "p95"},  {"figure", "latency.p95_ms"},
                     {"op", ">"},      {"threshold", 1500},
                     {"window", "1h"}, {"webhook_url", receivers.url("/hook")}};
  auto field_of = [](const HttpResponse& r) {
    json body = r.json();
    return body["error"]["details"].empty() ? std::string()
                                            : body["error"]["details"][0].value("field", "");
  };
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"figure", "latency.p99_ms"},
                                                 {"op", "=="},
                                                 {"window", "2m"},
                                                 {"window", "5 calls"},
                                                 {"min_samples", 0},
                                                 {"format", "xml"},
                                                 {"figure", "metric.99999.false_rate"}}) {
    json body = good;
    body[key] = value;
    HttpResponse r = post(body);
    EXPECT_EQ(r.status, 422) << key << " " << r.body;
    EXPECT_EQ(field_of(r), key) << r.body;
  }
  json metadata = good;
  metadata["webhook_url"] = "http://169.254.169.254/latest/meta-data/";
  HttpResponse refused = post(metadata);
  EXPECT_EQ(refused.status, 422) << refused.body;
  EXPECT_EQ(field_of(refused), "webhook_url");
  json missing = good;
  missing.erase("threshold");
  EXPECT_EQ(post(missing).status, 422);

  HttpResponse created = post(good);
  ASSERT_EQ(created.status, 201) << created.body;
  const int64_t id = created.json()["id"];
  HttpResponse list = client_->Get("/api/v1/alert_rules");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.json()["data"].size(), 1u);
  EXPECT_EQ(list.json()["pagination"]["total_count"], 1);

  // Another workspace sees nothing of it.
  auto db = db::Database::Open(dir_ + "/calleval.db", SchemaMigrations());
  ASSERT_TRUE(db.ok());
  accounts::AccountsStore accounts(db->get());
  auto other = accounts.CreateWorkspace("other", 100);
  ASSERT_TRUE(other.ok());
  HttpClient stranger(server_->http_base_url());
  stranger.set_api_key(accounts.CreateKey(other->id, {})->api_key);
  const std::string path = absl::StrCat("/api/v1/alert_rules/", id);
  EXPECT_EQ(stranger.Get(path).status, 404);
  EXPECT_EQ(stranger.Get(path + "/deliveries").status, 404);
  EXPECT_EQ(stranger.Delete(path).status, 404);
  EXPECT_EQ(stranger.Get("/api/v1/alert_rules").json()["data"].size(), 0u);

  HttpResponse deleted = client_->Delete(path);
  EXPECT_EQ(deleted.status, 204) << deleted.body;
  EXPECT_EQ(client_->Get(path).status, 404);
}

}  // namespace
}  // namespace calleval
