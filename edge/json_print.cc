#include "edge/json_codec.h"

// Printing (message -> JSON), docs/api.md §1: see the header. Decisions beyond it:
//  - double fields print integral values with ".0" (1180.0); Struct/Value numbers print them
//    bare so client JSON such as metadata {"crm_id": 12345} reads back unchanged;
//  - map entries and Struct keys print sorted by key, so equal messages print equal bytes.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "calleval/v1/common.pb.h"
#include "edge/json_codec_internal.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"

namespace calleval::edge {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::EnumValueDescriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::ListValue;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using json_internal::IsBookkeepingField;
using json_internal::Utf8SequenceLength;
using json_internal::WellKnown;
using json_internal::WellKnownOf;

// ---------------------------------------------------------------------------------------------
// Printing.

void AppendQuoted(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    // Copy runs of characters that need no escaping in one go.
    const auto* run = p;
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') ++p;
    out->append(reinterpret_cast<const char*>(run), p - run);
    if (p == end) break;
    const unsigned char c = *p;
    if (c >= 0x80) {
      size_t n = Utf8SequenceLength(p, end);
      if (n == 0) {
        // Strings set by internal code are not validated by protobuf; keep the output valid.
        out->append("\xEF\xBF\xBD");
        ++p;
      } else {
        out->append(reinterpret_cast<const char*>(p), n);
        p += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        out->append("\\u00");
        out->push_back(kHex[c >> 4]);
        out->push_back(kHex[c & 0xF]);
        break;
    }
    ++p;
  }
  out->push_back('"');
}

// Shortest representation that reads back to the same value: fixed notation in the range
// JavaScript uses it (1e-6 <= |x| < 1e21), exponent notation outside. NaN and infinities print
// null. Double fields keep a ".0" on integral values so they always look like one (1180.0);
// Struct/Value numbers stand for arbitrary client JSON and print integral values bare, so
// metadata {"crm_id": 12345} reads back as sent.
template <typename T>
void AppendFloating(T value, bool integral_suffix, std::string* out) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  char buf[64];
  const T magnitude = std::fabs(value);
  const bool fixed = magnitude == 0 || (magnitude >= T(1e-6) && magnitude < T(1e21));
  auto result = std::to_chars(buf, buf + sizeof(buf), value,
                              fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string_view text(buf, result.ptr - buf);
  if (text == "-0") text = "0";
  out->append(text);
  if (integral_suffix && text.find_first_of(".e") == std::string_view::npos) out->append(".0");
}

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, result.ptr - buf);
}

void AppendUint(uint64_t v, std::string* out) {
  char buf[24];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, result.ptr - buf);
}

void AppendValue(const Value& v, std::string* out);

void AppendStruct(const Struct& s, std::string* out) {
  // Map order is unspecified; sort so equal messages print equal bytes.
  std::vector<const google::protobuf::Map<std::string, Value>::value_type*> entries;
  entries.reserve(s.fields().size());
  for (const auto& entry : s.fields()) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  out->push_back('{');
  bool first = true;
  for (const auto* entry : entries) {
    if (!first) out->push_back(',');
    first = false;
    AppendQuoted(entry->first, out);
    out->push_back(':');
    AppendValue(entry->second, out);
  }
  out->push_back('}');
}

void AppendList(const ListValue& l, std::string* out) {
  out->push_back('[');
  for (int i = 0; i < l.values_size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendValue(l.values(i), out);
  }
  out->push_back(']');
}

void AppendValue(const Value& v, std::string* out) {
  switch (v.kind_case()) {
    case Value::kNumberValue:
      AppendFloating(v.number_value(), /*integral_suffix=*/false, out);
      break;
    case Value::kStringValue:
      AppendQuoted(v.string_value(), out);
      break;
    case Value::kBoolValue:
      out->append(v.bool_value() ? "true" : "false");
      break;
    case Value::kStructValue:
      AppendStruct(v.struct_value(), out);
      break;
    case Value::kListValue:
      AppendList(v.list_value(), out);
      break;
    case Value::kNullValue:
    case Value::KIND_NOT_SET:
      out->append("null");
      break;
  }
}

// Calls `print` with the generated form of `m` (copied through the wire format when `m` comes
// from a dynamic pool).
template <typename T, typename Print>
void WithGeneratedConst(const Message& m, Print print) {
  if (const T* generated = google::protobuf::DynamicCastToGenerated<T>(&m)) {
    print(*generated);
    return;
  }
  T tmp;
  tmp.ParseFromString(m.SerializeAsString());
  print(tmp);
}

void AppendMessage(const Message& m, std::string* out);

