// The alert workers driven by hand (EvaluateOnce, SendOnce) against local receivers: a marked
// workspace is evaluated at once and the notification goes out signed; a redirect is not followed,
// a name resolving to a private address is refused at connect time (DNS rebinding), a slow or
// oversized answer is a failed attempt.

#include "services/calls/alert_workers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/hmac.h>
#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "services/calls/calls_store.h"
#include "tests/services/in_process_directories.h"
#include "tests/support/test_database.h"
#include "tests/support/test_http_server.h"

namespace calleval::calls {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string HexHmac(const std::string& key, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += absl::StrFormat("%02x", mac[i]);
  return hex;
}

class AlertWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/alert_workers_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(db::Backend::kSqlite, SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    accounts::AccountsStore accounts(db());
    workspace_ = accounts.CreateWorkspace("w", 1000000)->id;
    directories_ = std::make_unique<testing::InProcessDirectories>(db());
    v1::AgentFields agent;
    agent.set_name("a");
    agent.set_phone_number("+16502530000");
    agent.set_language_id(1);
    agent.set_instructions("i");
    agent_ = directories_->agents.Create(workspace_, agent)->id();
    AgentLookup lookup = [](int64_t, int64_t) -> absl::StatusOr<AgentInfo> { return AgentInfo{}; };
    CallsStore::Options options;
    recordings_ = *OpenBlobStore(dir_);
    options.recordings = recordings_.get();
    calls_ = std::make_unique<CallsStore>(db(), lookup, options);
    AlertsStore::Options alert_options;
    alert_options.credentials_key = RandomBytes(32);
    alert_options.url_guard.allowed_hosts = {"127.0.0.1"};
    alert_options.agents = lookup;
    alerts_ = std::make_unique<AlertsStore>(db(), alert_options);
    worker_options_.url_guard.allowed_hosts = {"127.0.0.1"};
  }

