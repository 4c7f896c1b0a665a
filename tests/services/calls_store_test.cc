#include "services/calls/calls_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/errors.h"
#include "common/schema.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "services/accounts/accounts_store.h"
#include "tests/support/test_database.h"

namespace calleval::calls {
namespace {

using ::testing::ElementsAre;

// The ledger through the accounts store, with the failures of a process boundary: a reservation
// whose answer is lost after it was made, and refunds that cannot be applied (accounts
// unreachable, or the process dies before it applies them).
class FlakyCredits : public Credits {
 public:
  explicit FlakyCredits(Credits* real) : real_(real) {}
  absl::StatusOr<Reservation> Reserve(int64_t workspace_id, int64_t call_id,
                                      const std::vector<Charge>& charges) override {
    ++reservations;
    if (refuse_reservations) return absl::UnavailableError("accounts is unreachable");
    auto reserved = real_->Reserve(workspace_id, call_id, charges);
    if (lose_reservation_answers) return absl::UnavailableError("the answer was lost");
    return reserved;
  }
  absl::Status Refund(int64_t workspace_id, int64_t call_id,
                      const std::vector<int64_t>& metric_ids) override {
    if (refuse_refunds) return absl::UnavailableError("accounts is unreachable");
    return real_->Refund(workspace_id, call_id, metric_ids);
  }
  bool refuse_reservations = false;
  bool lose_reservation_answers = false;
  bool refuse_refunds = false;
  int reservations = 0;

 private:
  Credits* real_;
};

// Every case on a SQLite file and on PostgreSQL; recordings in a directory of their own.
class CallsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/calls_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts_ = std::make_unique<accounts::AccountsStore>(db_.get());
    workspace_ = accounts_->CreateWorkspace("w", 0)->id;
    other_workspace_ = accounts_->CreateWorkspace("o", 0)->id;
    signer_ = std::make_unique<RecordingSigner>("k", "http://edge", absl::Hours(1));
    real_credits_ = NewStoreCredits(accounts_.get());
    credits_ = std::make_unique<FlakyCredits>(real_credits_.get());
    OpenStore();
  }
  // The store as a process opens it (again, after a "restart").
  void OpenStore() {
    CallsStore::Options options;
    recordings_ = *OpenBlobStore(dir_);
    options.recordings = recordings_.get();
    options.signer = signer_.get();
    options.credits = credits_.get();
    store_ = std::make_unique<CallsStore>(
        db_.get(),
        [](int64_t workspace, int64_t agent) -> absl::StatusOr<AgentInfo> {
          if (agent == 7) return AgentInfo{{12}};
          if (agent == 70) {
            AgentInfo versioned;
            versioned.version = "prompt-v3";
            return versioned;
          }
          return ValidationError("agent_not_found", "no agent");
        },
        options);
  }
  void TearDown() override {
    store_.reset();
    credits_.reset();
    real_credits_.reset();
    accounts_.reset();
    db_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  v1::IngestCallRequest Request(const std::string& identifier, bool recording) {
    v1::IngestCallRequest r;
    r.set_call_identifier(identifier);
    r.set_agent_id(7);
    if (recording) {
      r.set_recording_url("https://recordings.example.com/" + identifier + ".wav");
    } else {
      auto* turn = r.add_transcript();
      turn->set_role("User");
      turn->set_content("hi");
      turn->set_start_time(0);
      turn->set_end_time(1.6);
    }
    return r;
  }

  std::string dir_;
  std::unique_ptr<BlobStore> recordings_;  // the local store in dir_
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<RecordingSigner> signer_;
  std::unique_ptr<accounts::AccountsStore> accounts_;
  std::unique_ptr<Credits> real_credits_;
  std::unique_ptr<FlakyCredits> credits_;
  std::unique_ptr<CallsStore> store_;
  int64_t workspace_ = 0, other_workspace_ = 0;
};

// The agent's version label at ingest is the call's `version` (docs/api.md §5.10), on both
// ingest paths (PostgreSQL's one statement with the plan, and a run's recorded call).
TEST_P(CallsStoreTest, IngestRecordsTheAgentsVersion) {
  auto request = Request("versioned", false);
  request.set_agent_id(70);
  auto ingested = store_->Ingest(workspace_, request);
  ASSERT_TRUE(ingested.ok()) << ingested.status();
  EXPECT_EQ(ingested->version(), "prompt-v3");
  auto read = store_->Get(workspace_, "versioned");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->version(), "prompt-v3");
  EXPECT_EQ(ingested->SerializeAsString(), read->SerializeAsString());
  auto plain = store_->Ingest(workspace_, Request("unversioned", false));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(store_->Get(workspace_, "unversioned")->has_version());
  EXPECT_FALSE(store_->Get(workspace_, "unversioned")->has_platform_version());
}

// The platform's version of an external agent comes with the call's origin, never from its
// fields: a run's call (Retell's agent_version as the run was answered) and a platform's
// production call (as its webhook says) record it; a pushed call has none.
TEST_P(CallsStoreTest, IngestRecordsThePlatformsVersionFromTheOrigin) {
  RunOrigin run;
  run.run_id = 3;
  run.scenario_id = 4;
  run.platform_version = "7";
  auto from_run = store_->Ingest(workspace_, Request("run-3", false), nullptr, run);
  ASSERT_TRUE(from_run.ok()) << from_run.status();
  EXPECT_EQ(from_run->platform_version(), "7");
  auto read = store_->Get(workspace_, "run-3");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->platform_version(), "7");
  EXPECT_EQ(from_run->SerializeAsString(), read->SerializeAsString());

  RunOrigin production;
  production.platform_version = "12";
  auto from_platform =
      store_->Ingest(workspace_, Request("retell-call-1", false), nullptr, production);
  ASSERT_TRUE(from_platform.ok()) << from_platform.status();
  EXPECT_EQ(store_->Get(workspace_, "retell-call-1")->platform_version(), "12");

  auto pushed = store_->Ingest(workspace_, Request("pushed", false));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_FALSE(pushed->has_platform_version());
  EXPECT_FALSE(store_->Get(workspace_, "pushed")->has_platform_version());
}

TEST_P(CallsStoreTest, IngestAnswerEqualsWhatIsReadBack) {
  auto request = Request("a", false);
  request.set_tag("t");
  (*request.mutable_metadata()->mutable_fields())["k"].set_string_value("v");
  (*request.mutable_metadata()->mutable_fields())["gone"].set_null_value(
      google::protobuf::NULL_VALUE);
  auto ingested = store_->Ingest(workspace_, request);
  ASSERT_TRUE(ingested.ok()) << ingested.status();
  auto read = store_->Get(workspace_, "a");
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(ingested->SerializeAsString(), read->SerializeAsString())
      << ingested->DebugString() << "\nvs\n"
      << read->DebugString();
  EXPECT_EQ(read->metadata().fields().size(), 1);
  EXPECT_EQ(read->duration_seconds(), 2);
  EXPECT_EQ(read->observation_type(), "text");
}

TEST_P(CallsStoreTest, DuplicatePerWorkspace) {
  ASSERT_TRUE(store_->Ingest(workspace_, Request("dup", false)).ok());
  absl::Status dup = store_->Ingest(workspace_, Request("dup", false)).status();
  EXPECT_EQ(HttpStatusFor(dup), 409);
  EXPECT_TRUE(store_->Ingest(other_workspace_, Request("dup", false)).ok());
}

