#include "edge/json_codec.h"

#include <memory>
#include <string>
#include <vector>

#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "common/errors.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/empty.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/edge/bad_bodies.h"

namespace calleval::edge {
namespace {

using ::google::protobuf::Message;
using ::google::protobuf::TextFormat;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// A message type with every field kind the real protos do not use (all scalar types, enums,
// maps, oneofs, Value/ListValue/Empty), built at run time so the codec sees it exactly like a
// generated one through reflection.
constexpr char kAllTypesProto[] = R"pb(
  name: "codec_test.proto"
  package: "codectest"
  syntax: "proto3"
  dependency: "google/protobuf/struct.proto"
  dependency: "google/protobuf/empty.proto"
  enum_type {
    name: "Color"
    value { name: "COLOR_UNSPECIFIED" number: 0 }
    value { name: "RED" number: 1 }
    value { name: "GREEN" number: 2 }
  }
  message_type {
    name: "AllTypes"
    field { name: "i32" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
    field { name: "i64" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 }
    field { name: "u32" number: 3 label: LABEL_OPTIONAL type: TYPE_UINT32 }
    field { name: "u64" number: 4 label: LABEL_OPTIONAL type: TYPE_UINT64 }
    field { name: "s32" number: 5 label: LABEL_OPTIONAL type: TYPE_SINT32 }
    field { name: "s64" number: 6 label: LABEL_OPTIONAL type: TYPE_SINT64 }
    field { name: "fx32" number: 7 label: LABEL_OPTIONAL type: TYPE_FIXED32 }
    field { name: "fx64" number: 8 label: LABEL_OPTIONAL type: TYPE_FIXED64 }
    field { name: "sfx32" number: 9 label: LABEL_OPTIONAL type: TYPE_SFIXED32 }
    field { name: "sfx64" number: 10 label: LABEL_OPTIONAL type: TYPE_SFIXED64 }
    field { name: "flt" number: 11 label: LABEL_OPTIONAL type: TYPE_FLOAT }
    field { name: "dbl" number: 12 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
    field { name: "b" number: 13 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "str" number: 14 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "byt" number: 15 label: LABEL_OPTIONAL type: TYPE_BYTES }
    field {
      name: "color"
      number: 16
      label: LABEL_OPTIONAL
      type: TYPE_ENUM
      type_name: ".codectest.Color"
    }
    field {
      name: "colors"
      number: 17
      label: LABEL_REPEATED
      type: TYPE_ENUM
      type_name: ".codectest.Color"
    }
    field {
      name: "counts"
      number: 18
      label: LABEL_REPEATED
      type: TYPE_MESSAGE
      type_name: ".codectest.AllTypes.CountsEntry"
    }
    field {
      name: "by_id"
      number: 19
      label: LABEL_REPEATED
      type: TYPE_MESSAGE
      type_name: ".codectest.AllTypes.ByIdEntry"
    }
    field {
      name: "value"
      number: 20
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".google.protobuf.Value"
    }
    field {
      name: "list"
      number: 21
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".google.protobuf.ListValue"
    }
    field {
      name: "empty"
      number: 22
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".google.protobuf.Empty"
    }
    field {
      name: "values"
      number: 23
      label: LABEL_REPEATED
      type: TYPE_MESSAGE
      type_name: ".google.protobuf.Value"
    }
    field { name: "a" number: 24 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
    field { name: "b2" number: 25 label: LABEL_OPTIONAL type: TYPE_INT32 oneof_index: 0 }
    field {
      name: "child"
      number: 26
      label: LABEL_OPTIONAL
      type: TYPE_MESSAGE
      type_name: ".codectest.AllTypes"
    }
    field {
      name: "opt_i32"
      number: 27
      label: LABEL_OPTIONAL
      type: TYPE_INT32
      oneof_index: 1
      proto3_optional: true
    }
    field { name: "f32s" number: 28 label: LABEL_REPEATED type: TYPE_FLOAT }
    field { name: "null_fields" number: 100 label: LABEL_REPEATED type: TYPE_STRING }
    field { name: "set_fields" number: 101 label: LABEL_REPEATED type: TYPE_STRING }
    nested_type {
      name: "CountsEntry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 }
      options { map_entry: true }
    }
    nested_type {
      name: "ByIdEntry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
      field {
        name: "value"
        number: 2
        label: LABEL_OPTIONAL
        type: TYPE_MESSAGE
        type_name: ".codectest.AllTypes"
      }
      options { map_entry: true }
    }
    oneof_decl { name: "choice" }
    oneof_decl { name: "_opt_i32" }
  }
)pb";

class AllTypesFactory {
 public:
  AllTypesFactory() : pool_(google::protobuf::DescriptorPool::generated_pool()) {
    // Make sure the well-known types are linked into the generated pool.
    google::protobuf::Value::descriptor();
    google::protobuf::Empty::descriptor();
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(TextFormat::ParseFromString(kAllTypesProto, &file));
    EXPECT_NE(pool_.BuildFile(file), nullptr);
    factory_.SetDelegateToGeneratedFactory(true);
  }

  std::unique_ptr<Message> New() {
    const auto* d = pool_.FindMessageTypeByName("codectest.AllTypes");
    return std::unique_ptr<Message>(factory_.GetPrototype(d)->New());
  }

 private:
  google::protobuf::DescriptorPool pool_;
  google::protobuf::DynamicMessageFactory factory_;
};

std::unique_ptr<Message> NewAllTypes() {
  static AllTypesFactory* factory = new AllTypesFactory();
  return factory->New();
}

// Parses `json` into `T`, failing the test on error.
template <typename T>
T MustParse(const std::string& json) {
  T message;
  absl::Status status = ParseJsonBody(json, &message);
  EXPECT_TRUE(status.ok()) << json << " -> " << status;
  return message;
}

template <typename T>
T FromText(const std::string& text) {
  T message;
  EXPECT_TRUE(TextFormat::ParseFromString(text, &message)) << text;
  return message;
}

void ExpectEqualMessages(const Message& expected, const Message& actual, const std::string& what) {
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(expected, actual)) << what << "\n" << diff;
}

// The one detail of a failed status, as "field: issue".
std::string OnlyDetail(const absl::Status& status) {
  v1::ErrorInfo info = ErrorInfoOf(status);
  if (info.details_size() != 1) return "details: " + info.ShortDebugString();
  return info.details(0).field() + ": " + info.details(0).issue();
}

// ---------------------------------------------------------------------------------------------
// JSON -> message.

struct ParseCase {
  std::string json;
  std::string expected;  // text format
};

TEST(ParseJsonBodyTest, IngestCallRequest) {
  const std::vector<ParseCase> cases = {
      {R"({})", ""},
      // int64 beyond 2^53 stays exact; a double-typed integer (7.0) is accepted when integral.
      {R"({"call_identifier":"c1","agent_id":9007199254740993,"client_id":7.0})",
       R"pb(call_identifier: "c1"
            agent_id: 9007199254740993
            client_id: 7
            set_fields: [ "call_identifier", "agent_id", "client_id" ])pb"},
      {R"({"agent_id":9223372036854775807,"client_id":-9223372036854775808})",
       R"pb(agent_id: 9223372036854775807
            client_id: -9223372036854775808
            set_fields: [ "agent_id", "client_id" ])pb"},
      // Null leaves the field unset and is recorded; absent keys are not recorded at all.
      {R"({"call_identifier":"c1","tag":null,"metadata":null,"transcript":null})",
       R"pb(call_identifier: "c1"
            null_fields: [ "transcript", "tag", "metadata" ]
            set_fields: [ "call_identifier" ])pb"},
      // Unknown keys and client-sent bookkeeping keys are ignored.
      {R"({"nope":1,"null_fields":["agent_id"],"set_fields":"x","label":"l","Label":5})",
       R"pb(label: "l" set_fields: "label")pb"},
      // Empty strings and arrays are values, not nulls.
      {R"({"tag":"","metric_ids":[],"transcript":[]})",
       R"pb(tag: ""
            set_fields: [ "transcript", "tag", "metric_ids" ])pb"},
      {R"({"metric_ids":[3,1,2,1]})", R"pb(metric_ids: [ 3, 1, 2, 1 ]
                                           set_fields: "metric_ids")pb"},
      // Struct keeps nested nulls, lists, and numbers as doubles.
      {R"({"metadata":{"a":null,"b":{"c":[1,null,"x",true,{}]},"d":2.5}})",
       R"pb(metadata {
              fields {
                key: "a"
                value { null_value: NULL_VALUE }
              }
              fields {
                key: "b"
                value {
                  struct_value {
                    fields {
                      key: "c"
                      value {
                        list_value {
                          values { number_value: 1 }
                          values { null_value: NULL_VALUE }
                          values { string_value: "x" }
                          values { bool_value: true }
                          values { struct_value {} }
                        }
                      }
                    }
                  }
                }
              }
              fields {
                key: "d"
                value { number_value: 2.5 }
              }
            }
            set_fields: "metadata")pb"},
      // Turns: optional fields, data Struct, nulls inside a turn, UTF-8 and escapes.
      {R"({"transcript":[{"role":"User","content":"h\u00e9 \"x\"\n","start_time":0,"end_time":1.25},)"
       R"({"role":"Function Call","content":null,"data":{"id":"f1"}}]})",
       R"pb(transcript { role: "User" content: "h\303\251 \"x\"\n" start_time: 0 end_time: 1.25 }
            transcript {
              role: "Function Call"
              data {
                fields {
                  key: "id"
                  value { string_value: "f1" }
                }
              }
            }
            set_fields: "transcript")pb"},
      // Surrogate pairs become one 4-byte UTF-8 character.
      {R"({"label":"\ud83d\ude00"})", R"pb(label: "\360\237\230\200" set_fields: "label")pb"},
      // Whitespace around the body is fine.
      {" \n\t{\"tag\" : \"t\"}\r\n ", R"pb(tag: "t" set_fields: "tag")pb"},
  };
  for (const auto& c : cases) {
    auto expected = FromText<v1::IngestCallRequest>(c.expected);
    auto actual = MustParse<v1::IngestCallRequest>(c.json);
    ExpectEqualMessages(expected, actual, c.json);
  }
}

