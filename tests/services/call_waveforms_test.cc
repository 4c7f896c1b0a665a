// The calls store keeps a recording's peaks (services/calls/call_waveforms.h): written with the
// analysis report that decoded the recording, read back whole, refused with a reason that says
// which when there are none, and deleted with the call. On both backends.
#include "services/calls/call_waveforms.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/errors.h"
#include "common/schema.h"
#include "services/accounts/accounts_store.h"
#include "services/calls/calls_store.h"
#include "tests/support/test_database.h"

namespace calleval::calls {
namespace {

class CallWaveformsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/waveforms_XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    auto database = testing::TestDatabase::Create(GetParam(), SchemaMigrations());
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts_ = std::make_unique<accounts::AccountsStore>(db_.get());
    workspace_ = accounts_->CreateWorkspace("w", 0)->id;
    other_workspace_ = accounts_->CreateWorkspace("o", 0)->id;
    ASSERT_TRUE(accounts_->AddCredits(workspace_, 100).ok());
    recordings_ = *OpenBlobStore(dir_);
    CallsStore::Options options;
    options.recordings = recordings_.get();
    store_ = std::make_unique<CallsStore>(
        db_.get(),
        [](int64_t, int64_t agent) -> absl::StatusOr<AgentInfo> {
          if (agent == 7) return AgentInfo{};
          return ValidationError("agent_not_found", "no agent");
        },
        options);
  }
  void TearDown() override {
    store_.reset();
    accounts_.reset();
    db_.reset();
    database_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A voice call whose recording is stored: ready to be leased.
  int64_t VoiceCall(const std::string& identifier) {
    v1::IngestCallRequest r;
    r.set_call_identifier(identifier);
    r.set_agent_id(7);
    r.set_recording_url("https://recordings.example.com/" + identifier + ".wav");
    auto call = store_->Ingest(workspace_, r);
    EXPECT_TRUE(call.ok()) << call.status();
    EXPECT_TRUE(store_->ClaimRecordingJob(absl::Minutes(1)).ok());
    EXPECT_TRUE(store_->CompleteRecording(call->id(), "audio/wav", 10).ok());
    return call->id();
  }

  static v1::CallWaveform Stereo(int buckets) {
    v1::CallWaveform w;
    w.set_channels(2);
    w.set_buckets(buckets);
    w.set_duration_seconds(buckets / 50.0);
    std::string peaks;
    for (int i = 0; i < 2 * buckets * 2; ++i) peaks.push_back(static_cast<char>(i % 256 - 128));
    w.set_peaks(peaks);
    return w;
  }

  static std::string CodeOf(const absl::Status& status) { return ErrorInfoOf(status).code(); }

  std::string dir_;
  std::unique_ptr<BlobStore> recordings_;
  std::unique_ptr<testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<accounts::AccountsStore> accounts_;
  std::unique_ptr<CallsStore> store_;
  int64_t workspace_ = 0, other_workspace_ = 0;
};

TEST_P(CallWaveformsStoreTest, StoredWithTheAnalysisReadBackAndDeletedWithTheCall) {
  const int64_t id = VoiceCall("w1");
  // Before the analysis: not computed yet, and the message says so.
  absl::StatusOr<v1::CallWaveform> early = store_->GetWaveform(workspace_, "w1");
  EXPECT_EQ(early.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CodeOf(early.status()), "no_waveform");
  EXPECT_THAT(early.status().message(), ::testing::HasSubstr("not computed yet"));

  auto job = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  ASSERT_EQ((*job)->call_id, id);
  EXPECT_THAT(store_->GetWaveform(workspace_, "w1").status().message(),
              ::testing::HasSubstr("its analysis is processing"));
  // 30,000 buckets of two channels: the largest the scoring workers produce (120 KB).
  const v1::CallWaveform stored = Stereo(30000);
  ASSERT_TRUE(
      store_->RecordAnalysis(id, (*job)->token, 600.0, {}, {}, &stored).ok());

  for (const std::string& key : {std::string("w1"), std::to_string(id)}) {
    absl::StatusOr<v1::CallWaveform> read = store_->GetWaveform(workspace_, key);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->channels(), 2);
    EXPECT_EQ(read->buckets(), 30000);
    EXPECT_DOUBLE_EQ(read->duration_seconds(), 600.0);
    EXPECT_EQ(read->peaks(), stored.peaks());  // every byte, negative ones included
  }
  // Another workspace's call is not found, as GetCall.
  EXPECT_EQ(CodeOf(store_->GetWaveform(other_workspace_, "w1").status()), "not_found");

