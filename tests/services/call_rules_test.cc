#include "services/calls/call_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/errors.h"
#include "google/protobuf/text_format.h"

namespace calleval::calls {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

v1::IngestCallRequest Request(const std::string& text) {
  v1::IngestCallRequest request;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &request)) << text;
  return request;
}

google::protobuf::Struct StructOf(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &s)) << text;
  return s;
}

std::vector<std::string> Fields(const absl::Status& status) {
  std::vector<std::string> out;
  const v1::ErrorInfo info = ErrorInfoOf(status);
  for (const auto& d : info.details()) out.push_back(d.field());
  return out;
}

constexpr char kValid[] = R"pb(
  call_identifier: "crm-1"
  agent_id: 7
  transcript { role: "AI Assistant" content: "Hello" start_time: 0.5 end_time: 1.5 }
  transcript { role: "User" content: "Hi" start_time: 2 end_time: 2.4 }
)pb";

TEST(ValidateIngestTest, AcceptsTranscriptCall) {
  EXPECT_TRUE(ValidateIngest(Request(kValid)).ok());
}

TEST(ValidateIngestTest, AcceptsRecordingOnly) {
  EXPECT_TRUE(ValidateIngest(Request(R"pb(call_identifier: "a"
                                          agent_id: 1
                                          recording_url: "https://x/r.wav")pb"))
                  .ok());
}

TEST(ValidateIngestTest, RejectsUnknownRoleWith422AndPath) {
  auto request = Request(kValid);
  request.mutable_transcript(1)->set_role("Customer");
  absl::Status status = ValidateIngest(request);
  EXPECT_EQ(HttpStatusFor(status), 422);
  EXPECT_EQ(ErrorInfoOf(status).code(), "invalid_role");
  EXPECT_THAT(Fields(status), ElementsAre("transcript[1].role"));
}

TEST(ValidateIngestTest, AllFourRolesAccepted) {
  auto request = Request(kValid);
  for (const char* role : {"AI Assistant", "User", "Function Call", "Function Call Result"}) {
    request.mutable_transcript(0)->set_role(role);
    EXPECT_TRUE(ValidateIngest(request).ok()) << role;
  }
}

TEST(ValidateIngestTest, NeitherRecordingNorTranscript) {
  absl::Status status = ValidateIngest(Request(R"pb(call_identifier: "a" agent_id: 1)pb"));
  EXPECT_EQ(HttpStatusFor(status), 422);
  EXPECT_EQ(ErrorInfoOf(status).code(), "recording_or_transcript_required");
}

TEST(ValidateIngestTest, RequiredKeysReportedTogether) {
  auto request = Request(kValid);
  request.clear_call_identifier();
  request.clear_agent_id();
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("call_identifier", "agent_id"));
}

TEST(ValidateIngestTest, IdentifierLength) {
  auto request = Request(kValid);
  request.set_call_identifier(std::string(255, 'x'));
  EXPECT_TRUE(ValidateIngest(request).ok());
  request.set_call_identifier(std::string(256, 'x'));
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("call_identifier"));
  request.set_call_identifier("");
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("call_identifier"));
}

TEST(ValidateIngestTest, EndBeforeStart) {
  auto request = Request(kValid);
  request.mutable_transcript(0)->set_end_time(0.1);
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("transcript[0].end_time"));
}

TEST(ValidateIngestTest, EqualStartAndEndAllowedForFunctionCalls) {
  auto request = Request(kValid);
  auto* turn = request.add_transcript();
  turn->set_role("Function Call");
  turn->set_content("");
  turn->set_start_time(3);
  turn->set_end_time(3);
  EXPECT_TRUE(ValidateIngest(request).ok());
}

TEST(ValidateIngestTest, TooManyTurns) {
  auto request = Request(kValid);
  request.clear_transcript();
  for (int i = 0; i < 10000; ++i) request.add_transcript()->set_role("User");
  EXPECT_TRUE(ValidateIngest(request).ok());
  request.add_transcript()->set_role("User");
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("transcript"));
}

TEST(ValidateIngestTest, Enums) {
  auto request = Request(kValid);
  request.set_call_direction("sideways");
  request.set_observation_type("video");
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("observation_type", "call_direction"));
}