TEST(ParseJsonBodyTest, NestedMessagesRecordTheirOwnKeys) {
  auto agent = MustParse<v1::AgentFields>(
      R"({"name":"Bot","phone_number":null,"opening_message":{"mode":"agent_speaks_first",)"
      R"("text":null,"delay_ms":250},"call_directions":["inbound","outbound"],)"
      R"("disabled_metric_ids":[4],"max_call_duration_seconds":600})");
  ExpectEqualMessages(FromText<v1::AgentFields>(R"pb(
                        name: "Bot"
                        opening_message { mode: "agent_speaks_first" delay_ms: 250 }
                        call_directions: [ "inbound", "outbound" ]
                        max_call_duration_seconds: 600
                        disabled_metric_ids: 4
                        null_fields: "phone_number"
                        set_fields: [
                          "name",
                          "call_directions",
                          "opening_message",
                          "max_call_duration_seconds",
                          "disabled_metric_ids"
                        ]
                      )pb"),
                      agent, "AgentFields");

  // The PATCH body binds to `update`: its keys land in CallUpdate's own bookkeeping fields.
  v1::UpdateCallRequest request;
  ASSERT_TRUE(ParseJsonBody(R"({"label":null,"metadata":{"x":null,"y":1},"id":5})",
                            request.mutable_update())
                  .ok());
  ExpectEqualMessages(FromText<v1::UpdateCallRequest>(R"pb(
                        update {
                          metadata {
                            fields {
                              key: "x"
                              value { null_value: NULL_VALUE }
                            }
                            fields {
                              key: "y"
                              value { number_value: 1 }
                            }
                          }
                          null_fields: "label"
                          set_fields: "metadata"
                        }
                      )pb"),
                      request, "UpdateCallRequest");
}