  ASSERT_TRUE(store_->Delete(workspace_, "w1").ok());
  EXPECT_EQ(CodeOf(store_->GetWaveform(workspace_, "w1").status()), "not_found");
  auto rows = db::ReadResult<int64_t>(*db_, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
    auto count = c.Prepare("SELECT COUNT(*) FROM call_waveforms WHERE call_id = ?");
    if (!count.ok()) return count.status();
    count->Bind(1, id);
    auto row = count->Step();
    if (!row.ok()) return row.status();
    return count->Int64(0);
  });
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 0);
}

TEST_P(CallWaveformsStoreTest, TheAudioStageStoresThePeaks) {
  // A call whose transcription is still running reports its audio stage first (computed),
  // with the peaks; the transcript stage does not decode again and sends none.
  v1::IngestCallRequest r;
  r.set_call_identifier("w2");
  r.set_agent_id(7);
  r.set_recording_url("https://recordings.example.com/w2.wav");
  auto call = store_->Ingest(workspace_, r);
  ASSERT_TRUE(call.ok()) << call.status();
  ASSERT_TRUE(store_->ClaimRecordingJob(absl::Minutes(1)).ok());
  ASSERT_TRUE(store_->CompleteRecording(call->id(), "audio/wav", 10).ok());
  auto job = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  v1::CallWaveform mono;
  mono.set_channels(1);
  mono.set_buckets(3);
  mono.set_duration_seconds(0.05);
  mono.set_peaks(std::string("\x80\x7f\x00\x00\xf0\x10", 6));
  ASSERT_TRUE(store_->RecordAudioStage(call->id(), (*job)->token, 0.05, {}, {}, &mono).ok());
  EXPECT_EQ(store_->Get(workspace_, "w2")->analysis_status(), "computed");
  absl::StatusOr<v1::CallWaveform> read = store_->GetWaveform(workspace_, "w2");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->channels(), 1);
  EXPECT_EQ(read->buckets(), 3);
  EXPECT_EQ(read->peaks(), mono.peaks());
}

TEST_P(CallWaveformsStoreTest, SaysWhichWhenThereIsNoWaveform) {
  // A voice call whose analysis ended without peaks (a report that did not decode it).
  const int64_t id = VoiceCall("v1");
  auto job = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  ASSERT_EQ((*job)->call_id, id);
  ASSERT_TRUE(store_->FailAnalysis(id, (*job)->token, "unsupported_audio", "not audio").ok());
  absl::Status none = store_->GetWaveform(workspace_, "v1").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CodeOf(none), "no_waveform");
  EXPECT_THAT(none.message(), ::testing::HasSubstr("its analysis is failed"));

  // A text call has no recording.
  v1::IngestCallRequest text;
  text.set_call_identifier("t1");
  text.set_agent_id(7);
  auto* turn = text.add_transcript();
  turn->set_role("User");
  turn->set_content("hi");
  turn->set_start_time(0);
  turn->set_end_time(1);
  ASSERT_TRUE(store_->Ingest(workspace_, text).ok());
  none = store_->GetWaveform(workspace_, "t1").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CodeOf(none), "no_recording");
  EXPECT_THAT(none.message(), ::testing::HasSubstr("has no recording"));

  EXPECT_EQ(CodeOf(store_->GetWaveform(workspace_, "nope").status()), "not_found");
}

TEST_P(CallWaveformsStoreTest, AMalformedWaveformIsNotStoredAndTheResultsAre) {
  const int64_t id = VoiceCall("m1");
  auto job = store_->LeaseAnalysis(absl::Minutes(1), 3);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  v1::CallWaveform short_peaks = Stereo(10);
  short_peaks.mutable_peaks()->pop_back();
  EXPECT_FALSE(WellFormedWaveform(short_peaks));
  ASSERT_TRUE(store_->RecordAnalysis(id, (*job)->token, 1.0, {}, {}, &short_peaks).ok());
  EXPECT_EQ(store_->Get(workspace_, "m1")->analysis_status(), "completed");
  EXPECT_EQ(CodeOf(store_->GetWaveform(workspace_, "m1").status()), "no_waveform");
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(CallWaveformsStoreTest);

}  // namespace
}  // namespace calleval::calls
