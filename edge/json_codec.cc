#include "edge/json_codec.h"

// Parsing (JSON -> message), docs/api.md §1: see the header. Decisions beyond it:
//  - integer fields accept numbers with a zero fraction (5.0, 1e2) and reject strings ("5");
//    numbers that do not fit the field, including 1e400 anywhere in the body, are 422;
//  - duplicate object keys make the body ambiguous and are rejected as malformed (400);
//  - a google.protobuf.Value field sent as null is set to NULL_VALUE (and recorded in
//    null_fields); every other field sent as null stays unset;
//  - null_fields / set_fields are filled in every message that declares them, with that
//    message's own keys; SetFieldFromString records the fields it sets in set_fields too;
//  - all type errors of a body are reported (up to 50 details), the first in the message.
// Printing is in edge/json_print.cc.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "calleval/v1/common.pb.h"
#include "common/errors.h"
#include "edge/json_codec_internal.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::edge {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::EnumDescriptor;
using ::google::protobuf::EnumValueDescriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::ListValue;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using Json = ::nlohmann::json;

// Bounds the size of an error answer for bodies with thousands of bad elements.
constexpr size_t kMaxIssues = 50;

// ---------------------------------------------------------------------------------------------
// Descriptor helpers.

using json_internal::BookkeepingField;
using json_internal::IsBookkeepingField;
using json_internal::kNullFields;
using json_internal::kSetFields;
using json_internal::Utf8SequenceLength;
using json_internal::WellKnown;
using json_internal::WellKnownOf;

bool IsValueField(const FieldDescriptor* f) {
  return f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
         WellKnownOf(f->message_type()) == WellKnown::kValue;
}

// The public interface takes std::string_view; Debian's Abseil has its own string_view type.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string_view TrimAsciiWhitespace(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) {
    s.remove_prefix(1);
  }
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) {
    s.remove_suffix(1);
  }
  return s;
}

std::string JoinPath(const std::string& parent, std::string_view name) {
  if (parent.empty()) return std::string(name);
  return absl::StrCat(parent, ".", AV(name));
}

std::string IndexPath(const std::string& parent, size_t index) {
  return absl::StrCat(parent, "[", index, "]");
}

