#include "tests/edge/bad_bodies.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace calleval::testdata {
namespace {

constexpr char kTurn[] = R"({"role":"User","content":"hi","start_time":0.5,"end_time":1.5})";

// Wrong JSON types and out-of-range numbers for each kind of field.
const std::vector<std::string>& WrongForString() {
  static const auto* v = new std::vector<std::string>{
      "1", "-2.5", "true", "false", "{}", "[]", R"(["x"])", R"({"a":"b"})", "0"};
  return *v;
}

const std::vector<std::string>& WrongForInt() {
  static const auto* v = new std::vector<std::string>{R"("5")",
                                                      "true",
                                                      "{}",
                                                      "[]",
                                                      "[5]",
                                                      "1.5",
                                                      "-0.25",
                                                      "1e30",
                                                      "-1e30",
                                                      "9223372036854775808",
                                                      "-9223372036854775809",
                                                      "99999999999999999999999",
                                                      "1e400",
                                                      "-1e400",
                                                      R"("")",
                                                      "18446744073709551616"};
  return *v;
}

const std::vector<std::string>& WrongForDouble() {
  static const auto* v = new std::vector<std::string>{
      R"("0.5")", "true", "false", "{}", "[]", "[1]", "1e400", "-1e400", R"("NaN")", R"("")"};
  return *v;
}

const std::vector<std::string>& WrongForRepeatedInt() {
  static const auto* v = new std::vector<std::string>{"1",
                                                      R"("1,2")",
                                                      "{}",
                                                      "true",
                                                      R"(["1"])",
                                                      "[1.5]",
                                                      "[true]",
                                                      "[null]",
                                                      "[1,null]",
                                                      "[[1]]",
                                                      "[{}]",
                                                      "[1e400]",
                                                      "[9223372036854775808]",
                                                      "[1e19]"};
  return *v;
}

const std::vector<std::string>& WrongForStruct() {
  static const auto* v =
      new std::vector<std::string>{"1", R"("a=b")", "[]", "true", "[{}]", R"({"a":1e400})", "0.5"};
  return *v;
}

const std::vector<std::string>& WrongForTranscript() {
  static const auto* v =
      new std::vector<std::string>{"{}",
                                   R"("User: hi")",
                                   "1",
                                   "true",
                                   "[1]",
                                   "[null]",
                                   R"(["hi"])",
                                   "[[]]",
                                   std::string("[") + kTurn + ",null]",
                                   std::string("[") + kTurn + ",7]",
                                   std::string("[") + kTurn + ",[" + kTurn + "]]"};
  return *v;
}

// {"call_identifier":"c1","agent_id":7,<key>:<value>}
std::string WithField(const std::string& key, const std::string& value) {
  if (key == "call_identifier") return R"({"agent_id":7,"call_identifier":)" + value + "}";
  if (key == "agent_id") return R"({"call_identifier":"c1","agent_id":)" + value + "}";
  return R"({"call_identifier":"c1","agent_id":7,")" + key + "\":" + value + "}";
}

// A body whose only transcript turn has <key>:<value> in place of its own value.
std::string WithTurnField(const std::string& key, const std::string& value) {
  std::string turn =
      R"({"role":"User","content":"hi","start_time":0.5,"end_time":1.5,"data":{"id":"f1"}})";
  const std::string needle = "\"" + key + "\":";
  size_t at = turn.find(needle);
  size_t start = at + needle.size();
  size_t end = start;
  if (turn[start] == '{') {
    end = turn.find('}', start) + 1;
  } else if (turn[start] == '"') {
    end = turn.find('"', start + 1) + 1;
  } else {
    while (turn[end] != ',' && turn[end] != '}') ++end;
  }
  turn.replace(start, end - start, value);
  return R"({"call_identifier":"c1","agent_id":7,"transcript":[)" + std::string(kTurn) + "," +
         turn + "]}";
}

std::string Repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

