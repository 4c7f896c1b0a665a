// The carriers' media events read the same way (services/runs/media_events.h): every dialect
// takes the audio from base64 media.payload and refuses a frame without it, naming itself.

#include "services/runs/media_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>

#include "services/runs/carrier.h"

namespace calleval::runs {
namespace {

using ::testing::HasSubstr;

TEST(MediaEventsTest, PayloadIsTheBase64Audio) {
  absl::StatusOr<std::string> audio =
      MediaPayload(nlohmann::json::parse(R"({"media": {"payload": "/39+"}})"), "Twilio");
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_EQ(*audio, std::string("\xff\x7f\x7e"));
  // An empty frame is a frame (of no audio), not a missing one.
  audio = MediaPayload(nlohmann::json::parse(R"({"media": {"payload": ""}})"), "Twilio");
  ASSERT_TRUE(audio.ok()) << audio.status();
  EXPECT_EQ(*audio, "");
}

TEST(MediaEventsTest, MissingOrBadPayloadIsRefusedNamingTheDialect) {
  for (const char* bad : {R"({})", R"({"media": 3})", R"({"media": {}})",
                          R"({"media": {"payload": 7}})", R"([1, 2])", R"("media")"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<std::string> audio = MediaPayload(nlohmann::json::parse(bad), "Telnyx");
    ASSERT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(audio.status().message(), HasSubstr("Telnyx media event without media.payload"));
  }
  absl::StatusOr<std::string> audio =
      MediaPayload(nlohmann::json::parse(R"({"media": {"payload": "*not base64*"}})"), "Plivo");
  ASSERT_EQ(audio.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(audio.status().message(), HasSubstr("Plivo media.payload is not base64"));
}

TEST(MediaEventsTest, EveryCarrierDialectReadsItsMediaThroughIt) {
  for (const char* carrier : {"twilio", "telnyx", "plivo"}) {
    SCOPED_TRACE(carrier);
    absl::StatusOr<std::unique_ptr<MediaDialect>> dialect = NewMediaDialect(carrier);
    ASSERT_TRUE(dialect.ok()) << dialect.status();
    absl::StatusOr<MediaEvent> event =
        (*dialect)->Parse(R"({"event": "media", "media": {"payload": "/39+"}})");
    ASSERT_TRUE(event.ok()) << event.status();
    EXPECT_EQ(event->kind, MediaEvent::kMedia);
    EXPECT_EQ(event->mulaw, std::string("\xff\x7f\x7e"));
    EXPECT_EQ((*dialect)->Parse(R"({"event": "media", "media": {}})").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(MediaEventsTest, JsonStringIsEmptyUnlessAString) {
  const nlohmann::json j = nlohmann::json::parse(R"({"a": "x", "b": 2})");
  EXPECT_EQ(JsonString(j, "a"), "x");
  EXPECT_EQ(JsonString(j, "b"), "");
  EXPECT_EQ(JsonString(j, "c"), "");
  EXPECT_EQ(JsonString(nlohmann::json::array(), "a"), "");
}

}  // namespace
}  // namespace calleval::runs
