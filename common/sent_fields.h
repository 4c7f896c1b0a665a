#pragma once

// Which top-level keys a create or PATCH/PUT body carried, and small text checks the stores'
// validation shares.

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace calleval {

// The edge's JSON codec fills a request's set_fields/null_fields; a gRPC client may instead just
// set the fields, so a field with a value (or a non-empty list) counts as sent too.
class SentKeys {
 public:
  template <typename Fields>
  explicit SentKeys(const Fields& fields)
      : set_(fields.set_fields().begin(), fields.set_fields().end()),
        null_(fields.null_fields().begin(), fields.null_fields().end()) {}

  bool Set(absl::string_view key, bool has_value) const { return has_value || set_.contains(key); }
  bool Null(absl::string_view key) const { return null_.contains(key); }

 private:
  absl::flat_hash_set<std::string> set_;
  absl::flat_hash_set<std::string> null_;
};

// Length in characters (UTF-8 code points), which is what a user counts.
inline size_t CharLength(absl::string_view s) {
  return std::count_if(s.begin(), s.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

inline bool IsBlank(absl::string_view s) { return absl::StripAsciiWhitespace(s).empty(); }

}  // namespace calleval