  void TearDown() override {
    alerts_.reset();
    calls_.reset();
    directories_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  db::Database* db() { return database_->db(); }

  // A rule over the last 10 calls' failed rate, and 10 failed calls: the rule fires at the
  // next evaluation. Answers the rule.
  v1::AlertRule FiringRule(const std::string& url) {
    v1::CreateAlertRuleRequest r;
    r.set_name("failing");
    r.set_figure("calls.failed_rate");
    r.set_op(">");
    r.set_threshold(0.5);
    r.set_window("10 calls");
    r.set_webhook_url(url);
    auto rule = alerts_->Create(workspace_, r);
    EXPECT_TRUE(rule.ok()) << rule.status();
    for (int i = 0; i < 10; ++i) last_call_ = FailedCall();
    return rule.ok() ? *rule : v1::AlertRule();
  }

  int64_t FailedCall() {
    v1::IngestCallRequest r;
    const std::string id = absl::StrCat("c", ++calls_made_);
    r.set_call_identifier(id);
    r.set_agent_id(agent_);
    r.set_call_timestamp(NowTimestamp());
    const StoredRecording wav{absl::StrCat("runs/", id), "audio/wav", 4};
    EXPECT_TRUE(recordings_->Put(wav.key, StringBlobSource("RIFF"), wav.content_type).ok());
    auto call = calls_->Ingest(workspace_, r, &wav);
    EXPECT_TRUE(call.ok()) << call.status();
    auto job = calls_->LeaseAnalysis(absl::Minutes(5), 3);
    EXPECT_TRUE(job.ok() && job->has_value());
    EXPECT_TRUE(calls_->FailAnalysis((*job)->call_id, (*job)->token, "x", "y").ok());
    return call->id();
  }

  std::vector<v1::AlertDelivery> Log(int64_t rule_id) {
    auto log = alerts_->ListDeliveries(workspace_, rule_id, 1, 100);
    EXPECT_TRUE(log.ok()) << log.status();
    return {log->data().begin(), log->data().end()};
  }

  std::string dir_;
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<testing::InProcessDirectories> directories_;
  std::unique_ptr<BlobStore> recordings_;
  std::unique_ptr<CallsStore> calls_;
  std::unique_ptr<AlertsStore> alerts_;
  AlertWorkers::Options worker_options_;
  int64_t workspace_ = 0, agent_ = 0, last_call_ = 0;
  int calls_made_ = 0;
};

TEST_F(AlertWorkersTest, AMarkedWorkspaceIsEvaluatedAndTheNotificationGoesOutSigned) {
  TestHttpServer receiver;
  std::vector<TestHttpServer::Request> got;
  absl::Mutex mu;
  receiver.Handle("/hook", [&](const TestHttpServer::Request& r) {
    absl::MutexLock lock(&mu);
    got.push_back(r);
    TestHttpServer::Response ok;
    ok.status = 202;
    return ok;
  });
  const v1::AlertRule rule = FiringRule(receiver.url("/hook"));
  AlertWorkers workers(alerts_.get(), worker_options_);
  const absl::Time now = absl::Now();
  // The first pass evaluates every rule never checked; the next has nothing due.
  EXPECT_FALSE(workers.EvaluateOnce(now));
  EXPECT_EQ(alerts_->Get(workspace_, rule.id())->state(), "firing");
  ASSERT_TRUE(workers.SendOnce(now));
  EXPECT_FALSE(workers.SendOnce(now));  // nothing else to send
  // A marked workspace (a call settled) is evaluated again at once, though not due by time.
  const std::string checked = alerts_->Get(workspace_, rule.id())->last_checked_at();
  FailedCall();
  workers.MarkWorkspace(workspace_);
  EXPECT_FALSE(workers.EvaluateOnce(now + absl::Seconds(2)));
  EXPECT_NE(alerts_->Get(workspace_, rule.id())->last_checked_at(), checked);

  absl::MutexLock lock(&mu);
  ASSERT_THAT(got, SizeIs(1));
  const TestHttpServer::Request& r = got[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.Header("content-type"), "application/json");
  EXPECT_EQ(r.Header("x-calleval-event"), "firing");
  EXPECT_FALSE(r.Header("x-calleval-delivery").empty());
  const std::string signature = r.Header("x-calleval-signature");
  const size_t comma = signature.find(',');
  ASSERT_NE(comma, std::string::npos) << signature;
  const std::string t = signature.substr(2, comma - 2);
  EXPECT_EQ(signature, absl::StrCat("t=", t, ",v1=", HexHmac(rule.secret(), t + "." + r.body)));
  EXPECT_EQ(nlohmann::json::parse(r.body)["type"], "alert.firing");
  const auto log = Log(rule.id());
  ASSERT_THAT(log, SizeIs(1));
  EXPECT_TRUE(log[0].delivered());
  EXPECT_EQ(log[0].http_status(), 202);
}

TEST_F(AlertWorkersTest, ARedirectIsNotFollowed) {
  TestHttpServer receiver;
  std::atomic<int> followed{0};
  receiver.Redirect("/hook", receiver.url("/elsewhere"), 307);
  receiver.Handle("/elsewhere", [&](const TestHttpServer::Request&) {
    ++followed;
    return TestHttpServer::Response();
  });
  const v1::AlertRule rule = FiringRule(receiver.url("/hook"));
  AlertWorkers workers(alerts_.get(), worker_options_);
  workers.EvaluateOnce(absl::Now());
  ASSERT_TRUE(workers.SendOnce(absl::Now()));
  EXPECT_EQ(followed.load(), 0);
  const auto log = Log(rule.id());
  ASSERT_THAT(log, SizeIs(1));
  EXPECT_FALSE(log[0].delivered());
  EXPECT_EQ(log[0].http_status(), 307);
  EXPECT_TRUE(log[0].has_next_retry_at());
}

// The rule's host passed the literal check when it was made; at send time it resolves to
// loopback, which the connect-time check refuses.
TEST_F(AlertWorkersTest, ANameResolvingToAPrivateAddressIsRefusedAtSendTime) {
  TestHttpServer receiver;
  std::atomic<int> reached{0};
  receiver.Handle("/hook", [&](const TestHttpServer::Request&) {
    ++reached;
    return TestHttpServer::Response();
  });
  const std::string host = "alerts.example.com";
  const v1::AlertRule rule =
      FiringRule(absl::StrCat("https://", host, ":", receiver.port(), "/hook"));
  ASSERT_GT(rule.id(), 0);
  worker_options_.resolve_override = {absl::StrCat(host, ":", receiver.port(), ":127.0.0.1")};
  AlertWorkers workers(alerts_.get(), worker_options_);
  workers.EvaluateOnce(absl::Now());
  ASSERT_TRUE(workers.SendOnce(absl::Now()));
  EXPECT_EQ(reached.load(), 0);
  const auto log = Log(rule.id());
  ASSERT_THAT(log, SizeIs(1));
  EXPECT_FALSE(log[0].delivered());
  EXPECT_FALSE(log[0].has_http_status());
  EXPECT_THAT(log[0].error(), HasSubstr("127.0.0.1"));
  EXPECT_THAT(log[0].error(), HasSubstr("not allowed"));
}

TEST_F(AlertWorkersTest, SlowAndOversizedAnswersAreFailedAttempts) {
  TestHttpServer receiver;
  receiver.Delay("/slow", absl::Seconds(5));
  TestHttpServer::Response huge;
  huge.generated_bytes = 1 << 20;
  receiver.Respond("/huge", huge);
  const v1::AlertRule slow = FiringRule(receiver.url("/slow"));
  v1::CreateAlertRuleRequest r;
  r.set_name("huge");
  r.set_figure("calls.failed_rate");
  r.set_op(">");
  r.set_threshold(0.5);
  r.set_window("10 calls");
  r.set_webhook_url(receiver.url("/huge"));
  const v1::AlertRule big = *alerts_->Create(workspace_, r);
  worker_options_.request_timeout = absl::Milliseconds(500);
  AlertWorkers workers(alerts_.get(), worker_options_);
  workers.EvaluateOnce(absl::Now());
  ASSERT_TRUE(workers.SendOnce(absl::Now()));
  ASSERT_TRUE(workers.SendOnce(absl::Now()));
  for (const v1::AlertRule& rule : {slow, big}) {
    SCOPED_TRACE(rule.name());
    const auto log = Log(rule.id());
    ASSERT_THAT(log, SizeIs(1));
    EXPECT_FALSE(log[0].delivered());
    EXPECT_TRUE(log[0].has_next_retry_at());
  }
  EXPECT_THAT(Log(big.id())[0].error(), HasSubstr("exceeds 65536 bytes"));
}

}  // namespace
}  // namespace calleval::calls