TEST_P(CallsStoreTest, DigitsTriedAsIdFirstThenAsIdentifier) {
  auto first = store_->Ingest(workspace_, Request("first", false));
  ASSERT_TRUE(first.ok());
  const std::string id = std::to_string(first->id());
  // A second call whose identifier is the first call's id.
  auto second = store_->Ingest(workspace_, Request(id, false));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(store_->Get(workspace_, id)->call_identifier(), "first");
  EXPECT_EQ(store_->Get(workspace_, "999999").status().code(), absl::StatusCode::kNotFound);
  // An identifier of digits that is no id is found as an identifier.
  ASSERT_TRUE(store_->Ingest(workspace_, Request("424242", false)).ok());
  EXPECT_EQ(store_->Get(workspace_, "424242")->call_identifier(), "424242");
}

TEST_P(CallsStoreTest, OtherWorkspaceIsNotFound) {
  auto call = store_->Ingest(workspace_, Request("mine", false));
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(store_->Get(other_workspace_, "mine").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(other_workspace_, std::to_string(call->id())).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(other_workspace_, "mine").code(), absl::StatusCode::kNotFound);
}

TEST_P(CallsStoreTest, IgnoredMetricIdsUseTheAgentsDisabledList) {
  auto request = Request("m", false);
  for (int64_t id : {12, 11, 3, 77}) request.add_metric_ids(id);
  auto call = store_->Ingest(workspace_, request);
  ASSERT_TRUE(call.ok());
  EXPECT_THAT(call->metric_ids(), ElementsAre(11));
  EXPECT_THAT(call->ignored_metric_ids(), ElementsAre(12, 3, 77));
}

TEST_P(CallsStoreTest, UnknownAgentAndPrivateUrlRejected) {
  auto request = Request("x", false);
  request.set_agent_id(8);
  EXPECT_EQ(ErrorInfoOf(store_->Ingest(workspace_, request).status()).code(), "agent_not_found");
  auto private_url = Request("y", true);
  private_url.set_recording_url("http://169.254.169.254/latest/meta-data");
  absl::Status status = store_->Ingest(workspace_, private_url).status();
  EXPECT_EQ(HttpStatusFor(status), 422);
  EXPECT_EQ(ErrorInfoOf(status).details(0).field(), "recording_url");
}

TEST_P(CallsStoreTest, RecordingJobsAreLeasedOnceAndFinish) {
  auto a = store_->Ingest(workspace_, Request("ra", true));
  auto b = store_->Ingest(workspace_, Request("rb", true));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->transcription_status(), "pending");
  auto first = store_->ClaimRecordingJob(absl::Minutes(5));
  auto second = store_->ClaimRecordingJob(absl::Minutes(5));
  auto none = store_->ClaimRecordingJob(absl::Minutes(5));
  ASSERT_TRUE(first.ok() && second.ok() && none.ok());
  ASSERT_TRUE(first->has_value() && second->has_value());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ((*first)->call_id, a->id());
  EXPECT_EQ((*first)->attempts, 1);
  EXPECT_EQ((*second)->call_id, b->id());

  ASSERT_TRUE(store_->CompleteRecording(a->id(), "audio/wav", 10).ok());
  auto stored = store_->Get(workspace_, "ra");
  EXPECT_TRUE(stored->has_presigned_recording_url());
  EXPECT_EQ(store_->GetRecording(a->id())->content_type, "audio/wav");

  ASSERT_TRUE(store_->FailRecording(b->id(), "recording download failed: HTTP 404").ok());
  auto failed = store_->Get(workspace_, "rb");
  EXPECT_EQ(failed->analysis_status(), "failed");
  EXPECT_EQ(failed->failure_reason(), "download_failed");
  EXPECT_EQ(failed->failure_message(), "recording download failed: HTTP 404");
  EXPECT_EQ(failed->transcription_status(), "failed");
  EXPECT_FALSE(failed->has_presigned_recording_url());
  // A finished job is not handed out again.
  EXPECT_FALSE(store_->ClaimRecordingJob(absl::Minutes(5))->has_value());
}

TEST_P(CallsStoreTest, ExpiredLeaseIsHandedOutAgainAndReleaseDoesNotCount) {
  auto a = store_->Ingest(workspace_, Request("lease", true));
  ASSERT_TRUE(a.ok());
  auto first = store_->ClaimRecordingJob(absl::ZeroDuration());  // expires at once
  ASSERT_TRUE(first.ok() && first->has_value());
  auto again = store_->ClaimRecordingJob(absl::Minutes(5));
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->attempts, 2);
  ASSERT_TRUE(store_->ReleaseRecording(a->id()).ok());
  auto after_release = store_->ClaimRecordingJob(absl::Minutes(5));
  ASSERT_TRUE(after_release.ok() && after_release->has_value());
  EXPECT_EQ((*after_release)->attempts, 2);
  ASSERT_TRUE(store_->RetryRecording(a->id(), absl::Minutes(1)).ok());
  EXPECT_FALSE(store_->ClaimRecordingJob(absl::Minutes(5))->has_value());  // not before the delay
}

TEST_P(CallsStoreTest, UpdateMergesAndClears) {
  auto request = Request("u", false);
  request.set_label("l");
  request.set_tag("t");
  ASSERT_TRUE(store_->Ingest(workspace_, request).ok());
  v1::CallUpdate update;
  update.add_null_fields("label");
  update.set_customer_number("+15550100");
  update.add_set_fields("customer_number");
  auto call = store_->Update(workspace_, "u", std::nullopt, update);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_FALSE(call->has_label());
  EXPECT_EQ(call->tag(), "t");
  EXPECT_EQ(call->customer_number(), "+15550100");
  EXPECT_EQ(store_->Update(workspace_, "u", 8, update).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(workspace_, "u")->customer_number(), "+15550100");
}

// The call identifiers a listing answers, newest first; the test fails on an error.
std::vector<std::string> Identifiers(const absl::StatusOr<v1::ListCallsResponse>& listed) {
  EXPECT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> identifiers;
  if (!listed.ok()) return identifiers;
  for (const v1::Call& call : listed->data()) identifiers.push_back(call.call_identifier());
  return identifiers;
}

v1::ListCallsRequest ListRequest(absl::string_view text_proto) {
  v1::ListCallsRequest request;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(std::string(text_proto), &request))
      << text_proto;
  return request;
}

// The fields a refused listing names, in order.
std::vector<std::string> RefusedFields(const absl::StatusOr<v1::ListCallsResponse>& listed) {
  EXPECT_EQ(HttpStatusFor(listed.status()), 422) << listed.status();
  std::vector<std::string> fields;
  const v1::ErrorInfo info = ErrorInfoOf(listed.status());
  for (const auto& detail : info.details()) {
    fields.push_back(detail.field());
  }
  return fields;
}