std::string EnumNames(const EnumDescriptor* e) {
  std::vector<std::string> names;
  names.reserve(e->value_count());
  for (int i = 0; i < e->value_count(); ++i) names.push_back(e->value(i)->name());
  return absl::StrJoin(names, ", ");
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    size_t n = Utf8SequenceLength(p, end);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Parsing, stage 1: bytes -> DOM.
//
// A SAX handler builds the DOM so that nesting deeper than max_depth stops the (iterative)
// parser before anything deep is allocated, duplicate keys are caught, and a number too large
// for a double can be reported with the path where it occurred.

class DomBuilder {
 public:
  enum class Failure { kNone, kSyntax, kDepth, kDuplicateKey, kNumberOverflow, kTooManyValues };

  DomBuilder(int max_depth, size_t max_values) : max_depth_(max_depth), max_values_(max_values) {}

  bool null() { return Place(Json(nullptr)); }
  bool boolean(bool v) { return Place(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Place(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Place(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t& token) {
    // An integer literal just below INT64_MIN overflows to a double that rounds to exactly
    // -2^63 and would pass as INT64_MIN; move it one step further so it reads as out of range.
    if (v == -9223372036854775808.0 && token.find_first_of(".eE") == std::string::npos &&
        token != "-9223372036854775808") {
      v = std::nextafter(v, -std::numeric_limits<double>::infinity());
    }
    return Place(Json(v));
  }
  bool string(Json::string_t& v) { return Place(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return Fail(Failure::kSyntax, "binary values are not JSON"); }

  bool start_object(size_t) { return Open(Json::value_t::object); }
  bool start_array(size_t) { return Open(Json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(Json::string_t& k) {
    Level& level = levels_.back();
    level.key = k;
    if (level.container->contains(k)) {
      duplicate_key_ = std::move(k);
      return Fail(Failure::kDuplicateKey, "");
    }
    level.slot = &(*level.container)[std::move(k)];
    return true;
  }

  bool parse_error(size_t, const std::string&, const Json::exception& e) {
    return Fail(e.id == 406 ? Failure::kNumberOverflow : Failure::kSyntax, e.what());
  }

  Json& root() { return root_; }
  Failure failure() const { return failure_; }
  const std::string& message() const { return message_; }
  const std::string& duplicate_key() const { return duplicate_key_; }

  // Path of the value being parsed when the parser stopped ("transcript[2].start_time").
  std::string CurrentPath() const {
    std::string path;
    for (size_t i = 0; i < levels_.size(); ++i) {
      const Level& level = levels_[i];
      if (level.container->is_array()) {
        size_t index = level.container->size();
        if (i + 1 < levels_.size() && index > 0) --index;  // the child was already appended
        absl::StrAppend(&path, "[", index, "]");
      } else if (path.empty()) {
        path = level.key;
      } else {
        absl::StrAppend(&path, ".", level.key);
      }
    }
    return path;
  }

 private:
  struct Level {
    Json* container;
    Json* slot = nullptr;  // object member whose value comes next
    std::string key;
  };

  bool Fail(Failure failure, std::string message) {
    failure_ = failure;
    message_ = std::move(message);
    return false;
  }

  Json* PlaceRef(Json&& v) {
    if (levels_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Level& level = levels_.back();
    if (level.container->is_array()) {
      level.container->push_back(std::move(v));
      return &level.container->back();
    }
    *level.slot = std::move(v);
    return level.slot;
  }

  // Every value costs a DOM node many times its size in the body; a body of millions of tiny
  // values ("[0,0,0,...]") would otherwise cost gigabytes before any field rule applies.
  bool Count() {
    if (++values_ <= max_values_) return true;
    return Fail(Failure::kTooManyValues, absl::StrCat("more than ", max_values_, " JSON values"));
  }

  bool Place(Json&& v) {
    if (!Count()) return false;
    PlaceRef(std::move(v));
    return true;
  }

  bool Open(Json::value_t type) {
    if (!Count()) return false;
    if (static_cast<int>(levels_.size()) >= max_depth_) {
      return Fail(Failure::kDepth, absl::StrCat("nesting deeper than ", max_depth_, " levels"));
    }
    levels_.push_back(Level{PlaceRef(Json(type)), nullptr, {}});
    return true;
  }

  bool Close() {
    levels_.pop_back();
    return true;
  }

  const int max_depth_;
  const size_t max_values_;
  size_t values_ = 0;
  Json root_;
  std::vector<Level> levels_;
  Failure failure_ = Failure::kNone;
  std::string message_;
  std::string duplicate_key_;
};

// nlohmann's messages quote the offending input, which may hold invalid UTF-8 or control
// bytes; keep them printable and short.
std::string SanitizeParserMessage(std::string_view what) {
  if (size_t pos = what.find("] "); pos != std::string_view::npos && what.front() == '[') {
    what.remove_prefix(pos + 2);
  }
  std::string out;
  for (char c : what.substr(0, 200)) {
    unsigned char u = static_cast<unsigned char>(c);
    out.push_back(u >= 0x20 && u < 0x7F ? c : '?');
  }
  return out;
}

absl::Status Malformed(absl::string_view message) {
  return HttpError(400, "malformed_json", message);
}

// ---------------------------------------------------------------------------------------------
// Parsing, stage 2: DOM -> message.

// Number conversions. A JSON number with a zero fraction (5.0, 1e3) is accepted for integer
// fields: JSON does not distinguish the two and some clients serialise every number as a
// double. Strings holding digits ("5") are rejected: integers are JSON numbers (docs/api.md §1).
bool JsonToInt64(const Json& v, int64_t* out, const char** issue) {
  switch (v.type()) {
    case Json::value_t::number_integer:
      *out = v.get<int64_t>();
      return true;
    case Json::value_t::number_unsigned: {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        *issue = "out of range";
        return false;
      }
      *out = static_cast<int64_t>(u);
      return true;
    }
    case Json::value_t::number_float: {
      double d = v.get<double>();
      if (std::trunc(d) != d) {
        *issue = "must be an integer";
        return false;
      }
      // 2^63 is exactly representable; anything at or above it does not fit.
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
        *issue = "out of range";
        return false;
      }
      *out = static_cast<int64_t>(d);
      return true;
    }
    default:
      *issue = "must be an integer";
      return false;
  }
}

bool JsonToUint64(const Json& v, uint64_t* out, const char** issue) {
  switch (v.type()) {
    case Json::value_t::number_integer: {
      int64_t i = v.get<int64_t>();
      if (i < 0) {
        *issue = "out of range";
        return false;
      }
      *out = static_cast<uint64_t>(i);
      return true;
    }
    case Json::value_t::number_unsigned:
      *out = v.get<uint64_t>();
      return true;
    case Json::value_t::number_float: {
      double d = v.get<double>();
      if (std::trunc(d) != d) {
        *issue = "must be an integer";
        return false;
      }
      if (!(d >= 0 && d < 18446744073709551616.0)) {
        *issue = "out of range";
        return false;
      }
      *out = static_cast<uint64_t>(d);
      return true;
    }
    default:
      *issue = "must be an integer";
      return false;
  }
}

bool JsonToDouble(const Json& v, double* out, const char** issue) {
  if (!v.is_number()) {
    *issue = "must be a number";
    return false;
  }
  *out = v.get<double>();
  if (!std::isfinite(*out)) {
    *issue = "out of range";
    return false;
  }
  return true;
}

// Text forms, for path/query parameters and map keys.
bool TextToInt64(std::string_view text, int64_t* out, const char** issue) {
  text = TrimAsciiWhitespace(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec == std::errc::result_out_of_range && ptr == text.data() + text.size()) {
    *issue = "out of range";
    return false;
  }
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    *issue = "must be an integer";
    return false;
  }
  return true;
}

bool TextToUint64(std::string_view text, uint64_t* out, const char** issue) {
  text = TrimAsciiWhitespace(text);
  if (!text.empty() && text.front() == '-') {
    int64_t negative;
    if (TextToInt64(text, &negative, issue)) *issue = "out of range";
    return false;
  }
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec == std::errc::result_out_of_range && ptr == text.data() + text.size()) {
    *issue = "out of range";
    return false;
  }
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    *issue = "must be an integer";
    return false;
  }
  return true;
}

bool TextToDouble(std::string_view text, double* out, const char** issue) {
  if (!absl::SimpleAtod(AV(text), out)) {
    *issue = "must be a number";
    return false;
  }
  if (!std::isfinite(*out)) {
    // "inf" and "nan" parse, but they are not numbers a JSON API can hand back.
    *issue = "must be a finite number";
    return false;
  }
  return true;
}

bool TextToBool(std::string_view text, bool* out, const char** issue) {
  text = TrimAsciiWhitespace(text);
  if (absl::EqualsIgnoreCase(AV(text), "true") || text == "1") {
    *out = true;
  } else if (absl::EqualsIgnoreCase(AV(text), "false") || text == "0") {
    *out = false;
  } else {
    *issue = "must be true or false";
    return false;
  }
  return true;
}

// A scalar value on its way into a field; the JSON and text paths both end up here.
struct Scalar {
  enum Kind { kInt, kUint, kDouble, kBool, kString } kind;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  std::string s;
};

// Range checks for the narrower integer and float types.
bool FitsField(const FieldDescriptor* f, const Scalar& v, const char** issue) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      if (v.i < std::numeric_limits<int32_t>::min() || v.i > std::numeric_limits<int32_t>::max()) {
        *issue = "out of range";
        return false;
      }
      return true;
    case FieldDescriptor::CPPTYPE_UINT32:
      if (v.u > std::numeric_limits<uint32_t>::max()) {
        *issue = "out of range";
        return false;
      }
      return true;
    case FieldDescriptor::CPPTYPE_FLOAT:
      if (std::fabs(v.d) > std::numeric_limits<float>::max()) {
        *issue = "out of range";
        return false;
      }
      return true;
    default:
      return true;
  }
}

// Stores `v` into field `f` (appending when repeated). `v.kind` matches the field's type.
void StoreScalar(const FieldDescriptor* f, const Scalar& v, Message* m) {
  const Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      rep ? r->AddInt32(m, f, static_cast<int32_t>(v.i))
          : r->SetInt32(m, f, static_cast<int32_t>(v.i));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, v.i) : r->SetInt64(m, f, v.i);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      rep ? r->AddUInt32(m, f, static_cast<uint32_t>(v.u))
          : r->SetUInt32(m, f, static_cast<uint32_t>(v.u));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, v.u) : r->SetUInt64(m, f, v.u);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      rep ? r->AddDouble(m, f, v.d) : r->SetDouble(m, f, v.d);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r->AddFloat(m, f, static_cast<float>(v.d)) : r->SetFloat(m, f, static_cast<float>(v.d));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      rep ? r->AddBool(m, f, v.b) : r->SetBool(m, f, v.b);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      rep ? r->AddEnumValue(m, f, static_cast<int>(v.i))
          : r->SetEnumValue(m, f, static_cast<int>(v.i));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(m, f, v.s) : r->SetString(m, f, v.s);
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