TEST(ValidateIngestTest, TextObservationWithRecordingRejected) {
  auto request = Request(kValid);
  request.set_observation_type("text");
  request.set_recording_url("https://example.com/r.wav");
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("observation_type"));
}

TEST(ValidateIngestTest, Timestamp) {
  auto request = Request(kValid);
  request.set_call_timestamp("2026-11-22T10:15:00Z");
  EXPECT_TRUE(ValidateIngest(request).ok());
  request.set_call_timestamp("2026-11-22T10:15:00+02:00");
  EXPECT_TRUE(ValidateIngest(request).ok());
  request.set_call_timestamp("yesterday");
  EXPECT_THAT(Fields(ValidateIngest(request)), ElementsAre("call_timestamp"));
}

TEST(ObservationTypeTest, TextWithoutRecording) {
  EXPECT_EQ(ObservationTypeOf(Request(kValid)), "text");
  auto request = Request(kValid);
  request.set_recording_url("https://example.com/r.wav");
  EXPECT_EQ(ObservationTypeOf(request), "voice");
}

TEST(DurationTest, LastEndTimeRounded) {
  EXPECT_EQ(DurationFromTranscript(Request(kValid)), 2);
  auto request = Request(kValid);
  request.mutable_transcript(1)->set_end_time(62.6);
  EXPECT_EQ(DurationFromTranscript(request), 63);
  request.clear_transcript();
  EXPECT_EQ(DurationFromTranscript(request), std::nullopt);
}

TEST(MergeMetadataTest, AddOverwriteDeleteKeep) {
  auto stored = StructOf(R"pb(
    fields {
      key: "keep"
      value { string_value: "k" }
    }
    fields {
      key: "over"
      value { number_value: 1 }
    }
    fields {
      key: "gone"
      value { bool_value: true }
    }
  )pb");
  auto patch = StructOf(R"pb(
    fields {
      key: "over"
      value { number_value: 2 }
    }
    fields {
      key: "gone"
      value { null_value: NULL_VALUE }
    }
    fields {
      key: "new"
      value { string_value: "n" }
    }
    fields {
      key: "absent_null"
      value { null_value: NULL_VALUE }
    }
  )pb");
  MergeMetadata(patch, &stored);
  EXPECT_EQ(stored.fields().size(), 3);
  EXPECT_EQ(stored.fields().at("keep").string_value(), "k");
  EXPECT_EQ(stored.fields().at("over").number_value(), 2);
  EXPECT_EQ(stored.fields().at("new").string_value(), "n");
  EXPECT_EQ(stored.fields().count("gone"), 0u);
  EXPECT_EQ(stored.fields().count("absent_null"), 0u);
}

TEST(MergeMetadataTest, NestedObjectsReplacedWhole) {
  auto stored = StructOf(R"pb(fields {
                                key: "crm"
                                value {
                                  struct_value {
                                    fields {
                                      key: "a"
                                      value { number_value: 1 }
                                    }
                                  }
                                }
                              })pb");
  auto patch = StructOf(R"pb(fields {
                               key: "crm"
                               value {
                                 struct_value {
                                   fields {
                                     key: "b"
                                     value { number_value: 2 }
                                   }
                                 }
                               }
                             })pb");
  MergeMetadata(patch, &stored);
  const auto& crm = stored.fields().at("crm").struct_value();
  EXPECT_EQ(crm.fields().count("a"), 0u);
  EXPECT_EQ(crm.fields().at("b").number_value(), 2);
}