TEST_P(CallsStoreTest, ListFiltersByTranscriptionStatus) {
  // A text call has its transcript at ingest; a voice call without one waits for it.
  ASSERT_TRUE(store_->Ingest(workspace_, Request("text", false)).ok());
  ASSERT_TRUE(store_->Ingest(workspace_, Request("voice", true)).ok());
  ASSERT_TRUE(store_->Ingest(other_workspace_, Request("elsewhere", false)).ok());
  EXPECT_THAT(Identifiers(store_->List(workspace_, ListRequest(R"pb(transcription_status:
                                                                    "completed")pb"))),
              ElementsAre("text"));
  EXPECT_THAT(
      Identifiers(store_->List(workspace_, ListRequest(R"pb(transcription_status: "pending")pb"))),
      ElementsAre("voice"));
  EXPECT_THAT(Identifiers(store_->List(workspace_, ListRequest(R"pb(transcription_status: "failed"
                                                                    )pb"))),
              ElementsAre());
  // With the other filters: a voice call whose transcript is complete is none of them.
  EXPECT_THAT(Identifiers(store_->List(
                  workspace_, ListRequest(R"pb(transcription_status: "completed"
                                               observation_type: "voice")pb"))),
              ElementsAre());
  EXPECT_THAT(Identifiers(store_->List(
                  workspace_, ListRequest(R"pb(transcription_status: "pending"
                                               analysis_status: "pending" agent_id: 7)pb"))),
              ElementsAre("voice"));
  // analysis_status' states are not transcription states.
  EXPECT_THAT(
      RefusedFields(store_->List(workspace_, ListRequest(R"pb(transcription_status: "computed")pb"))),
      ElementsAre("transcription_status"));
  EXPECT_THAT(RefusedFields(store_->List(workspace_, ListRequest(R"pb(transcription_status: ""
                                                                      )pb"))),
              ElementsAre("transcription_status"));
}

TEST_P(CallsStoreTest, ListFiltersByCallTimestampFromInclusiveToExclusive) {
  for (const auto& [identifier, timestamp] :
       std::vector<std::pair<std::string, std::string>>{{"ten", "2026-11-22T10:00:00Z"},
                                                        {"quarter", "2026-11-22T10:15:00Z"},
                                                        {"half", "2026-11-22T10:30:00Z"}}) {
    auto request = Request(identifier, false);
    request.set_call_timestamp(timestamp);
    ASSERT_TRUE(store_->Ingest(workspace_, request).ok());
  }
  auto listed = [&](absl::string_view text_proto) {
    return Identifiers(store_->List(workspace_, ListRequest(text_proto)));
  };
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T10:15:00Z")pb"),
              ElementsAre("half", "quarter"));
  EXPECT_THAT(listed(R"pb(call_timestamp_to: "2026-11-22T10:15:00Z")pb"), ElementsAre("ten"));
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T10:00:00Z"
                          call_timestamp_to: "2026-11-22T10:30:00Z")pb"),
              ElementsAre("quarter", "ten"));
  // Any RFC 3339 offset, converted to UTC.
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T12:15:00+02:00"
                          call_timestamp_to: "2026-11-22T06:30:00-04:00")pb"),
              ElementsAre("quarter"));
  // Calls are timed in whole seconds: 10:15:00 is before 10:15:00.5, and after 10:14:59.5.
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T10:15:00.5Z")pb"), ElementsAre("half"));
  EXPECT_THAT(listed(R"pb(call_timestamp_to: "2026-11-22T10:15:00.5Z")pb"),
              ElementsAre("quarter", "ten"));
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T10:14:59.5Z")pb"),
              ElementsAre("half", "quarter"));
  // An empty range, and one that ends before it starts, list nothing.
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T10:15:00Z"
                          call_timestamp_to: "2026-11-22T10:15:00Z")pb"),
              ElementsAre());
  EXPECT_THAT(listed(R"pb(call_timestamp_from: "2026-11-22T11:00:00Z"
                          call_timestamp_to: "2026-11-22T09:00:00Z")pb"),
              ElementsAre());
  // Paged: the total counts the range only.
  auto page = store_->List(workspace_, ListRequest(R"pb(call_timestamp_from: "2026-11-22T10:00:00Z"
                                                        per_page: 1 page: 2)pb"));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(Identifiers(page), ElementsAre("quarter"));
  EXPECT_EQ(page->pagination().total_count(), 3);
  EXPECT_EQ(page->pagination().total_pages(), 3);
}