// Enum by name, or by number when it names a declared value.
bool EnumFromName(const FieldDescriptor* f, std::string_view name, Scalar* out,
                  std::string* issue) {
  const EnumValueDescriptor* ev = f->enum_type()->FindValueByName(std::string(name));
  if (ev == nullptr) {
    *issue = absl::StrCat("must be one of ", EnumNames(f->enum_type()));
    return false;
  }
  out->i = ev->number();
  return true;
}

bool EnumFromNumber(const FieldDescriptor* f, int64_t number, Scalar* out, std::string* issue) {
  if (number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max() ||
      f->enum_type()->FindValueByNumber(static_cast<int>(number)) == nullptr) {
    *issue = absl::StrCat("must be one of ", EnumNames(f->enum_type()));
    return false;
  }
  out->i = number;
  return true;
}

// Converts the text form of a scalar field (parameters, map keys).
bool ScalarFromText(const FieldDescriptor* f, std::string_view text, Scalar* out,
                    std::string* issue) {
  const char* msg = nullptr;
  bool ok = true;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      out->kind = Scalar::kInt;
      ok = TextToInt64(text, &out->i, &msg) && FitsField(f, *out, &msg);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      out->kind = Scalar::kUint;
      ok = TextToUint64(text, &out->u, &msg) && FitsField(f, *out, &msg);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      out->kind = Scalar::kDouble;
      ok = TextToDouble(text, &out->d, &msg) && FitsField(f, *out, &msg);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->kind = Scalar::kBool;
      ok = TextToBool(text, &out->b, &msg);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      out->kind = Scalar::kInt;
      int64_t number;
      const char* ignored;
      if (TextToInt64(text, &number, &ignored)) return EnumFromNumber(f, number, out, issue);
      return EnumFromName(f, text, out, issue);
    }
    case FieldDescriptor::CPPTYPE_STRING:
      out->kind = Scalar::kString;
      if (f->type() == FieldDescriptor::TYPE_BYTES) {
        if (!absl::Base64Unescape(AV(text), &out->s) &&
            !absl::WebSafeBase64Unescape(AV(text), &out->s)) {
          msg = "must be base64";
          ok = false;
        }
      } else {
        out->s = std::string(text);
      }
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      msg = "cannot be given as text";
      ok = false;
      break;
  }
  if (!ok) *issue = msg;
  return ok;
}

