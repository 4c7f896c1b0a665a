#pragma once

// RETURN_IF_ERROR / ASSIGN_OR_RETURN, which Debian's Abseil (20220623) does not ship.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CALLEVAL_STATUS_CONCAT_INNER_(a, b) a##b
#define CALLEVAL_STATUS_CONCAT_(a, b) CALLEVAL_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                            \
  do {                                                   \
    ::absl::Status calleval_status_ = (expr);            \
    if (!calleval_status_.ok()) return calleval_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  CALLEVAL_ASSIGN_OR_RETURN_IMPL_(CALLEVAL_STATUS_CONCAT_(calleval_statusor_, __LINE__), lhs, rexpr)

#define CALLEVAL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()