TEST_P(CallsStoreTest, ListRefusesTimestampsThatAreNotRfc3339NamingEachField) {
  EXPECT_THAT(RefusedFields(store_->List(workspace_, ListRequest(R"pb(call_timestamp_from:
                                                                        "yesterday")pb"))),
              ElementsAre("call_timestamp_from"));
  EXPECT_THAT(RefusedFields(store_->List(workspace_, ListRequest(R"pb(call_timestamp_to:
                                                                        "2026-11-22")pb"))),
              ElementsAre("call_timestamp_to"));
  // Every problem at once, the other filters' among them.
  auto refused = store_->List(workspace_, ListRequest(R"pb(analysis_status: "done"
                                                           transcription_status: "done"
                                                           call_timestamp_from: "2026-13-01T00:00:00Z"
                                                           call_timestamp_to: "")pb"));
  EXPECT_THAT(RefusedFields(refused), ElementsAre("analysis_status", "transcription_status",
                                                  "call_timestamp_from", "call_timestamp_to"));
  EXPECT_EQ(ErrorInfoOf(refused.status()).code(), "validation_failed");
}

TEST_P(CallsStoreTest, ListSearchesIdentifierPrefixesCaseSensitively) {
  for (const char* identifier : {"crm-1", "crm-2", "CRM-3", "xcrm-4"}) {
    ASSERT_TRUE(store_->Ingest(workspace_, Request(identifier, false)).ok());
  }
  ASSERT_TRUE(store_->Ingest(other_workspace_, Request("crm-9", false)).ok());
  auto search = [&](absl::string_view text) {
    v1::ListCallsRequest request;
    request.set_search(std::string(text));
    return Identifiers(store_->List(workspace_, request));
  };
  EXPECT_THAT(search("crm-"), ElementsAre("crm-2", "crm-1"));
  EXPECT_THAT(search("crm-1"), ElementsAre("crm-1"));
  EXPECT_THAT(search("CRM"), ElementsAre("CRM-3"));
  EXPECT_THAT(search("Crm"), ElementsAre());
  EXPECT_THAT(search("rm-"), ElementsAre());  // a prefix, not a substring
  EXPECT_THAT(search("crm-1-and-more"), ElementsAre());
  EXPECT_THAT(search(""), ElementsAre("xcrm-4", "CRM-3", "crm-2", "crm-1"));
}

TEST_P(CallsStoreTest, ListSearchTakesPatternCharactersLiterally) {
  // Each identifier that a wildcard in the search would also match stands beside the one it
  // names literally.
  for (const char* identifier :
       {"50%off", "50-off", "crm_x", "crmAx", "a*b", "a-b", "a?b", "[ab]c", "ac", "ab", "a\\b", "a\\"}) {
    ASSERT_TRUE(store_->Ingest(workspace_, Request(identifier, false)).ok());
  }
  auto search = [&](absl::string_view text) {
    v1::ListCallsRequest request;
    request.set_search(std::string(text));
    return Identifiers(store_->List(workspace_, request));
  };
  EXPECT_THAT(search("50%"), ElementsAre("50%off"));
  EXPECT_THAT(search("%"), ElementsAre());
  EXPECT_THAT(search("crm_"), ElementsAre("crm_x"));
  EXPECT_THAT(search("_"), ElementsAre());
  EXPECT_THAT(search("a*"), ElementsAre("a*b"));
  EXPECT_THAT(search("*"), ElementsAre());
  EXPECT_THAT(search("a?"), ElementsAre("a?b"));
  EXPECT_THAT(search("[ab]"), ElementsAre("[ab]c"));
  EXPECT_THAT(search("a\\b"), ElementsAre("a\\b"));  // the escape character itself
  EXPECT_THAT(search("ab"), ElementsAre("ab"));
  EXPECT_THAT(search("a\\"), ElementsAre("a\\", "a\\b"));
  // A NUL is refused before either backend sees it (PostgreSQL would search up to it only).
  v1::ListCallsRequest nul;
  nul.set_search(std::string("a\0b", 3));
  EXPECT_THAT(RefusedFields(store_->List(workspace_, nul)), ElementsAre("search"));
}

TEST_P(CallsStoreTest, ListSearchOfDigitsAlsoFindsTheCallWithThatId) {
  auto first = store_->Ingest(workspace_, Request("first", false));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string id = std::to_string(first->id());
  ASSERT_TRUE(store_->Ingest(workspace_, Request(id + "-crm", false)).ok());
  ASSERT_TRUE(store_->Ingest(workspace_, Request("second", false)).ok());
  auto search = [&](int64_t workspace, absl::string_view text) {
    v1::ListCallsRequest request;
    request.set_search(std::string(text));
    return Identifiers(store_->List(workspace, request));
  };
  EXPECT_THAT(search(workspace_, id), ElementsAre(id + "-crm", "first"));
  // Another workspace's call of that id is not found by it.
  EXPECT_THAT(search(other_workspace_, id), ElementsAre());
  // Not all digits: only identifiers.
  EXPECT_THAT(search(workspace_, id + "-"), ElementsAre(id + "-crm"));
  EXPECT_THAT(search(workspace_, "+" + id), ElementsAre());
  // Too many digits for an id: still an identifier prefix.
  EXPECT_THAT(search(workspace_, "99999999999999999999999"), ElementsAre());
  // The id is one more condition with the other filters, not an alternative to them.
  v1::ListCallsRequest tagged;
  tagged.set_search(id);
  tagged.set_tag("none");
  EXPECT_THAT(Identifiers(store_->List(workspace_, tagged)), ElementsAre());
}

TEST_P(CallsStoreTest, ListCombinesEveryFilter) {
  struct Made {
    const char* identifier;
    const char* timestamp;
    const char* tag;
    bool recording;
  };
  for (const Made& m : std::vector<Made>{{"crm-1", "2026-11-22T10:00:00Z", "a", false},
                                         {"crm-2", "2026-11-22T11:00:00Z", "a", true},
                                         {"crm-3", "2026-11-22T12:00:00Z", "b", false},
                                         {"web-4", "2026-11-22T11:30:00Z", "a", false},
                                         {"crm-5", "2026-11-22T11:45:00Z", "a", false}}) {
    auto request = Request(m.identifier, m.recording);
    request.set_call_timestamp(m.timestamp);
    request.set_tag(m.tag);
    ASSERT_TRUE(store_->Ingest(workspace_, request).ok());
  }
  auto listed = store_->List(workspace_, ListRequest(R"pb(
    agent_id: 7
    analysis_status: "pending"
    transcription_status: "completed"
    tag: "a"
    observation_type: "text"
    call_timestamp_from: "2026-11-22T10:30:00Z"
    call_timestamp_to: "2026-11-22T12:00:00Z"
    search: "crm-"
    per_page: 10
  )pb"));
  EXPECT_THAT(Identifiers(listed), ElementsAre("crm-5"));
  EXPECT_EQ(listed->pagination().total_count(), 1);
  // Each filter left out lets in the call it alone kept out.
  EXPECT_THAT(Identifiers(store_->List(workspace_, ListRequest(R"pb(
    tag: "a" call_timestamp_from: "2026-11-22T10:30:00Z" call_timestamp_to: "2026-11-22T12:00:00Z"
    search: "crm-")pb"))),
              ElementsAre("crm-5", "crm-2"));
  EXPECT_THAT(Identifiers(store_->List(workspace_, ListRequest(R"pb(
    tag: "a" transcription_status: "completed" call_timestamp_from: "2026-11-22T10:30:00Z"
    search: "crm-")pb"))),
              ElementsAre("crm-5"));
  EXPECT_THAT(Identifiers(store_->List(workspace_, ListRequest(R"pb(
    transcription_status: "completed" search: "crm-" call_timestamp_to: "2026-11-22T12:00:01Z")pb"))),
              ElementsAre("crm-5", "crm-3", "crm-1"));
}

}  // namespace
}  // namespace calleval::calls

namespace calleval::calls {
namespace {

class AnalysisQueueTest : public CallsStoreTest {
 protected:
  int64_t Balance() {
    accounts::AccountsStore accounts(db_.get());
    return accounts.GetWorkspace(workspace_)->credit_balance;
  }
  void Fund(int64_t credits) {
    accounts::AccountsStore accounts(db_.get());
    ASSERT_TRUE(accounts.AddCredits(workspace_, credits).ok());
  }
  static v1::StandardMetricResult Result(int64_t id, const std::string& status) {
    v1::StandardMetricResult r;
    r.set_metric_id(id);
    r.set_status(status);
    return r;
  }
};

TEST_P(AnalysisQueueTest, TextCallPlansTranscriptMetricsAndChargesOnce) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("q1", false)).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  // Agent 7 disables metric 12; a text call plans only the transcript-judged metrics.
  EXPECT_THAT((*job)->planned_metric_ids, ElementsAre(11));
  EXPECT_EQ(Balance(), 9);  // reserved
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(10), 3)->has_value());

  ASSERT_TRUE(
      store_
          ->RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt, {Result(11, "completed")})
          .ok());
  EXPECT_EQ(Balance(), 9);
  auto call = store_->Get(workspace_, "q1");
  EXPECT_EQ(call->analysis_status(), "completed");
  EXPECT_EQ(call->credits_used(), 1);
  EXPECT_EQ(call->standard_metrics(0).credits_used(), 1);
  // A second report with the same (now stale) token is refused and changes nothing.
  EXPECT_EQ(
      store_
          ->RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt, {Result(11, "completed")})
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Balance(), 9);
}

TEST_P(AnalysisQueueTest, ExpiredLeaseIsReleasedToAnotherWorkerAndTheOldTokenIsStale) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("q2", false)).ok());
  auto first = store_->LeaseAnalysis(absl::ZeroDuration(), 3);  // expires at once
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->call_id, (*first)->call_id);
  EXPECT_EQ((*second)->attempts, 2);
  EXPECT_EQ(Balance(), 9);  // reserved once, not per lease
  EXPECT_EQ(store_
                ->RecordAnalysis((*first)->call_id, (*first)->token, std::nullopt,
                                 {Result(11, "completed")})
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_
                  ->RecordAnalysis((*second)->call_id, (*second)->token, std::nullopt,
                                   {Result(11, "failed")})
                  .ok());
  EXPECT_EQ(Balance(), 10);  // the failed metric was refunded
  EXPECT_EQ(store_->Get(workspace_, "q2")->credits_used(), 0);
}

TEST_P(AnalysisQueueTest, AttemptsRunOutAndEverythingIsRefunded) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("q3", false)).ok());
  for (int i = 0; i < 2; ++i) {
    auto lease = store_->LeaseAnalysis(absl::ZeroDuration(), 2);
    ASSERT_TRUE(lease.ok() && lease->has_value());
  }
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 2)->has_value());
  auto call = store_->Get(workspace_, "q3");
  EXPECT_EQ(call->analysis_status(), "failed");
  EXPECT_EQ(call->failure_reason(), "analysis_failed");
  EXPECT_EQ(Balance(), 10);
}