class BodyParser {
 public:
  const std::vector<FieldIssue>& issues() const { return issues_; }
  size_t total_issues() const { return total_issues_; }

  // `v` is the JSON for a message of `m`'s type (an object, or anything for Value).
  void ParseMessage(const Json& v, Message* m, const std::string& path) {
    if (Full()) return;
    switch (WellKnownOf(m->GetDescriptor())) {
      case WellKnown::kStruct:
        if (!v.is_object()) return Issue(path, "must be an object");
        return WithGenerated<Struct>(m, [&](Struct* s) { FillStruct(v, s); });
      case WellKnown::kListValue:
        if (!v.is_array()) return Issue(path, "must be an array");
        return WithGenerated<ListValue>(m, [&](ListValue* l) { FillList(v, l); });
      case WellKnown::kValue:
        return WithGenerated<Value>(m, [&](Value* out) { FillValue(v, out); });
      case WellKnown::kEmpty:
        if (!v.is_object()) return Issue(path, "must be an object");
        return;
      case WellKnown::kNone:
        break;
    }
    if (!v.is_object()) return Issue(path, "must be an object");
    ParseFields(v, m, path);
  }

 private:
  bool Full() const { return issues_.size() >= kMaxIssues; }

  void Issue(const std::string& path, std::string issue) {
    ++total_issues_;
    if (Full()) return;
    std::optional<std::string> field;
    if (!path.empty()) field = path;
    issues_.push_back(FieldIssue{std::move(field), std::move(issue)});
  }