TEST(ParseJsonBodyTest, ClearsTheMessageFirst) {
  v1::IngestCallRequest request;
  request.set_tag("old");
  request.add_null_fields("label");
  ASSERT_TRUE(ParseJsonBody(R"({"label":"new"})", &request).ok());
  ExpectEqualMessages(FromText<v1::IngestCallRequest>(R"pb(label: "new" set_fields: "label")pb"),
                      request, "cleared");
}

TEST(ParseJsonBodyTest, ListCallsRequestInt32Fields) {
  ExpectEqualMessages(FromText<v1::ListCallsRequest>(R"pb(page: 2 per_page: 100 tag: "x")pb"),
                      MustParse<v1::ListCallsRequest>(R"({"page":2,"per_page":1e2,"tag":"x"})"),
                      "list");
}

struct ErrorCase {
  std::string json;
  int http_status;
  std::string detail;  // "field: issue", empty to skip the check
};

void CheckErrors(const std::vector<ErrorCase>& cases,
                 const std::function<std::unique_ptr<Message>()>& make) {
  for (const auto& c : cases) {
    std::unique_ptr<Message> message = make();
    absl::Status status = ParseJsonBody(c.json, message.get());
    ASSERT_FALSE(status.ok()) << c.json;
    EXPECT_EQ(HttpStatusFor(status), c.http_status) << c.json << " -> " << status;
    v1::ErrorInfo info = ErrorInfoOf(status);
    EXPECT_EQ(info.code(), c.http_status == 400 ? "malformed_json" : "invalid_type") << c.json;
    if (!c.detail.empty()) {
      EXPECT_EQ(OnlyDetail(status), c.detail) << c.json;
    }
  }
}

TEST(ParseJsonBodyTest, WrongTypesNameTheField) {
  CheckErrors(
      {
          {R"({"call_identifier":5})", 422, "call_identifier: must be a string"},
          {R"({"call_identifier":true})", 422, "call_identifier: must be a string"},
          {R"({"agent_id":"5"})", 422, "agent_id: must be an integer"},
          {R"({"agent_id":5.5})", 422, "agent_id: must be an integer"},
          {R"({"agent_id":true})", 422, "agent_id: must be an integer"},
          {R"({"agent_id":{}})", 422, "agent_id: must be an integer"},
          {R"({"agent_id":[1]})", 422, "agent_id: must be an integer"},
          {R"({"agent_id":9223372036854775808})", 422, "agent_id: out of range"},
          {R"({"agent_id":-9223372036854775809})", 422, "agent_id: out of range"},
          {R"({"agent_id":99999999999999999999999})", 422, "agent_id: out of range"},
          {R"({"agent_id":1e400})", 422, "agent_id: out of range"},
          {R"({"agent_id":1e19})", 422, "agent_id: out of range"},
          {R"({"transcript":{}})", 422, "transcript: must be an array"},
          {R"({"transcript":[{"role":"User"},null]})", 422, "transcript[1]: must not be null"},
          {R"({"transcript":[{},{},{"role":"User","start_time":"0.5"}]})", 422,
           "transcript[2].start_time: must be a number"},
          {R"({"transcript":[{},{},{"role":7}]})", 422, "transcript[2].role: must be a string"},
          {R"({"transcript":[{},{"end_time":1e400}]})", 422,
           "transcript[1].end_time: out of range"},
          {R"({"transcript":[{},{"end_time":-1e999}]})", 422,
           "transcript[1].end_time: out of range"},
          {R"({"transcript":[1]})", 422, "transcript[0]: must be an object"},
          {R"({"transcript":[{"data":[]}]})", 422, "transcript[0].data: must be an object"},
          {R"({"metric_ids":[1,"2"]})", 422, "metric_ids[1]: must be an integer"},
          {R"({"metric_ids":[1,null]})", 422, "metric_ids[1]: must not be null"},
          {R"({"metric_ids":7})", 422, "metric_ids: must be an array"},
          {R"({"metadata":[]})", 422, "metadata: must be an object"},
          {R"({"metadata":"x"})", 422, "metadata: must be an object"},
          {R"({"metadata":{"a":{"b":[1,1e400]}}})", 422, "metadata.a.b[1]: out of range"},
          {R"({"nope":1e400})", 422, "nope: out of range"},
      },
      [] { return std::make_unique<v1::IngestCallRequest>(); });

  CheckErrors(
      {
          {R"({"opening_message":{"delay_ms":"5"}})", 422,
           "opening_message.delay_ms: must be an integer"},
          {R"({"opening_message":{"delay_ms":2147483648}})", 422,
           "opening_message.delay_ms: out of range"},
          {R"({"opening_message":"hi"})", 422, "opening_message: must be an object"},
          {R"({"call_directions":["inbound",null]})", 422, "call_directions[1]: must not be null"},
          {R"({"call_directions":["inbound",1]})", 422, "call_directions[1]: must be a string"},
          {R"({"max_call_duration_seconds":-2147483649})", 422,
           "max_call_duration_seconds: out of range"},
      },
      [] { return std::make_unique<v1::AgentFields>(); });
}