TEST_P(AnalysisQueueTest, ShortBalanceSkipsWithoutCharging) {
  ASSERT_TRUE(store_->Ingest(workspace_, Request("q4", false)).ok());  // balance 0
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  auto call = store_->Get(workspace_, "q4");
  EXPECT_EQ(call->analysis_status(), "skipped");
  EXPECT_EQ(call->failure_reason(), "insufficient_credits");
  EXPECT_EQ(Balance(), 0);
}

TEST_P(AnalysisQueueTest, VoiceCallWaitsForItsRecordingAndFailsWithRefund) {
  Fund(20);
  auto call = store_->Ingest(workspace_, Request("q5", true));
  ASSERT_TRUE(call.ok());
  EXPECT_FALSE(call->has_duration_seconds());
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());  // not stored yet
  auto download = store_->ClaimRecordingJob(absl::Minutes(1));
  ASSERT_TRUE(store_->CompleteRecording(call->id(), "audio/wav", 10).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value());
  EXPECT_EQ((*job)->planned_metric_ids.size(), 11u);  // 12 standard metrics, 12 disabled
  EXPECT_EQ((*job)->recording_key, std::to_string(call->id()));
  EXPECT_EQ(Balance(), 9);
  ASSERT_TRUE(
      store_->FailAnalysis((*job)->call_id, (*job)->token, "unsupported_audio", "not audio").ok());
  EXPECT_EQ(Balance(), 20);
  EXPECT_EQ(store_->Get(workspace_, "q5")->failure_reason(), "unsupported_audio");
  // A call whose analysis failed is not transcribed.
  EXPECT_EQ(store_->Get(workspace_, "q5")->transcription_status(), "failed");
  EXPECT_FALSE(store_->LeaseTranscription(absl::Minutes(1), 3)->has_value());
}

// The settle commits with the refund owed; the process dies before accounts applies it. After the
// restart nothing is lost and nothing is given twice.
TEST_P(AnalysisQueueTest, RefundOwedWhenTheProcessDiesAfterTheSettleIsAppliedAfterTheRestart) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r1", false)).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ(Balance(), 9);
  credits_->refuse_refunds = true;  // the apply step after the settle never happens
  ASSERT_TRUE(
      store_->RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt, {Result(11, "failed")})
          .ok());
  EXPECT_EQ(store_->Get(workspace_, "r1")->credits_used(), 0);
  EXPECT_EQ(Balance(), 9);  // owed, not refunded yet
  EXPECT_EQ(store_->ApplyOwedRefunds().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Balance(), 9);

  credits_->refuse_refunds = false;
  OpenStore();  // the restart
  auto applied = store_->ApplyOwedRefunds();
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 1);
  EXPECT_EQ(Balance(), 10);
  // Applied once: the mark is gone, and applying the same refund again gives nothing.
  EXPECT_EQ(*store_->ApplyOwedRefunds(), 0);
  ASSERT_TRUE(real_credits_->Refund(workspace_, (*job)->call_id, {11}).ok());
  EXPECT_EQ(Balance(), 10);
}

// A crash after the refund was applied but before its mark was cleared applies it again, which
// gives nothing twice; a failed call is refunded in full the same way.
TEST_P(AnalysisQueueTest, FailedCallsRefundInFullAndAgainGivesNothing) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r2", false)).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  credits_->refuse_refunds = true;
  ASSERT_TRUE(store_->FailAnalysis((*job)->call_id, (*job)->token, "unsupported_audio", "x").ok());
  EXPECT_EQ(Balance(), 9);
  // Applied by accounts, then the process dies before clearing the mark.
  ASSERT_TRUE(real_credits_->Refund(workspace_, (*job)->call_id, {11}).ok());
  EXPECT_EQ(Balance(), 10);
  credits_->refuse_refunds = false;
  OpenStore();
  EXPECT_EQ(*store_->ApplyOwedRefunds(), 1);
  EXPECT_EQ(Balance(), 10);
}

// The reservation was made but its answer lost (or the process died right after it): the call is
// claimed again and its reservation, made again, charges nothing twice.
TEST_P(AnalysisQueueTest, AReservationMadeTwiceChargesOnce) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r3", false)).ok());
  credits_->lose_reservation_answers = true;
  EXPECT_EQ(store_->LeaseAnalysis(absl::Minutes(10), 3).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Balance(), 9);
  // Given back untried: still pending, not transcribed, leased at once by the next ask.
  EXPECT_EQ(store_->Get(workspace_, "r3")->analysis_status(), "pending");
  credits_->lose_reservation_answers = false;
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ((*job)->attempts, 1);
  EXPECT_EQ(Balance(), 9);
  EXPECT_EQ(store_->Get(workspace_, "r3")->analysis_status(), "processing");
}

// A process that claimed a call and died before reserving leaves a pending call under a claim:
// the restart gives it back, and it is reserved once.
TEST_P(AnalysisQueueTest, AClaimOfAProcessThatDiedBeforeItsReservationIsGivenBack) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r4", false)).ok());
  // The claim stays (the reservation never ran): as if the process died between the two.
  credits_->refuse_reservations = true;
  ASSERT_TRUE(db_->Write([](db::Connection& c) {
                   return c.Exec(
                       "UPDATE calls SET analysis_token = 'dead:0', "
                       "analysis_lease_until = 4102444800, analysis_attempts = 1");
                 })
                  .ok());
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(10), 3)->has_value());  // claimed
  EXPECT_EQ(credits_->reservations, 0);
  EXPECT_EQ(*store_->ReleaseLeasesOf("dead"), 1);
  credits_->refuse_reservations = false;
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ((*job)->attempts, 2);
  EXPECT_EQ(Balance(), 9);
}

// The plan and its costs come from the call_metrics rows, not the old text columns.
TEST_P(AnalysisQueueTest, ThePlanIsReadFromItsRows) {
  Fund(10);
  auto request = Request("p1", false);
  ASSERT_TRUE(store_->Ingest(workspace_, request).ok());
  ASSERT_TRUE(db_->Write([](db::Connection& c) {
                   RETURN_IF_ERROR(
                       c.Exec("UPDATE calls SET planned_metric_ids = '1,2,3', "
                              "planned_metric_costs = '5,5,5'"));
                   return c.Exec("UPDATE call_metrics SET credit_cost = 4");
                 })
                  .ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_THAT((*job)->planned_metric_ids, ElementsAre(11));
  EXPECT_EQ(Balance(), 6);
  ASSERT_TRUE(
      store_
          ->RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt, {Result(11, "completed")})
          .ok());
  EXPECT_EQ(store_->Get(workspace_, "p1")->credits_used(), 4);
}