  // Fills `m` through the generated class when it is one (the usual case), or through a
  // generated temporary copied in by serialization (messages from a dynamic pool).
  template <typename T, typename Fill>
  static void WithGenerated(Message* m, Fill fill) {
    if (T* generated = google::protobuf::DynamicCastToGenerated<T>(m)) {
      fill(generated);
      return;
    }
    T tmp;
    fill(&tmp);
    m->ParseFromString(tmp.SerializeAsString());
  }

  static void FillValue(const Json& v, Value* out) {
    switch (v.type()) {
      case Json::value_t::null:
        out->set_null_value(google::protobuf::NULL_VALUE);
        break;
      case Json::value_t::boolean:
        out->set_bool_value(v.get<bool>());
        break;
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned:
      case Json::value_t::number_float:
        out->set_number_value(v.get<double>());
        break;
      case Json::value_t::string:
        out->set_string_value(v.get_ref<const std::string&>());
        break;
      case Json::value_t::array:
        FillList(v, out->mutable_list_value());
        break;
      case Json::value_t::object:
        FillStruct(v, out->mutable_struct_value());
        break;
      default:
        out->set_null_value(google::protobuf::NULL_VALUE);
        break;
    }
  }

  static void FillStruct(const Json& v, Struct* out) {
    auto* fields = out->mutable_fields();
    for (const auto& [key, item] : v.items()) FillValue(item, &(*fields)[key]);
  }

  static void FillList(const Json& v, ListValue* out) {
    out->mutable_values()->Reserve(static_cast<int>(v.size()));
    for (const Json& item : v) FillValue(item, out->add_values());
  }

