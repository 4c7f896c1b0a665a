#pragma once

// What the JSON codec's parser (edge/json_codec.cc) and printer (edge/json_print.cc) share:
// the well-known types they treat specially, the bookkeeping fields, and the UTF-8 check.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "google/protobuf/descriptor.h"

namespace calleval::edge::json_internal {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;

inline constexpr std::string_view kNullFields = "null_fields";
inline constexpr std::string_view kSetFields = "set_fields";

enum class WellKnown { kNone, kStruct, kValue, kListValue, kEmpty };

inline WellKnown WellKnownOf(const Descriptor* d) {
  if (d->file()->name() == "google/protobuf/struct.proto") {
    if (d->full_name() == "google.protobuf.Struct") return WellKnown::kStruct;
    if (d->full_name() == "google.protobuf.Value") return WellKnown::kValue;
    if (d->full_name() == "google.protobuf.ListValue") return WellKnown::kListValue;
  }
  if (d->full_name() == "google.protobuf.Empty") return WellKnown::kEmpty;
  return WellKnown::kNone;
}

// `null_fields` / `set_fields` are filled by the codec only; clients never set them and they
// are never printed.
inline bool IsBookkeepingField(const FieldDescriptor* f) {
  return f->is_repeated() && f->type() == FieldDescriptor::TYPE_STRING &&
         (f->name() == kNullFields || f->name() == kSetFields);
}

inline const FieldDescriptor* BookkeepingField(const Descriptor* d, std::string_view name) {
  const FieldDescriptor* f = d->FindFieldByName(std::string(name));
  return f != nullptr && IsBookkeepingField(f) ? f : nullptr;
}

// Strict UTF-8 check (no overlongs, no surrogates, nothing above U+10FFFF). Returns the length
// of the valid sequence starting at `p`, or 0.
inline size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    return 0;
  }
  return n;
}

}  // namespace calleval::edge::json_internal