// A deleted call's owed refunds are applied before it goes; while they cannot be, it stays.
TEST_P(AnalysisQueueTest, DeletingACallAppliesItsOwedRefundsFirst) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("d1", false)).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(10), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  credits_->refuse_refunds = true;
  ASSERT_TRUE(store_->FailAnalysis((*job)->call_id, (*job)->token, "unsupported_audio", "x").ok());
  EXPECT_EQ(store_->Delete(workspace_, "d1").code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(store_->Get(workspace_, "d1").ok());
  credits_->refuse_refunds = false;
  ASSERT_TRUE(store_->Delete(workspace_, "d1").ok());
  EXPECT_EQ(Balance(), 10);
}

class TranscriptionQueueTest : public AnalysisQueueTest {
 protected:
  // A voice call whose recording is stored, without a transcript.
  int64_t StoredVoiceCall(const std::string& identifier) {
    auto call = store_->Ingest(workspace_, Request(identifier, true));
    EXPECT_TRUE(call.ok()) << call.status();
    EXPECT_EQ(call->transcription_status(), "pending");
    auto download = store_->ClaimRecordingJob(absl::Minutes(1));
    EXPECT_TRUE(store_->CompleteRecording(call->id(), "audio/wav", 10).ok());
    return call->id();
  }
  static std::vector<v1::Turn> Turns() {
    v1::Turn agent, user;
    agent.set_role("AI Assistant");
    agent.set_content("thank you for calling");
    agent.set_start_time(0.4);
    agent.set_end_time(1.3);
    user.set_role("User");
    user.set_content("i need help");
    user.set_start_time(2.7);
    user.set_end_time(3.4);
    return {agent, user};
  }
};

TEST_P(TranscriptionQueueTest, AudioStageThenTranscriptThenTranscriptStage) {
  Fund(20);
  const int64_t id = StoredVoiceCall("t1");
  // Transcription starts once the analysis has (credits reserved).
  EXPECT_FALSE(store_->LeaseTranscription(absl::Minutes(1), 3)->has_value());
  auto audio = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(audio.ok() && audio->has_value());
  EXPECT_EQ((*audio)->transcription_status, "pending");
  EXPECT_FALSE((*audio)->audio_stage_done);
  auto transcription = store_->LeaseTranscription(absl::Minutes(1), 3);
  ASSERT_TRUE(transcription.ok() && transcription->has_value());
  EXPECT_EQ((*transcription)->call_id, id);
  EXPECT_FALSE((*transcription)->has_provided_transcript);
  EXPECT_EQ((*transcription)->recording_key, std::to_string(id));
  EXPECT_EQ(store_->Get(workspace_, "t1")->transcription_status(), "processing");

  // The audio stage: computed, the transcript-judged metric still pending.
  ASSERT_TRUE(store_
                  ->RecordAudioStage(id, (*audio)->token, 42.2, {Result(1, "completed")},
                                     {Result(1, "completed"), Result(2, "completed")})
                  .ok());
  v1::Call computed = *store_->Get(workspace_, "t1");
  EXPECT_EQ(computed.analysis_status(), "computed");
  EXPECT_EQ(computed.duration_seconds(), 42);
  ASSERT_EQ(computed.standard_metrics_size(), 11);
  EXPECT_EQ(computed.standard_metrics(0).status(), "completed");
  EXPECT_EQ(computed.standard_metrics(0).credits_used(), 1);
  EXPECT_EQ(computed.standard_metrics(10).metric_id(), 11);
  EXPECT_EQ(computed.standard_metrics(10).status(), "pending");
  EXPECT_EQ(computed.credits_used(), 1);
  // The stage's token is spent; the call waits for its transcription.
  EXPECT_EQ(store_->RecordAnalysis(id, (*audio)->token, std::nullopt, {}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());

  ASSERT_TRUE(store_->RecordTranscription(id, (*transcription)->token, Turns()).ok());
  v1::Call transcribed = *store_->Get(workspace_, "t1");
  EXPECT_EQ(transcribed.transcription_status(), "completed");
  EXPECT_EQ(transcribed.transcript_source(), "generated");
  ASSERT_EQ(transcribed.transcript_size(), 2);
  EXPECT_EQ(transcribed.transcript(1).content(), "i need help");
  EXPECT_EQ(store_->RecordTranscription(id, (*transcription)->token, Turns()).code(),
            absl::StatusCode::kFailedPrecondition);

  // The transcript stage: the audio results and the generated transcript come with it.
  auto rest = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(rest.ok() && rest->has_value());
  EXPECT_TRUE((*rest)->audio_stage_done);
  EXPECT_EQ((*rest)->attempts, 1);  // counted per stage
  EXPECT_EQ((*rest)->audio_results.size(), 2u);
  EXPECT_EQ((*rest)->transcription_status, "completed");
  EXPECT_EQ((*rest)->generated_transcript.size(), 2u);
  EXPECT_EQ((*rest)->transcript.size(), 2u);
  EXPECT_EQ(store_->Get(workspace_, "t1")->analysis_status(), "computed");  // only forward
  std::vector<v1::StandardMetricResult> results = {Result(1, "completed")};
  for (int64_t m = 2; m <= 11; ++m) results.push_back(Result(m, "completed"));
  ASSERT_TRUE(store_->RecordAnalysis(id, (*rest)->token, std::nullopt, results).ok());
  v1::Call done = *store_->Get(workspace_, "t1");
  EXPECT_EQ(done.analysis_status(), "completed");
  EXPECT_EQ(done.duration_seconds(), 42);
  EXPECT_EQ(done.credits_used(), 11);
  EXPECT_EQ(Balance(), 9);
}

TEST_P(TranscriptionQueueTest, ProvidedTranscriptStaysAndTheGeneratedOneIsKeptAside) {
  Fund(20);
  auto request = Request("t2", true);
  v1::Turn provided;
  provided.set_role("User");
  provided.set_content("what i said");
  *request.add_transcript() = provided;
  auto call = store_->Ingest(workspace_, request);
  ASSERT_TRUE(call.ok());
  // transcription_accuracy (7) is planned: the recording is transcribed to compare.
  EXPECT_EQ(call->transcription_status(), "pending");
  auto download = store_->ClaimRecordingJob(absl::Minutes(1));
  ASSERT_TRUE(store_->CompleteRecording(call->id(), "audio/wav", 10).ok());
  ASSERT_TRUE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  auto transcription = store_->LeaseTranscription(absl::Minutes(1), 3);
  ASSERT_TRUE(transcription.ok() && transcription->has_value());
  EXPECT_TRUE((*transcription)->has_provided_transcript);
  ASSERT_TRUE(store_->RecordTranscription(call->id(), (*transcription)->token, Turns()).ok());
  v1::Call read = *store_->Get(workspace_, "t2");
  EXPECT_EQ(read.transcript_source(), "provided");
  ASSERT_EQ(read.transcript_size(), 1);
  EXPECT_EQ(read.transcript(0).content(), "what i said");

  // Without transcription_accuracy planned there is nothing to transcribe.
  request.set_call_identifier("t3");
  request.add_metric_ids(1);
  auto untranscribed = store_->Ingest(workspace_, request);
  ASSERT_TRUE(untranscribed.ok());
  EXPECT_EQ(untranscribed->transcription_status(), "completed");
}

TEST_P(TranscriptionQueueTest, ExpiredLeaseIsTakenOverAndAttemptsRunOut) {
  Fund(20);
  const int64_t id = StoredVoiceCall("t4");
  ASSERT_TRUE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  auto first = store_->LeaseTranscription(absl::ZeroDuration(), 2);  // expires at once
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = store_->LeaseTranscription(absl::ZeroDuration(), 2);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->attempts, 2);
  EXPECT_EQ(store_->RecordTranscription(id, (*first)->token, Turns()).code(),
            absl::StatusCode::kFailedPrecondition);
  // Released untried: the attempt does not count, and it is handed out again.
  ASSERT_TRUE(store_->ReleaseTranscription(id, (*second)->token).ok());
  auto third = store_->LeaseTranscription(absl::ZeroDuration(), 2);
  ASSERT_TRUE(third.ok() && third->has_value());
  EXPECT_EQ((*third)->attempts, 2);
  // Two attempts without a report: failed, with the reason kept for the metrics.
  EXPECT_FALSE(store_->LeaseTranscription(absl::Minutes(1), 2)->has_value());
  EXPECT_EQ(store_->Get(workspace_, "t4")->transcription_status(), "failed");
}