TEST(ParseJsonBodyTest, ReportsEveryBadField) {
  v1::IngestCallRequest request;
  absl::Status status =
      ParseJsonBody(R"({"call_identifier":1,"agent_id":"x","transcript":[{"role":2}]})", &request);
  ASSERT_EQ(HttpStatusFor(status), 422);
  v1::ErrorInfo info = ErrorInfoOf(status);
  ASSERT_EQ(info.details_size(), 3);
  EXPECT_EQ(info.details(0).field(), "call_identifier");
  EXPECT_EQ(info.details(1).field(), "agent_id");
  EXPECT_EQ(info.details(2).field(), "transcript[0].role");
  EXPECT_THAT(std::string(status.message()), HasSubstr("call_identifier: must be a string"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("(and 2 more)"));

  // Thousands of bad elements produce a bounded answer.
  std::string many = R"({"metric_ids":[)";
  for (int i = 0; i < 5000; ++i) many += i ? ",\"x\"" : "\"x\"";
  many += "]}";
  status = ParseJsonBody(many, &request);
  ASSERT_EQ(HttpStatusFor(status), 422);
  EXPECT_LE(ErrorInfoOf(status).details_size(), 50);
}

TEST(ParseJsonBodyTest, MalformedBodiesAre400) {
  CheckErrors(
      {
          {"", 400, ""},
          {"   ", 400, ""},
          {"[]", 400, ""},
          {"[{}]", 400, ""},
          {R"("x")", 400, ""},
          {"42", 400, ""},
          {"1e400", 400, ""},
          {"null", 400, ""},
          {"true", 400, ""},
          {R"({"tag":"t")", 400, ""},
          {R"({"tag":"t)", 400, ""},
          {R"({"tag":)", 400, ""},
          {R"({"tag":"t",})", 400, ""},
          {R"({"tag":"t"}x)", 400, ""},
          {R"({"tag":"t"}{})", 400, ""},
          {R"({"tag":'t'})", 400, ""},
          {R"({"agent_id":NaN})", 400, ""},
          {"{\"tag\":\"\xff\"}", 400, ""},
          {"{\"tag\":\"\xc0\xaf\"}", 400, ""},
          {"{\"tag\":\"\xed\xa0\x80\"}", 400, ""},
          {"{\"\xe2\x82\":1}", 400, ""},
          {R"({"tag":"\ud800"})", 400, ""},
          {R"({"tag":"\udc00\ud800"})", 400, ""},
          {R"({"tag":"\ud800\u0041"})", 400, ""},
          {std::string("{\"tag\":\"a\0b\"}", 13), 400, ""},
          {std::string("{}\0{", 4), 400, ""},
          {"{\"tag\":\"a\nb\"}", 400, ""},
          {R"({"tag":"a","tag":"b"})", 400, ""},
          {R"({"metadata":{"k":1,"k":1}})", 400, ""},
      },
      [] { return std::make_unique<v1::IngestCallRequest>(); });
}

TEST(ParseJsonBodyTest, ErrorMessagesAreSafeToEcho) {
  v1::IngestCallRequest request;
  absl::Status status = ParseJsonBody("{\"tag\":\"\xff\x01\"}", &request);
  ASSERT_EQ(HttpStatusFor(status), 400);
  for (char c : status.message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(static_cast<unsigned char>(c));
  }
}

std::string Nested(int depth) {
  // {"metadata": ...}: the top-level object is level 1, each {"a": ...} one more.
  std::string body = R"({"metadata":)";
  for (int i = 1; i < depth; ++i) body += R"({"a":)";
  body += "1";
  for (int i = 1; i < depth; ++i) body += "}";
  return body + "}";
}

TEST(ParseJsonBodyTest, DepthLimit) {
  v1::IngestCallRequest request;
  EXPECT_TRUE(ParseJsonBody(Nested(64), &request).ok());
  absl::Status status = ParseJsonBody(Nested(65), &request);
  EXPECT_EQ(HttpStatusFor(status), 400);
  EXPECT_THAT(std::string(status.message()), HasSubstr("nesting deeper than 64"));

  EXPECT_TRUE(ParseJsonBody(Nested(3), &request, {.max_depth = 3}).ok());
  EXPECT_EQ(HttpStatusFor(ParseJsonBody(Nested(4), &request, {.max_depth = 3})), 400);
  EXPECT_EQ(HttpStatusFor(ParseJsonBody(R"({"transcript":[[]]})", &request, {.max_depth = 2})),
            400);

  // Far deeper than the limit: rejected without building (or recursing into) anything deep.
  EXPECT_EQ(HttpStatusFor(ParseJsonBody(std::string(200000, '['), &request)), 400);
  EXPECT_EQ(
      HttpStatusFor(ParseJsonBody(std::string(100000, '[') + std::string(100000, ']'), &request)),
      400);
}

TEST(ParseJsonBodyTest, EveryGeneratedBadBodyIsRejected) {
  const std::vector<std::string> bodies = testdata::GenerateBadBodies();
  EXPECT_GE(bodies.size(), 250u);
  EXPECT_TRUE(
      ParseJsonBody(testdata::ValidIngestBody(), std::make_unique<v1::IngestCallRequest>().get())
          .ok());
  for (size_t i = 0; i < bodies.size(); ++i) {
    v1::IngestCallRequest request;
    absl::Status status = ParseJsonBody(bodies[i], &request);
    ASSERT_FALSE(status.ok()) << "body #" << i << ": " << bodies[i].substr(0, 200);
    int http = HttpStatusFor(status);
    EXPECT_TRUE(http == 400 || http == 422) << "body #" << i << " -> " << status;
  }
}

TEST(ParseJsonBodyTest, AllScalarTypes) {
  auto m = NewAllTypes();
  ASSERT_TRUE(ParseJsonBody(R"({"i32":-2147483648,"i64":-5,"u32":4294967295,)"
                            R"("u64":18446744073709551615,"s32":-3,"s64":9007199254740993,)"
                            R"("fx32":7,"fx64":8,"sfx32":-9,"sfx64":-10,"flt":1.5,"dbl":2,)"
                            R"("b":true,"str":"s","byt":"aGk=","color":"GREEN","colors":[1,"RED"],)"
                            R"("opt_i32":0,"f32s":[0.1,3]})",
                            m.get())
                  .ok());
  auto expected = NewAllTypes();
  ASSERT_TRUE(TextFormat::ParseFromString(
      R"pb(i32: -2147483648
           i64: -5
           u32: 4294967295
           u64: 18446744073709551615
           s32: -3
           s64: 9007199254740993
           fx32: 7
           fx64: 8
           sfx32: -9
           sfx64: -10
           flt: 1.5
           dbl: 2
           b: true
           str: "s"
           byt: "hi"
           color: GREEN
           colors: [ RED, RED ]
           opt_i32: 0
           f32s: [ 0.1, 3 ]
           set_fields: [
             "i32",
             "i64",
             "u32",
             "u64",
             "s32",
             "s64",
             "fx32",
             "fx64",
             "sfx32",
             "sfx64",
             "flt",
             "dbl",
             "b",
             "str",
             "byt",
             "color",
             "colors",
             "opt_i32",
             "f32s"
           ])pb",
      expected.get()));
  ExpectEqualMessages(*expected, *m, "all scalars");
}