  void ParseFields(const Json& obj, Message* m, const std::string& path) {
    const Descriptor* d = m->GetDescriptor();
    const Reflection* r = m->GetReflection();
    const FieldDescriptor* null_fields = BookkeepingField(d, kNullFields);
    const FieldDescriptor* set_fields = BookkeepingField(d, kSetFields);
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (IsBookkeepingField(f)) continue;
      auto it = obj.find(f->name());
      if (it == obj.end()) continue;
      const Json& v = *it;
      const std::string field_path = JoinPath(path, f->name());
      if (v.is_null()) {
        // A Value field holds JSON null itself; everything else stays unset.
        if (!f->is_repeated() && IsValueField(f)) {
          ParseMessage(v, r->MutableMessage(m, f), field_path);
        }
        if (null_fields != nullptr) r->AddString(m, null_fields, f->name());
        continue;
      }
      if (const auto* oneof = f->real_containing_oneof();
          oneof != nullptr && r->HasOneof(*m, oneof)) {
        Issue(field_path,
              absl::StrCat("conflicts with ", r->GetOneofFieldDescriptor(*m, oneof)->name()));
        continue;
      }
      if (f->is_map()) {
        ParseMap(v, m, f, field_path);
      } else if (f->is_repeated()) {
        ParseRepeated(v, m, f, field_path);
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        ParseMessage(v, r->MutableMessage(m, f), field_path);
      } else {
        ParseScalar(v, m, f, field_path);
      }
      if (set_fields != nullptr) r->AddString(m, set_fields, f->name());
    }
  }

  void ParseRepeated(const Json& v, Message* m, const FieldDescriptor* f, const std::string& path) {
    if (!v.is_array()) return Issue(path, "must be an array");
    const Reflection* r = m->GetReflection();
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    const bool nulls_allowed = IsValueField(f);
    for (size_t i = 0; i < v.size() && !Full(); ++i) {
      const Json& item = v[i];
      if (item.is_null() && !nulls_allowed) {
        Issue(IndexPath(path, i), "must not be null");
        continue;
      }
      if (is_message) {
        ParseMessage(item, r->AddMessage(m, f), IndexPath(path, i));
      } else {
        ParseScalar(item, m, f, IndexPath(path, i));
      }
    }
  }

  void ParseMap(const Json& v, Message* m, const FieldDescriptor* f, const std::string& path) {
    if (!v.is_object()) return Issue(path, "must be an object");
    const Reflection* r = m->GetReflection();
    const FieldDescriptor* key_field = f->message_type()->map_key();
    const FieldDescriptor* value_field = f->message_type()->map_value();
    for (const auto& [key, item] : v.items()) {
      if (Full()) return;
      const std::string item_path = JoinPath(path, key);
      Scalar k;
      std::string issue;
      if (!ScalarFromText(key_field, key, &k, &issue)) {
        Issue(item_path, absl::StrCat("key ", issue));
        continue;
      }
      if (item.is_null() && !IsValueField(value_field)) {
        Issue(item_path, "must not be null");
        continue;
      }
      Message* entry = r->AddMessage(m, f);
      StoreScalar(key_field, k, entry);
      if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        ParseMessage(item, entry->GetReflection()->MutableMessage(entry, value_field), item_path);
      } else {
        ParseScalar(item, entry, value_field, item_path);
      }
    }
  }

  void ParseScalar(const Json& v, Message* m, const FieldDescriptor* f, const std::string& path) {
    Scalar s;
    const char* msg = nullptr;
    bool ok = true;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
        s.kind = Scalar::kInt;
        ok = JsonToInt64(v, &s.i, &msg) && FitsField(f, s, &msg);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        s.kind = Scalar::kUint;
        ok = JsonToUint64(v, &s.u, &msg) && FitsField(f, s, &msg);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        s.kind = Scalar::kDouble;
        ok = JsonToDouble(v, &s.d, &msg) && FitsField(f, s, &msg);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        s.kind = Scalar::kBool;
        if (v.is_boolean()) {
          s.b = v.get<bool>();
        } else {
          msg = "must be a boolean";
          ok = false;
        }
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        s.kind = Scalar::kInt;
        std::string issue;
        int64_t number;
        if (v.is_string()) {
          ok = EnumFromName(f, v.get_ref<const std::string&>(), &s, &issue);
        } else if (JsonToInt64(v, &number, &msg)) {
          ok = EnumFromNumber(f, number, &s, &issue);
        } else {
          ok = false;
          issue = absl::StrCat("must be one of ", EnumNames(f->enum_type()));
        }
        if (!ok) return Issue(path, std::move(issue));
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        s.kind = Scalar::kString;
        if (!v.is_string()) {
          msg = "must be a string";
          ok = false;
        } else if (f->type() == FieldDescriptor::TYPE_BYTES) {
          const std::string& text = v.get_ref<const std::string&>();
          if (!absl::Base64Unescape(text, &s.s) && !absl::WebSafeBase64Unescape(text, &s.s)) {
            msg = "must be base64";
            ok = false;
          }
        } else {
          // nlohmann's lexer has already rejected invalid UTF-8 and lone surrogates.
          s.s = v.get_ref<const std::string&>();
        }
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return;
    }
    if (!ok) return Issue(path, msg);
    StoreScalar(f, s, m);
  }

  std::vector<FieldIssue> issues_;
  size_t total_issues_ = 0;
};

}  // namespace