std::string ValidIngestBody() {
  return R"({"call_identifier":"crm-9931","agent_id":7,"client_id":1,"observation_type":"voice",)"
         R"("recording_url":"https://example.com/r.wav","transcript":[)"
         R"({"role":"AI Assistant","content":"Hello, how can I help?","start_time":0.4,"end_time":3.1},)"
         R"({"role":"User","content":"I need to move my appointment \u00e9","start_time":3.5,"end_time":6},)"
         R"({"role":"Function Call","data":{"id":"f1","name":"move","arguments":{"day":"mon"}}}],)"
         R"("call_direction":"inbound","duration_seconds":312,"call_timestamp":"2026-11-22T10:15:00Z",)"
         R"("call_end_reason":"hangup","customer_number":"+15551234567","tag":"t","label":"l",)"
         R"("metric_ids":[1,2,11],"metadata":{"crm_id":12345,"nested":{"x":[1,null,"y"]}}})";
}

std::vector<std::string> GenerateBadBodies() {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](std::string body) {
    if (seen.insert(body).second) out.push_back(std::move(body));
  };

  // Wrong types for every field of IngestCallRequest.
  for (const char* key : {"call_identifier", "observation_type", "recording_url", "call_direction",
                          "call_timestamp", "call_end_reason", "customer_number", "tag", "label"}) {
    for (const auto& v : WrongForString()) add(WithField(key, v));
  }
  for (const char* key : {"agent_id", "client_id", "duration_seconds"}) {
    for (const auto& v : WrongForInt()) add(WithField(key, v));
  }
  for (const auto& v : WrongForRepeatedInt()) add(WithField("metric_ids", v));
  for (const auto& v : WrongForStruct()) add(WithField("metadata", v));
  for (const auto& v : WrongForTranscript()) add(WithField("transcript", v));

  // Wrong types for every field of Turn.
  for (const char* key : {"role", "content"}) {
    for (const auto& v : WrongForString()) add(WithTurnField(key, v));
  }
  for (const char* key : {"start_time", "end_time"}) {
    for (const auto& v : WrongForDouble()) add(WithTurnField(key, v));
  }
  for (const auto& v : WrongForStruct()) add(WithTurnField("data", v));

  // Every strict prefix of a valid body is malformed; cut it every few bytes.
  const std::string valid = ValidIngestBody();
  for (size_t n = 0; n < valid.size(); n += 5) add(valid.substr(0, n));
  add(valid.substr(0, valid.size() - 1));
  // ... and so is anything glued after it.
  add(valid + "}");
  add(valid + ",");
  add(valid + valid);
  add(valid + " x");
  add(valid + "\n{}");

  // Non-object tops.
  for (const char* body : {"", " ", "\n\t ", "[]", "[{}]", R"("call")", "\"\"", "1", "-1", "3.5",
                           "true", "false", "null", "1e400", R"(["call_identifier"])", "["}) {
    add(body);
  }

  // Deep nesting.
  add(Repeat("[", 10000) + Repeat("]", 10000));
  add(Repeat("{\"a\":", 10000) + "1" + Repeat("}", 10000));
  add(R"({"call_identifier":"c1","agent_id":7,"metadata":)" + Repeat("{\"a\":", 10000) + "1" +
      Repeat("}", 10000) + "}");
  add(R"({"call_identifier":"c1","agent_id":7,"metadata":{"a":)" + Repeat("[", 10000) +
      Repeat("]", 10000) + "}}");
  add(Repeat("[", 100000));

  // Invalid UTF-8 in values and keys: stray continuation, bad lead bytes, overlongs, encoded
  // surrogates, beyond U+10FFFF, truncated sequences.
  for (const char* bad :
       {"\x80", "\xbf", "\xc0\xaf", "\xc1\xbf", "\xc3\x28", "\xe0\x80\xaf", "\xe2\x28\xa1",
        "\xe2\x82", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf0\x28\x8c\xbc", "\xf0\x80\x80\xaf",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xfe", "\xff", "\xff\xfe"}) {
    add(R"({"call_identifier":"c)" + std::string(bad) + R"(","agent_id":7})");
    add(R"({"call_identifier":"c1","agent_id":7,"metadata":{")" + std::string(bad) + R"(":1}})");
  }
  add("\xff{\"call_identifier\":\"c1\",\"agent_id\":7}");

  // Lone and mismatched surrogate escapes.
  for (const char* esc : {"\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud800\\u0041", "\\ud800x",
                          "\\ud800\\ud800", "\\udc00\\ud800"}) {
    add(R"({"call_identifier":"c)" + std::string(esc) + R"(","agent_id":7})");
  }

  // NUL bytes: raw NUL is never valid JSON, wherever it sits.
  const std::string nul(1, '\0');
  add(R"({"call_identifier":"c)" + nul + R"(","agent_id":7})");
  add(nul + "{}");
  add("{}" + nul);
  add(nul);
  add(R"({"call_identifier":"c1","agent_id":7})" + nul + "garbage");
  add(R"({"call_identifier":"c1",)" + nul + R"("agent_id":7})");

  // Very long strings where they do not belong, and unterminated.
  const std::string long_text(1 << 20, 'x');
  add(R"({"call_identifier":"c1","agent_id":")" + long_text + "\"}");
  add(R"({"call_identifier":"c1","agent_id":7,"transcript":[{"role":"User","start_time":")" +
      long_text + "\"}]}");
  add(R"({"call_identifier":")" + long_text);
  add(R"({"call_identifier":"c1","agent_id":)" + std::string(5000, '9') + "}");
  add(R"({"call_identifier":"c1","agent_id":7,"duration_seconds":1)" + std::string(400, '0') + "}");

  // Duplicate keys are ambiguous; the codec rejects them.
  add(R"({"call_identifier":"c1","call_identifier":"c2","agent_id":7})");
  add(R"({"call_identifier":"c1","agent_id":7,"agent_id":8})");
  add(R"({"call_identifier":"c1","agent_id":7,"metadata":{"a":1,"a":2}})");
  add(R"({"call_identifier":"c1","agent_id":7,"transcript":[{"role":"User","role":"AI Assistant"}]})");

  // Assorted syntax errors.
  for (const char* body : {
           R"({"call_identifier":"c1","agent_id":7,})",
           R"({"call_identifier":"c1",,"agent_id":7})",
           R"({'call_identifier':'c1','agent_id':7})",
           R"({call_identifier:"c1",agent_id:7})",
           R"({"call_identifier":"c1" "agent_id":7})",
           R"({"call_identifier":"c1","agent_id":7 // comment
})",
           R"({"call_identifier":"c1",/* c */"agent_id":7})",
           R"({"call_identifier":"c1","agent_id":NaN})",
           R"({"call_identifier":"c1","agent_id":Infinity})",
           R"({"call_identifier":"c1","agent_id":-Infinity})",
           R"({"call_identifier":"c1","agent_id":07})",
           R"({"call_identifier":"c1","agent_id":0x10})",
           R"({"call_identifier":"c1","agent_id":+7})",
           R"({"call_identifier":"c1","agent_id":.5})",
           R"({"call_identifier":"c1","agent_id":7.})",
           R"({"call_identifier":"c1","agent_id":1e})",
           R"({"call_identifier":"c1","agent_id":-})",
           R"({"call_identifier":"c1","agent_id":tru})",
           R"({"call_identifier":"c1","agent_id":nul})",
           R"({"call_identifier":"c1","agent_id":True})",
           R"({"call_identifier":"c1","agent_id":undefined})",
           R"({"call_identifier":"c\x41","agent_id":7})",
           R"({"call_identifier":"c\u12","agent_id":7})",
           R"({"call_identifier":"c\uZZZZ","agent_id":7})",
           R"({"call_identifier":"c\","agent_id":7})",
           R"({"call_identifier":"c1","agent_id":7]})",
           R"({"call_identifier":"c1","agent_id":[7})",
           R"({"call_identifier":"c1","agent_id":7,"transcript":[}})",
           R"({"call_identifier":"c1","agent_id":7,"metric_ids":[1,]})",
           R"({"call_identifier":"c1","agent_id":7,"metric_ids":[,1]})",
           R"({"call_identifier":"c1":"agent_id":7})",
           R"({"call_identifier"="c1","agent_id"=7})",
           R"({"call_identifier"})",
           R"({"call_identifier":})",
           R"({:"c1"})",
           R"({1:"c1"})",
           R"({null:"c1"})",
           "{}}",
           "{{}}",
           "{}{}",
           "}",
           "{",
           "{\"",
       }) {
    add(body);
  }
  // Raw control characters inside strings must be escaped in JSON.
  for (char c : {'\x01', '\x08', '\t', '\n', '\r', '\x1b', '\x1f'}) {
    add(R"({"call_identifier":"c)" + std::string(1, c) + R"(","agent_id":7})");
  }
  return out;
}

}  // namespace calleval::testdata