TEST(MergeMetadataTest, WithoutNullsDropsNullKeys) {
  auto s = WithoutNulls(StructOf(R"pb(
    fields {
      key: "a"
      value { null_value: NULL_VALUE }
    }
    fields {
      key: "b"
      value { string_value: "x" }
    })pb"));
  EXPECT_EQ(s.fields().size(), 1);
  EXPECT_EQ(s.fields().count("b"), 1u);
}

MetricSelection Select(std::vector<int64_t> requested, std::vector<int64_t> disabled,
                       bool has_recording) {
  return SelectMetrics(
      requested, disabled, has_recording, [](int64_t id) { return id >= 1 && id <= 12; },
      [](int64_t id) { return id <= 10; });
}

TEST(SelectMetricsTest, OmittedMeansAll) {
  auto s = Select({}, {}, true);
  EXPECT_THAT(s.metric_ids, IsEmpty());
  EXPECT_THAT(s.ignored_metric_ids, IsEmpty());
}

TEST(SelectMetricsTest, UnknownDisabledAndAudioWithoutRecordingIgnoredInOrder) {
  auto s = Select({99, 1, 11, 5, 12}, {12}, false);
  EXPECT_THAT(s.metric_ids, ElementsAre(11));
  EXPECT_THAT(s.ignored_metric_ids, ElementsAre(99, 1, 5, 12));
}

TEST(SelectMetricsTest, NoneUsableScoresAllAndListsEveryId) {
  auto s = Select({99, 1}, {}, false);
  EXPECT_THAT(s.metric_ids, IsEmpty());
  EXPECT_THAT(s.ignored_metric_ids, ElementsAre(99, 1));
}

TEST(SelectMetricsTest, DuplicatesScoredOnce) {
  auto s = Select({1, 1, 2}, {}, true);
  EXPECT_THAT(s.metric_ids, ElementsAre(1, 2));
  EXPECT_THAT(s.ignored_metric_ids, IsEmpty());
}

TEST(ListFiltersTest, PatternsTakeEveryCharacterOfThePrefixLiterally) {
  EXPECT_EQ(LikePrefixPattern("crm-"), "crm-%");
  EXPECT_EQ(LikePrefixPattern("50%_a\\b"), "50\\%\\_a\\\\b%");
  EXPECT_EQ(LikePrefixPattern(""), "%");
  EXPECT_EQ(GlobPrefixPattern("crm-"), "crm-*");
  EXPECT_EQ(GlobPrefixPattern("a*b?[c]%_\\"), "a[*]b[?][[]c]%_\\*");
  EXPECT_EQ(GlobPrefixPattern(""), "*");
}

TEST(ListFiltersTest, TimestampsRoundUpToTheSecond) {
  EXPECT_EQ(CeilUnixSeconds(absl::FromUnixSeconds(100)), 100);
  EXPECT_EQ(CeilUnixSeconds(absl::FromUnixMillis(100500)), 101);
  EXPECT_EQ(CeilUnixSeconds(absl::FromUnixMillis(-500)), 0);
}

TEST(ListFiltersTest, ParsesTimestampsAndSearch) {
  v1::ListCallsRequest request;
  request.set_call_timestamp_from("2026-11-22T12:15:00+02:00");
  request.set_call_timestamp_to("2026-11-22T10:30:00.25Z");
  request.set_search("0042");
  auto filters = ParseListFilters(request);
  ASSERT_TRUE(filters.ok()) << filters.status();
  EXPECT_EQ(filters->call_time_from, 1795342500);  // 2026-11-22T10:15:00Z
  EXPECT_EQ(filters->call_time_to, 1795343401);
  EXPECT_EQ(filters->search_prefix, "0042");
  EXPECT_EQ(filters->search_id, 42);
  request.set_search("42a");
  EXPECT_EQ(ParseListFilters(request)->search_id, std::nullopt);
  request.set_search("");
  EXPECT_EQ(ParseListFilters(request)->search_id, std::nullopt);
  EXPECT_EQ(ParseListFilters(v1::ListCallsRequest())->search_prefix, std::nullopt);
}

TEST(ListFiltersTest, RefusesEveryBadFilterAtOnce) {
  v1::ListCallsRequest request;
  request.set_transcription_status("skipped");
  request.set_observation_type("video");
  request.set_call_timestamp_from("now");
  absl::Status refused = ParseListFilters(request).status();
  EXPECT_EQ(HttpStatusFor(refused), 422);
  std::vector<std::string> fields;
  const v1::ErrorInfo info = ErrorInfoOf(refused);
  for (const auto& d : info.details()) fields.push_back(d.field());
  EXPECT_THAT(fields, ElementsAre("transcription_status", "observation_type", "call_timestamp_from"));
}

}  // namespace
}  // namespace calleval::calls
