#pragma once

// Page-numbered listings (docs/api.md §1): 1-based `page`, `per_page` 1..100, and the pagination
// block every listing answers with.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "calleval/v1/common.pb.h"
#include "common/errors.h"

namespace calleval {

inline constexpr int kDefaultPerPage = 25;
inline constexpr int kMaxPerPage = 100;

// 422 validation_failed naming `page` and/or `per_page` when out of range.
inline absl::Status ValidatePagination(int page, int per_page) {
  std::vector<FieldIssue> issues;
  if (page < 1) issues.push_back({"page", "must be at least 1"});
  if (per_page < 1 || per_page > kMaxPerPage) {
    issues.push_back({"per_page", absl::StrCat("must be between 1 and ", kMaxPerPage)});
  }
  if (issues.empty()) return absl::OkStatus();
  return ValidationError("validation_failed", "invalid pagination", std::move(issues));
}

inline void SetPagination(v1::Pagination* pagination, int page, int per_page, int64_t total) {
  pagination->set_current_page(page);
  pagination->set_per_page(per_page);
  pagination->set_total_count(total);
  pagination->set_total_pages(static_cast<int32_t>((total + per_page - 1) / per_page));
}

}  // namespace calleval