TEST(ParseJsonBodyTest, MapsOneofsAndWellKnownTypes) {
  auto m = NewAllTypes();
  ASSERT_TRUE(
      ParseJsonBody(
          R"({"counts":{"x":1,"y":2},"by_id":{"7":{"str":"seven"}},)"
          R"("value":null,"list":[1,"a",null],"empty":{"ignored":1},)"
          R"("values":[null,{"k":[]}],"b2":4,"child":{"i32":1,"null_fields":[],"dbl":null}})",
          m.get())
          .ok());
  auto expected = NewAllTypes();
  ASSERT_TRUE(TextFormat::ParseFromString(
      R"pb(counts { key: "x" value: 1 }
           counts { key: "y" value: 2 }
           by_id {
             key: 7
             value { str: "seven" set_fields: "str" }
           }
           value { null_value: NULL_VALUE }
           list {
             values { number_value: 1 }
             values { string_value: "a" }
             values { null_value: NULL_VALUE }
           }
           empty {}
           values { null_value: NULL_VALUE }
           values {
             struct_value {
               fields {
                 key: "k"
                 value { list_value {} }
               }
             }
           }
           b2: 4
           child { i32: 1 null_fields: "dbl" set_fields: "i32" }
           null_fields: "value"
           set_fields: [ "counts", "by_id", "list", "empty", "values", "b2", "child" ])pb",
      expected.get()));
  ExpectEqualMessages(*expected, *m, "maps and wkt");

  CheckErrors(
      {
          {R"({"i32":2147483648})", 422, "i32: out of range"},
          {R"({"u32":-1})", 422, "u32: out of range"},
          {R"({"u32":4294967296})", 422, "u32: out of range"},
          {R"({"u64":-1})", 422, "u64: out of range"},
          {R"({"u64":18446744073709551616})", 422, "u64: out of range"},
          {R"({"u64":1.5})", 422, "u64: must be an integer"},
          {R"({"flt":1e39})", 422, "flt: out of range"},
          {R"({"dbl":"1"})", 422, "dbl: must be a number"},
          {R"({"b":1})", 422, "b: must be a boolean"},
          {R"({"b":"true"})", 422, "b: must be a boolean"},
          {R"({"byt":"@@"})", 422, "byt: must be base64"},
          {R"({"color":"BLUE"})", 422, "color: must be one of COLOR_UNSPECIFIED, RED, GREEN"},
          {R"({"color":7})", 422, "color: must be one of COLOR_UNSPECIFIED, RED, GREEN"},
          {R"({"color":true})", 422, "color: must be one of COLOR_UNSPECIFIED, RED, GREEN"},
          {R"({"colors":["RED",null]})", 422, "colors[1]: must not be null"},
          {R"({"counts":[]})", 422, "counts: must be an object"},
          {R"({"counts":{"x":"1"}})", 422, "counts.x: must be an integer"},
          {R"({"counts":{"x":null}})", 422, "counts.x: must not be null"},
          {R"({"by_id":{"seven":{}}})", 422, "by_id.seven: key must be an integer"},
          {R"({"by_id":{"7":[]}})", 422, "by_id.7: must be an object"},
          {R"({"list":{}})", 422, "list: must be an array"},
          {R"({"empty":[]})", 422, "empty: must be an object"},
          {R"({"a":"x","b2":1})", 422, "b2: conflicts with a"},
          {R"({"child":{"child":{"i64":"1"}}})", 422, "child.child.i64: must be an integer"},
      },
      [] { return NewAllTypes(); });
}

// ---------------------------------------------------------------------------------------------
// message -> JSON.

struct PrintCase {
  std::string text;      // text format
  std::string expected;  // exact JSON
};

template <typename T>
void CheckPrints(const std::vector<PrintCase>& cases) {
  for (const auto& c : cases) {
    EXPECT_EQ(PrintJson(FromText<T>(c.text)), c.expected) << c.text;
  }
}