absl::Status ParseJsonBody(std::string_view body, google::protobuf::Message* message,
                           const JsonParseOptions& options) {
  message->Clear();
  // nlohmann treats a NUL byte as the end of the input; valid JSON never holds a raw one.
  if (size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return Malformed(absl::StrCat("malformed JSON: NUL byte at offset ", nul));
  }
  DomBuilder builder(std::max(1, options.max_depth), options.max_values);
  try {
    Json::sax_parse(body.data(), body.data() + body.size(), &builder);
  } catch (const std::exception& e) {
    // The SAX interface reports errors through parse_error(); this only guards against
    // anything else the library may throw.
    return Malformed(absl::StrCat("malformed JSON: ", SanitizeParserMessage(e.what())));
  }
  switch (builder.failure()) {
    case DomBuilder::Failure::kNone:
      break;
    case DomBuilder::Failure::kDepth:
      return Malformed(absl::StrCat("malformed JSON: ", builder.message()));
    case DomBuilder::Failure::kDuplicateKey: {
      std::string key = builder.duplicate_key();
      if (!IsValidUtf8(key)) key = "?";
      return Malformed(absl::StrCat("malformed JSON: duplicate key \"", key.substr(0, 100),
                                    "\" at ", builder.CurrentPath().substr(0, 200)));
    }
    case DomBuilder::Failure::kNumberOverflow: {
      // Well-formed so far but too large for a double: a bad value rather than bad syntax,
      // unless it is the whole body.
      std::string path = builder.CurrentPath();
      if (path.empty()) return Malformed("request body must be a JSON object");
      return ValidationError("invalid_type", absl::StrCat(path, ": out of range"),
                             {{path, "out of range"}});
    }
    case DomBuilder::Failure::kSyntax:
      return Malformed(absl::StrCat("malformed JSON: ", SanitizeParserMessage(builder.message())));
    case DomBuilder::Failure::kTooManyValues:
      return HttpError(413, "body_too_large", absl::StrCat("request body has ", builder.message()));
  }
  const Json& root = builder.root();
  if (!root.is_object()) return Malformed("request body must be a JSON object");

  BodyParser parser;
  parser.ParseMessage(root, message, "");
  if (parser.issues().empty()) return absl::OkStatus();
  const FieldIssue& first = parser.issues().front();
  std::string text = absl::StrCat(first.field.value_or(""), ": ", first.issue);
  if (parser.total_issues() > 1) {
    absl::StrAppend(&text, " (and ", parser.total_issues() - 1, " more)");
  }
  return ValidationError("invalid_type", text, parser.issues());
}

absl::Status SetFieldFromString(std::string_view field_path, std::string_view value,
                                google::protobuf::Message* message) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t dot = field_path.find('.', start);
    parts.push_back(field_path.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // Resolve the whole path before touching the message, so an unknown name creates nothing.
  std::vector<const FieldDescriptor*> fields;
  const Descriptor* d = message->GetDescriptor();
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* f = d->FindFieldByName(std::string(parts[i]));
    if (f == nullptr) return absl::OkStatus();
    fields.push_back(f);
    if (i + 1 == parts.size()) break;
    // Only plain singular message fields can be walked into; anything else names no field.
    if (f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE ||
        WellKnownOf(f->message_type()) != WellKnown::kNone) {
      return absl::OkStatus();
    }
    d = f->message_type();
  }
  const FieldDescriptor* f = fields.back();
  if (IsBookkeepingField(f)) return absl::OkStatus();
  const std::string name(field_path);
  if (f->is_map() || f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return ValidationError("invalid_type",
                           absl::StrCat(name, ": cannot be set from a path or query parameter"),
                           {{name, "cannot be set from a path or query parameter"}});
  }
  if (!IsValidUtf8(value)) {
    return HttpError(400, "invalid_utf8", absl::StrCat(name, ": not valid UTF-8"),
                     {{name, "must be valid UTF-8"}});
  }
  Scalar s;
  std::string issue;
  if (!ScalarFromText(f, value, &s, &issue)) {
    return ValidationError("invalid_type", absl::StrCat(name, ": ", issue), {{name, issue}});
  }
  Message* m = message;
  for (size_t i = 0; i + 1 < fields.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, fields[i]);
  }
  StoreScalar(f, s, m);
  if (const FieldDescriptor* set_fields = BookkeepingField(m->GetDescriptor(), kSetFields)) {
    const Reflection* r = m->GetReflection();
    bool recorded = false;
    for (int i = 0; i < r->FieldSize(*m, set_fields) && !recorded; ++i) {
      recorded = r->GetRepeatedString(*m, set_fields, i) == f->name();
    }
    if (!recorded) r->AddString(m, set_fields, f->name());
  }
  return absl::OkStatus();
}

}  // namespace calleval::edge