TEST_P(TranscriptionQueueTest, FailedTranscriptionReleasesTheComputedCall) {
  Fund(20);
  const int64_t id = StoredVoiceCall("t5");
  auto audio = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(audio.ok() && audio->has_value());
  ASSERT_TRUE(
      store_->RecordAudioStage(id, (*audio)->token, 3.0, {}, {Result(5, "completed")}).ok());
  auto transcription = store_->LeaseTranscription(absl::Minutes(1), 3);
  ASSERT_TRUE(transcription.ok() && transcription->has_value());
  ASSERT_TRUE(store_->FailTranscription(id, (*transcription)->token, "provider said no").ok());
  auto rest = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(rest.ok() && rest->has_value());
  EXPECT_EQ((*rest)->transcription_status, "failed");
  EXPECT_EQ((*rest)->transcription_error, "provider said no");
  EXPECT_TRUE((*rest)->transcript.empty());
}

TEST_P(TranscriptionQueueTest, SkippedCallIsNeverTranscribed) {
  StoredVoiceCall("t6");  // balance 0
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  EXPECT_EQ(store_->Get(workspace_, "t6")->analysis_status(), "skipped");
  EXPECT_EQ(store_->Get(workspace_, "t6")->transcription_status(), "failed");
  EXPECT_FALSE(store_->LeaseTranscription(absl::Minutes(1), 3)->has_value());
}

}  // namespace
}  // namespace calleval::calls