TEST(PrintJsonTest, Call) {
  CheckPrints<v1::Call>({
      {"",
       R"({"id":0,"call_identifier":"","client_id":0,"agent_id":0,"observation_type":"",)"
       R"("call_direction":"","analysis_status":"","transcription_status":"",)"
       R"("recording_url":null,"presigned_recording_url":null,"duration_seconds":null,)"
       R"("call_timestamp":"","call_end_reason":null,"customer_number":null,"tag":null,)"
       R"("label":null,"metadata":null,"transcript":[],"transcript_source":null,)"
       R"("standard_metrics":[],"metric_results":[],"credits_used":0,"failure_reason":null,)"
       R"("failure_message":null,"created_at":"","updated_at":"","metric_ids":[],"version":null,)"
       R"("platform_version":null})"},
      {R"pb(id: 42
            call_identifier: "crm-9931"
            client_id: 1
            agent_id: 9007199254740993
            observation_type: "voice"
            call_direction: "inbound"
            analysis_status: "completed"
            transcription_status: "completed"
            recording_url: "https://example.com/r.wav"
            duration_seconds: 312
            call_timestamp: "2026-11-22T10:15:00Z"
            tag: ""
            metadata {
              fields {
                key: "b"
                value { null_value: NULL_VALUE }
              }
              fields {
                key: "a"
                value { number_value: 12345 }
              }
              fields {
                key: "c"
                value {
                  list_value {
                    values { number_value: 0.5 }
                    values {}
                  }
                }
              }
            }
            transcript {
              role: "AI Assistant"
              content: "hi \"there\"\n\t\\"
              start_time: 0.4
              end_time: 3
            }
            transcript {
              role: "Function Call"
              data {
                fields {
                  key: "id"
                  value { string_value: "f1" }
                }
              }
            }
            standard_metrics {
              metric_id: 1
              standard_metric_key: "latency"
              name: "Latency"
              status: "completed"
              result {
                fields {
                  key: "average_ms"
                  value { number_value: 1180 }
                }
              }
              score: 1180
              credits_used: 1
            }
            metric_results {
              metric_id: 20
              value { bool_value: true }
              structured_output {}
            }
            credits_used: 12
            created_at: "c"
            updated_at: "u"
            metric_ids: [ 1, 2 ]
            ignored_metric_ids: [ 9 ]
            platform_version: "7")pb",
       R"({"id":42,"call_identifier":"crm-9931","client_id":1,"agent_id":9007199254740993,)"
       R"("observation_type":"voice","call_direction":"inbound","analysis_status":"completed",)"
       R"("transcription_status":"completed","recording_url":"https://example.com/r.wav",)"
       R"("presigned_recording_url":null,"duration_seconds":312,)"
       R"("call_timestamp":"2026-11-22T10:15:00Z","call_end_reason":null,"customer_number":null,)"
       R"("tag":"","label":null,"metadata":{"a":12345,"b":null,"c":[0.5,null]},)"
       R"("transcript":[{"role":"AI Assistant","content":"hi \"there\"\n\t\\","start_time":0.4,)"
       R"("end_time":3.0},{"role":"Function Call","content":null,"start_time":null,)"
       R"("end_time":null,"data":{"id":"f1"}}],"transcript_source":null,)"
       R"("standard_metrics":[{"metric_id":1,"standard_metric_key":"latency","name":"Latency",)"
       R"("status":"completed","result":{"average_ms":1180},"score":1180.0,"credits_used":1,)"
       R"("error":null}],"metric_results":[{"metric_id":20,"name":"","metrics_type":"",)"
       R"("result_type":"","status":"","value":true,"explanation":null,"structured_output":)"
       R"({"set_metrics_name":null,"as_metrics_expected_value":null,)"
       R"("outcome_classification":null},"credits_used":0,"error":null,"agreement":null}],"credits_used":12,)"
       R"("failure_reason":null,"failure_message":null,"created_at":"c","updated_at":"u",)"
       R"("metric_ids":[1,2],"ignored_metric_ids":[9],"version":null,"platform_version":"7"})"},
  });
}

// A run's agent versions: the workspace's label and the platform's, null when there is none.
TEST(PrintJsonTest, Run) {
  CheckPrints<v1::Run>({
      {"", R"({"id":0,"scenario_id":0,"agent_id":0,"batch_run_id":null,"channel":"","status":"",)"
           R"("call_id":null,"passed":null,"started_at":null,"ended_at":null,"end_reason":null,)"
           R"("error":null,"created_at":"","version":null,"platform_version":null})"},
      {R"pb(id: 5
            scenario_id: 2
            agent_id: 3
            channel: "web"
            status: "completed"
            call_id: 44
            passed: true
            end_reason: "script_finished"
            created_at: "c"
            version: "prompt-v7"
            platform_version: "12")pb",
       R"({"id":5,"scenario_id":2,"agent_id":3,"batch_run_id":null,"channel":"web",)"
       R"("status":"completed","call_id":44,"passed":true,"started_at":null,"ended_at":null,)"
       R"("end_reason":"script_finished","error":null,"created_at":"c","version":"prompt-v7",)"
       R"("platform_version":"12"})"},
  });
}

TEST(PrintJsonTest, RequestsNeverPrintBookkeeping) {
  CheckPrints<v1::AgentFields>({
      {R"pb(name: "n"
            opening_message { delay_ms: 5 }
            null_fields: "voice"
            set_fields: "name")pb",
       R"({"name":"n","phone_number":null,"client_id":null,"agent_source":null,)"
       R"("integration_type":null,"agent_kind":null,"assistant_id":null,"call_directions":[],)"
       R"("language_id":null,"instructions":null,"opening_message":{"mode":null,"text":null,)"
       R"("delay_ms":5},"first_message":null,"max_call_duration_seconds":null,)"
       R"("disabled_metric_ids":[],"silence_threshold_ms":null,"model":null,"voice":null,)"
       R"("web_channel":null,"transport":null,"version":null})"},
  });
  CheckPrints<v1::ListCallsRequest>({
      {"page: 1 tag: \"x\"",
       R"({"client_id":null,"agent_id":null,"analysis_status":null,"tag":"x",)"
       R"("observation_type":null,"page":1,"per_page":null,"transcription_status":null,)"
       R"("call_timestamp_from":null,"call_timestamp_to":null,"search":null})"},
  });
}