void AppendScalar(const Message& m, const FieldDescriptor* f, int index, std::string* out) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      AppendInt(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      AppendInt(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      AppendUint(rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      AppendUint(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      AppendFloating(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f), true, out);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      AppendFloating(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f), true, out);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      int number = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
      if (const EnumValueDescriptor* ev = f->enum_type()->FindValueByNumber(number)) {
        AppendQuoted(ev->name(), out);
      } else {
        AppendInt(number, out);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string scratch;
      const std::string& s = rep ? r->GetRepeatedStringReference(m, f, index, &scratch)
                                 : r->GetStringReference(m, f, &scratch);
      if (f->type() == FieldDescriptor::TYPE_BYTES) {
        AppendQuoted(absl::Base64Escape(s), out);
      } else {
        AppendQuoted(s, out);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendMessage(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), out);
      break;
  }
}

void AppendMap(const Message& m, const FieldDescriptor* f, std::string* out) {
  const Reflection* r = m.GetReflection();
  const FieldDescriptor* key_field = f->message_type()->map_key();
  const FieldDescriptor* value_field = f->message_type()->map_value();
  const int size = r->FieldSize(m, f);
  std::vector<std::pair<std::string, const Message*>> entries;
  entries.reserve(size);
  for (int i = 0; i < size; ++i) {
    const Message& entry = r->GetRepeatedMessage(m, f, i);
    const Reflection* er = entry.GetReflection();
    std::string key;
    switch (key_field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        key = er->GetString(entry, key_field);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        key = absl::StrCat(er->GetInt32(entry, key_field));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        key = absl::StrCat(er->GetInt64(entry, key_field));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        key = absl::StrCat(er->GetUInt32(entry, key_field));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        key = absl::StrCat(er->GetUInt64(entry, key_field));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        key = er->GetBool(entry, key_field) ? "true" : "false";
        break;
      default:
        break;
    }
    entries.emplace_back(std::move(key), &entry);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  out->push_back('{');
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendQuoted(entries[i].first, out);
    out->push_back(':');
    AppendScalar(*entries[i].second, value_field, -1, out);
  }
  out->push_back('}');
}

bool OmitEmpty(const FieldDescriptor* f) {
  return f->options().GetExtension(calleval::v1::omit_empty);
}

bool NullWhenEmpty(const FieldDescriptor* f) {
  return f->options().GetExtension(calleval::v1::null_when_empty);
}

// The value of field `f` of `m`: a map as an object, a repeated field as an array, an unset
// field with presence as null.
void AppendFieldValue(const Message& m, const FieldDescriptor* f, std::string* out) {
  const Reflection* r = m.GetReflection();
  if (f->is_map()) {
    AppendMap(m, f, out);
  } else if (f->is_repeated() && r->FieldSize(m, f) == 0 && NullWhenEmpty(f)) {
    out->append("null");
  } else if (f->is_repeated()) {
    out->push_back('[');
    const int size = r->FieldSize(m, f);
    for (int j = 0; j < size; ++j) {
      if (j > 0) out->push_back(',');
      AppendScalar(m, f, j, out);
    }
    out->push_back(']');
  } else if (f->has_presence() && !r->HasField(m, f)) {
    out->append("null");
  } else {
    AppendScalar(m, f, -1, out);
  }
}

void AppendFields(const Message& m, std::string* out) {
  const Descriptor* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  out->push_back('{');
  bool first = true;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (IsBookkeepingField(f)) continue;
    const bool present = f->is_repeated() ? r->FieldSize(m, f) > 0 : r->HasField(m, f);
    if (!present && OmitEmpty(f)) continue;
    if (!first) out->push_back(',');
    first = false;
    AppendQuoted(f->name(), out);
    out->push_back(':');
    AppendFieldValue(m, f, out);
  }
  out->push_back('}');
}

void AppendMessage(const Message& m, std::string* out) {
  switch (WellKnownOf(m.GetDescriptor())) {
    case WellKnown::kStruct:
      return WithGeneratedConst<Struct>(m, [&](const Struct& s) { AppendStruct(s, out); });
    case WellKnown::kValue:
      return WithGeneratedConst<Value>(m, [&](const Value& v) { AppendValue(v, out); });
    case WellKnown::kListValue:
      return WithGeneratedConst<ListValue>(m, [&](const ListValue& l) { AppendList(l, out); });
    case WellKnown::kEmpty:
      out->append("{}");
      return;
    case WellKnown::kNone:
      return AppendFields(m, out);
  }
}

}  // namespace

std::string PrintJson(const google::protobuf::Message& message) {
  std::string out;
  out.reserve(256);
  AppendMessage(message, &out);
  return out;
}

std::string PrintJsonField(const google::protobuf::Message& message,
                           const google::protobuf::FieldDescriptor* field) {
  std::string out;
  AppendFieldValue(message, field, &out);
  return out;
}

}  // namespace calleval::edge