namespace calleval::calls {
namespace {

// Leases kept alive by a heartbeat (RenewAnalysisLease / RenewTranscriptionLease) and given
// back by a restarted holder (ReleaseLeasesOf).
class LeaseRenewalTest : public TranscriptionQueueTest {};

TEST_P(LeaseRenewalTest, RenewingWithTheTokenExtendsTheAnalysisLease) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r1", false)).ok());
  auto job = store_->LeaseAnalysis(absl::ZeroDuration(), 3, "host-a/scoring");  // expired
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ((*job)->token.rfind("host-a/scoring:", 0), 0u) << (*job)->token;
  // Renewed before anyone else took it: the lease runs again and nobody else gets the call.
  ASSERT_TRUE(store_->RenewAnalysisLease((*job)->call_id, (*job)->token, absl::Minutes(1)).ok());
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  ASSERT_TRUE(store_
                  ->RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt,
                                   {Result(11, "completed")})
                  .ok());
  // Reported: nothing left to renew.
  EXPECT_EQ(store_->RenewAnalysisLease((*job)->call_id, (*job)->token, absl::Minutes(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(LeaseRenewalTest, RenewingAStaleTokenIsRefusedAndChangesNothing) {
  Fund(10);
  ASSERT_TRUE(store_->Ingest(workspace_, Request("r2", false)).ok());
  auto first = store_->LeaseAnalysis(absl::ZeroDuration(), 3, "host-a/scoring");
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = store_->LeaseAnalysis(absl::ZeroDuration(), 3, "host-b/scoring");  // took over
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->call_id, (*first)->call_id);
  EXPECT_EQ(store_->RenewAnalysisLease((*first)->call_id, (*first)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->RenewAnalysisLease((*first)->call_id, "", absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  // The refused renewal did not extend the current (expired) lease: a third worker takes it.
  auto third = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(third.ok() && third->has_value());
  EXPECT_EQ((*third)->call_id, (*first)->call_id);
}

TEST_P(LeaseRenewalTest, TranscriptionLeaseRenewsWithItsTokenOnly) {
  Fund(20);
  const int64_t id = StoredVoiceCall("r3");
  ASSERT_TRUE(store_->LeaseAnalysis(absl::Minutes(1), 3)->has_value());
  auto first = store_->LeaseTranscription(absl::ZeroDuration(), 3, "host-a/scoring");
  ASSERT_TRUE(first.ok() && first->has_value());
  ASSERT_TRUE(store_->RenewTranscriptionLease(id, (*first)->token, absl::Minutes(1)).ok());
  EXPECT_FALSE(store_->LeaseTranscription(absl::Minutes(1), 3)->has_value());  // held
  EXPECT_EQ(store_->RenewTranscriptionLease(id, "someone-else:00", absl::Minutes(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->RenewTranscriptionLease(id, (*first)->token, absl::ZeroDuration()).ok());
  auto second = store_->LeaseTranscription(absl::Minutes(1), 3);  // lapsed: taken over
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ(store_->RenewTranscriptionLease(id, (*first)->token, absl::Minutes(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  // The analysis lease's token does not renew the transcription lease, nor the reverse.
  EXPECT_EQ(store_->RenewAnalysisLease(id, (*second)->token, absl::Minutes(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(LeaseRenewalTest, RecordingDownloadLeasesRenewAndARestartGivesThemBack) {
  auto a = store_->Ingest(workspace_, Request("d1", true));
  auto b = store_->Ingest(workspace_, Request("d2", true));
  ASSERT_TRUE(a.ok() && b.ok());
  auto mine = store_->ClaimRecordingJob(absl::ZeroDuration(), "a");  // expired at once
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->call_id, a->id());
  EXPECT_EQ((*mine)->token.rfind("a:", 0), 0u) << (*mine)->token;
  // Renewed before anyone claimed it: held again.
  ASSERT_TRUE(store_->RenewRecordingLease(a->id(), (*mine)->token, absl::Hours(1)).ok());
  auto other = store_->ClaimRecordingJob(absl::Hours(1), "b");
  ASSERT_TRUE(other.ok() && other->has_value());
  EXPECT_EQ((*other)->call_id, b->id());
  EXPECT_FALSE(store_->ClaimRecordingJob(absl::Hours(1))->has_value());
  EXPECT_EQ(store_->RenewRecordingLease(a->id(), (*other)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);

  // "a" restarts: its download is handed out again at once, its token stale; b's stands.
  EXPECT_EQ(*store_->ReleaseLeasesOf("a"), 1);
  EXPECT_EQ(store_->RenewRecordingLease(a->id(), (*mine)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  auto again = store_->ClaimRecordingJob(absl::Hours(1), "a");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->call_id, a->id());
  EXPECT_EQ((*again)->attempts, 2);
  EXPECT_TRUE(store_->RenewRecordingLease(b->id(), (*other)->token, absl::Hours(1)).ok());
  // Stored: nothing left to renew.
  ASSERT_TRUE(store_->CompleteRecording(a->id(), "audio/wav", 10).ok());
  EXPECT_EQ(store_->RenewRecordingLease(a->id(), (*again)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_->ReleaseLeasesOf("a"), 0);
}

TEST_P(LeaseRenewalTest, RestartReleasesExactlyTheHoldersLeases) {
  Fund(100);
  // Four calls: two leased by holder "a" (one analysis, one transcription), one by "ab" (a
  // holder whose id extends "a"), one by "b"; all leased for an hour.
  ASSERT_TRUE(store_->Ingest(workspace_, Request("h1", false)).ok());
  ASSERT_TRUE(store_->Ingest(workspace_, Request("h2", false)).ok());
  ASSERT_TRUE(store_->Ingest(workspace_, Request("h3", false)).ok());
  auto a1 = store_->LeaseAnalysis(absl::Hours(1), 3, "a");
  auto ab = store_->LeaseAnalysis(absl::Hours(1), 3, "ab");
  auto b = store_->LeaseAnalysis(absl::Hours(1), 3, "b");
  ASSERT_TRUE(a1.ok() && a1->has_value() && ab.ok() && ab->has_value() && b.ok() &&
              b->has_value());
  const int64_t voice = StoredVoiceCall("h4");
  auto voice_analysis = store_->LeaseAnalysis(absl::Hours(1), 3, "b");
  ASSERT_TRUE(voice_analysis.ok() && voice_analysis->has_value());
  auto a2 = store_->LeaseTranscription(absl::Hours(1), 3, "a");
  ASSERT_TRUE(a2.ok() && a2->has_value());
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Hours(1), 3)->has_value());  // all held

  EXPECT_EQ(store_->ReleaseLeasesOf("a:").status().code(), absl::StatusCode::kInvalidArgument);
  auto released = store_->ReleaseLeasesOf("a");
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(*released, 2);
  // The dead process's tokens are stale: its late reports are refused.
  EXPECT_EQ(store_
                ->RecordAnalysis((*a1)->call_id, (*a1)->token, std::nullopt,
                                 {Result(11, "completed")})
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->RenewTranscriptionLease(voice, (*a2)->token, absl::Hours(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  // Handed out again at once, the attempt counted; the others' leases stand.
  auto again = store_->LeaseAnalysis(absl::Hours(1), 3, "a");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->call_id, (*a1)->call_id);
  EXPECT_EQ((*again)->attempts, 2);
  EXPECT_FALSE(store_->LeaseAnalysis(absl::Hours(1), 3)->has_value());
  auto transcription = store_->LeaseTranscription(absl::Hours(1), 3, "a");
  ASSERT_TRUE(transcription.ok() && transcription->has_value());
  EXPECT_EQ((*transcription)->call_id, voice);
  EXPECT_TRUE(store_->RenewAnalysisLease((*ab)->call_id, (*ab)->token, absl::Hours(1)).ok());
  EXPECT_TRUE(store_->RenewAnalysisLease((*b)->call_id, (*b)->token, absl::Hours(1)).ok());
  // Releasing again gives back only what the holder took since.
  EXPECT_EQ(*store_->ReleaseLeasesOf("a"), 2);
  EXPECT_EQ(*store_->ReleaseLeasesOf("nobody"), 0);
}

// A database made at schema version 10 (call_metrics rows without plan_order) upgrades in place:
// migration 11 takes each row's place from planned_metric_ids, so a call planned then is leased
// with its plan in order, charged its costs, and refunded what it did not use.
class PlanOrderUpgradeTest : public ::testing::TestWithParam<db::Backend> {};

TEST_P(PlanOrderUpgradeTest, RowsOfAVersion10CallTakeTheirPlacesInThePlan) {
  const std::vector<db::Migration>& all = SchemaMigrations();
  std::vector<db::Migration> v10;
  for (const db::Migration& m : all) {
    if (m.version <= 10) v10.push_back(m);
  }
  auto database = testing::TestDatabase::Create(GetParam(), v10);
  ASSERT_TRUE(database.ok()) << database.status();
  int64_t workspace = 0;
  {
    std::unique_ptr<db::Database> old = (*database)->Release();
    accounts::AccountsStore accounts(old.get());
    workspace = accounts.CreateWorkspace("w", 10)->id;
    // A text call as the previous release stored it: plan 11 then 2, costing 1 and 3.
    const absl::Status stored = old->Write([&](db::Connection& c) -> absl::Status {
      ASSIGN_OR_RETURN(auto call,
                       c.Prepare("INSERT INTO calls (workspace_id, agent_id, call_identifier, "
                                 "observation_type, call_direction, analysis_status, "
                                 "transcription_status, call_timestamp, created_at, updated_at, "
                                 "planned_metric_ids, planned_metric_costs, call_time, "
                                 "query_rows) VALUES (?, 7, 'v10', 'text', 'inbound', "
                                 "'pending', 'completed', '2026-01-01T00:00:00Z', "
                                 "'2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', '11,2', "
                                 "'1,3', 1767225600, 1)"));
      call.Bind(1, workspace);
      RETURN_IF_ERROR(call.Run());
      return c.Exec(
          "INSERT INTO call_metrics (call_id, metric_id, credit_cost, status) SELECT id, 2, 3, "
          "'pending' FROM calls UNION ALL SELECT id, 11, 1, 'pending' FROM calls");
    });
    ASSERT_TRUE(stored.ok()) << stored;
  }
  auto upgraded = db::Database::Open((*database)->url(), all);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  std::string dir = ::testing::TempDir() + "/plan_XXXXXX";
  dir = mkdtemp(dir.data());
  CallsStore::Options options;
  CallsStore store(
      upgraded->get(), [](int64_t, int64_t) -> absl::StatusOr<AgentInfo> { return AgentInfo{}; },
      options);
  auto job = store.LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_THAT((*job)->planned_metric_ids, ElementsAre(11, 2));
  accounts::AccountsStore accounts(upgraded->get());
  EXPECT_EQ(accounts.GetWorkspace(workspace)->credit_balance, 6);
  v1::StandardMetricResult done;
  done.set_metric_id(11);
  done.set_status("completed");
  v1::StandardMetricResult failed;
  failed.set_metric_id(2);
  failed.set_status("failed");
  ASSERT_TRUE(
      store.RecordAnalysis((*job)->call_id, (*job)->token, std::nullopt, {failed, done}).ok());
  auto call = store.Get(workspace, "v10");
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_EQ(call->standard_metrics_size(), 2);
  EXPECT_EQ(call->standard_metrics(0).metric_id(), 11);  // plan order, not id order
  EXPECT_EQ(call->credits_used(), 1);
  EXPECT_EQ(accounts.GetWorkspace(workspace)->credit_balance, 9);  // metric 2 refunded
  upgraded->reset();
  std::filesystem::remove_all(dir);
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(AnalysisQueueTest);
CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(PlanOrderUpgradeTest);
CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(CallsStoreTest);
CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(LeaseRenewalTest);
CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(TranscriptionQueueTest);

}  // namespace
}  // namespace calleval::calls