TEST(PrintJsonTest, NumbersAndStrings) {
  struct Case {
    double value;
    std::string expected;
  };
  for (const auto& c : std::vector<Case>{{0, "0.0"},
                                         {-0.0, "0.0"},
                                         {3, "3.0"},
                                         {0.1, "0.1"},
                                         {-2.5, "-2.5"},
                                         {1e20, "100000000000000000000.0"},
                                         {1e21, "1e+21"},
                                         {1e-7, "1e-07"},
                                         {0.000001, "0.000001"},
                                         {1.7976931348623157e308, "1.7976931348623157e+308"},
                                         {std::numeric_limits<double>::infinity(), "null"},
                                         {std::nan(""), "null"}}) {
    v1::Turn turn;
    turn.set_start_time(c.value);
    std::string json = PrintJson(turn);
    EXPECT_THAT(json, HasSubstr("\"start_time\":" + c.expected + ",")) << c.value;
  }

  v1::Turn turn;
  // Control characters are escaped; invalid UTF-8 set by internal code becomes U+FFFD.
  turn.set_role(std::string("a\x01\x1f\b\f\r\xe2\x82\xac\xff\"\0z", 13));
  EXPECT_EQ(PrintJson(turn),
            "{\"role\":\"a\\u0001\\u001f\\b\\f\\r\xe2\x82\xac\xef\xbf\xbd\\\"\\u0000z\","
            "\"content\":null,\"start_time\":null,\"end_time\":null}");
}

TEST(PrintJsonTest, WellKnownTypesAndAllTypes) {
  google::protobuf::Struct s;
  EXPECT_EQ(PrintJson(s), "{}");
  EXPECT_EQ(PrintJson(google::protobuf::Empty()), "{}");
  google::protobuf::Value v;
  EXPECT_EQ(PrintJson(v), "null");
  v.set_number_value(9007199254740992.0);
  EXPECT_EQ(PrintJson(v), "9007199254740992");
  v.set_string_value("x");
  EXPECT_EQ(PrintJson(v), "\"x\"");

  auto m = NewAllTypes();
  ASSERT_TRUE(TextFormat::ParseFromString(
      R"pb(i32: -1
           u64: 18446744073709551615
           flt: 0.1
           dbl: 0.1
           b: true
           byt: "hi"
           color: RED
           colors: [ GREEN ]
           counts { key: "y" value: 2 }
           counts { key: "x" value: 1 }
           by_id {
             key: 10
             value {}
           }
           by_id {
             key: 9
             value { str: "n" }
           }
           value { list_value {} }
           empty {}
           values { bool_value: false }
           b2: 3
           opt_i32: 0
           f32s: [ 0.1 ]
           null_fields: "x")pb",
      m.get()));
  EXPECT_EQ(PrintJson(*m),
            R"({"i32":-1,"i64":0,"u32":0,"u64":18446744073709551615,"s32":0,"s64":0,"fx32":0,)"
            R"("fx64":0,"sfx32":0,"sfx64":0,"flt":0.1,"dbl":0.1,"b":true,"str":"","byt":"aGk=",)"
            R"("color":"RED","colors":["GREEN"],"counts":{"x":1,"y":2},)"
            R"("by_id":{"10":{"i32":0,"i64":0,"u32":0,"u64":0,"s32":0,"s64":0,"fx32":0,"fx64":0,)"
            R"("sfx32":0,"sfx64":0,"flt":0.0,"dbl":0.0,"b":false,"str":"","byt":"",)"
            R"("color":"COLOR_UNSPECIFIED","colors":[],"counts":{},"by_id":{},"value":null,)"
            R"("list":null,"empty":null,"values":[],"a":null,"b2":null,"child":null,)"
            R"("opt_i32":null,"f32s":[]},"9":{"i32":0,"i64":0,"u32":0,"u64":0,"s32":0,"s64":0,)"
            R"("fx32":0,"fx64":0,"sfx32":0,"sfx64":0,"flt":0.0,"dbl":0.0,"b":false,"str":"n",)"
            R"("byt":"","color":"COLOR_UNSPECIFIED","colors":[],"counts":{},"by_id":{},)"
            R"("value":null,"list":null,"empty":null,"values":[],"a":null,"b2":null,"child":null,)"
            R"("opt_i32":null,"f32s":[]}},"value":[],"list":null,"empty":{},"values":[false],)"
            R"("a":null,"b2":3,"child":null,"opt_i32":0,"f32s":[0.1]})");
}

TEST(PrintJsonTest, RoundTrip) {
  v1::IngestCallRequest request;
  ASSERT_TRUE(ParseJsonBody(testdata::ValidIngestBody(), &request).ok());
  v1::Call call;
  call.set_call_identifier(request.call_identifier());
  *call.mutable_transcript() = request.transcript();
  *call.mutable_metadata() = request.metadata();
  std::string json = PrintJson(call);
  EXPECT_THAT(json, HasSubstr(R"("metadata":{"crm_id":12345,"nested":{"x":[1,null,"y"]}})"));
  EXPECT_THAT(json, HasSubstr(R"("content":"I need to move my appointment )"
                              "\xc3\xa9"
                              R"(","start_time":3.5,"end_time":6.0})"));
  EXPECT_THAT(json, HasSubstr(R"("data":{"arguments":{"day":"mon"},"id":"f1","name":"move"})"));

  // What the codec prints, it parses back to the same message.
  v1::Call reparsed;
  ASSERT_TRUE(ParseJsonBody(json, &reparsed).ok()) << json;
  ExpectEqualMessages(call, reparsed, json);
}

// ---------------------------------------------------------------------------------------------
// Path and query parameters.

TEST(SetFieldFromStringTest, ListCallsRequest) {
  v1::ListCallsRequest request;
  EXPECT_TRUE(SetFieldFromString("page", "2", &request).ok());
  EXPECT_TRUE(SetFieldFromString("agent_id", "-5", &request).ok());
  EXPECT_TRUE(SetFieldFromString("client_id", "9223372036854775807", &request).ok());
  EXPECT_TRUE(SetFieldFromString("tag", "a b/é", &request).ok());
  EXPECT_TRUE(SetFieldFromString("unknown", "x", &request).ok());
  EXPECT_TRUE(SetFieldFromString("tag.deeper", "x", &request).ok());
  ExpectEqualMessages(FromText<v1::ListCallsRequest>(R"pb(page: 2
                                                          agent_id: -5
                                                          client_id: 9223372036854775807
                                                          tag: "a b/\303\251")pb"),
                      request, "list params");

  struct Case {
    std::string name, value, detail;
    int http;
  };
  for (const auto& c : std::vector<Case>{
           {"page", "abc", "page: must be an integer", 422},
           {"page", "1.5", "page: must be an integer", 422},
           {"page", "", "page: must be an integer", 422},
           {"page", "2147483648", "page: out of range", 422},
           {"agent_id", "99999999999999999999", "agent_id: out of range", 422},
           {"tag", "\xff", "tag: must be valid UTF-8", 400},
       }) {
    absl::Status status = SetFieldFromString(c.name, c.value, &request);
    EXPECT_EQ(HttpStatusFor(status), c.http) << c.name << "=" << c.value;
    EXPECT_EQ(OnlyDetail(status), c.detail) << c.name << "=" << c.value;
  }
}

TEST(SetFieldFromStringTest, DottedPathsAndBookkeeping) {
  v1::UpdateCallRequest request;
  EXPECT_TRUE(SetFieldFromString("update.nope", "x", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.null_fields", "label", &request).ok());
  EXPECT_FALSE(request.has_update()) << "unknown names create nothing";
  EXPECT_TRUE(SetFieldFromString("call_identifier_or_id", "42", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.label", "x", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.label", "y", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.nope", "x", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.null_fields", "label", &request).ok());
  EXPECT_TRUE(SetFieldFromString("update.set_fields", "tag", &request).ok());
  ExpectEqualMessages(FromText<v1::UpdateCallRequest>(
                          R"pb(call_identifier_or_id: "42"
                               update { label: "y" set_fields: "label" })pb"),
                      request, "update params");

  absl::Status status = SetFieldFromString("update.metadata", "x", &request);
  EXPECT_EQ(HttpStatusFor(status), 422);
  EXPECT_EQ(OnlyDetail(status), "update.metadata: cannot be set from a path or query parameter");
  EXPECT_EQ(HttpStatusFor(SetFieldFromString("update", "x", &request)), 422);
}

TEST(SetFieldFromStringTest, AllTypes) {
  auto m = NewAllTypes();
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"b", "true"},
                                                        {"b", "TRUE"},
                                                        {"b", "0"},
                                                        {"dbl", "1.5"},
                                                        {"flt", "-2"},
                                                        {"u64", "18446744073709551615"},
                                                        {"color", "GREEN"},
                                                        {"colors", "RED"},
                                                        {"colors", "2"},
                                                        {"byt", "aGk="},
                                                        {"child.i32", "7"},
                                                        {"opt_i32", "0"}}) {
    EXPECT_TRUE(SetFieldFromString(name, value, m.get()).ok()) << name << "=" << value;
  }
  auto expected = NewAllTypes();
  ASSERT_TRUE(TextFormat::ParseFromString(
      R"pb(b: false
           dbl: 1.5
           flt: -2
           u64: 18446744073709551615
           color: GREEN
           colors: [ RED, GREEN ]
           byt: "hi"
           child { i32: 7 set_fields: "i32" }
           opt_i32: 0
           set_fields: [ "b", "dbl", "flt", "u64", "color", "colors", "byt", "opt_i32" ])pb",
      expected.get()));
  ExpectEqualMessages(*expected, *m, "all types params");

  struct Case {
    std::string name, value, detail;
  };
  for (const auto& c : std::vector<Case>{
           {"b", "yes", "b: must be true or false"},
           {"dbl", "inf", "dbl: must be a finite number"},
           {"dbl", "nan", "dbl: must be a finite number"},
           {"dbl", "1,5", "dbl: must be a number"},
           {"flt", "1e39", "flt: out of range"},
           {"u32", "-1", "u32: out of range"},
           {"u64", "18446744073709551616", "u64: out of range"},
           {"color", "BLUE", "color: must be one of COLOR_UNSPECIFIED, RED, GREEN"},
           {"color", "9", "color: must be one of COLOR_UNSPECIFIED, RED, GREEN"},
           {"counts", "x", "counts: cannot be set from a path or query parameter"},
       }) {
    absl::Status status = SetFieldFromString(c.name, c.value, m.get());
    EXPECT_EQ(HttpStatusFor(status), 422) << c.name << "=" << c.value;
    EXPECT_EQ(OnlyDetail(status), c.detail) << c.name << "=" << c.value;
  }
}

}  // namespace
}  // namespace calleval::edge

namespace calleval::edge {
namespace {

TEST(JsonCodecLimitsTest, TooManyValuesIs413BeforeBuildingThem) {
  std::string body = "{\"metric_ids\": [";
  for (int i = 0; i < 1000; ++i) body += i ? ",1" : "1";
  body += "]}";
  calleval::v1::IngestCallRequest request;
  JsonParseOptions options;
  options.max_values = 500;
  absl::Status status = ParseJsonBody(body, &request, options);
  EXPECT_EQ(HttpStatusFor(status), 413);
  EXPECT_EQ(ErrorInfoOf(status).code(), "body_too_large");
  options.max_values = 2000;
  EXPECT_TRUE(ParseJsonBody(body, &request, options).ok());
  EXPECT_EQ(request.metric_ids_size(), 1000);
}

}  // namespace
}  // namespace calleval::edge
