#pragma once

// API errors as absl::Status values.
//
// Stores and pure functions report failures as absl::Status with a calleval.v1.ErrorInfo
// payload carrying the machine-readable `code` and field `details` of docs/api.md §1's error body.
// The status code says what the caller should do; HttpStatusFor() maps it onto HTTP:
//
//   kInvalidArgument, kFailedPrecondition -> 422   kNotFound          -> 404
//   kAlreadyExists                        -> 409   kPermissionDenied  -> 403
//   kUnauthenticated                      -> 401   kResourceExhausted -> 429
//   kUnavailable                          -> 503   kDeadlineExceeded  -> 504
//   kUnimplemented                        -> 501   anything else      -> 500
//
// ErrorInfo.http_status overrides the mapping; only the edge sets it (400, 413).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "calleval/v1/common.pb.h"

namespace calleval {

inline constexpr absl::string_view kErrorInfoTypeUrl = "type.googleapis.com/calleval.v1.ErrorInfo";

struct FieldIssue {
  std::optional<std::string> field;
  std::string issue;
};

// Builds a status with an ErrorInfo payload.
absl::Status MakeError(absl::StatusCode code, absl::string_view error_code,
                       absl::string_view message, std::vector<FieldIssue> details = {});

// Shorthands for the common cases.
absl::Status ValidationError(absl::string_view error_code, absl::string_view message,
                             std::vector<FieldIssue> details = {});  // 422
absl::Status FieldError(absl::string_view field, absl::string_view issue,
                        absl::string_view error_code = "validation_failed");  // 422, one detail
absl::Status NotFoundError(absl::string_view what);                           // 404 "not_found"
absl::Status ConflictError(absl::string_view error_code, absl::string_view message,
                           std::vector<FieldIssue> details = {});                      // 409
absl::Status ForbiddenError(absl::string_view error_code, absl::string_view message);  // 403
absl::Status UnauthenticatedError(absl::string_view message);                          // 401
absl::Status InternalError(absl::string_view message);                                 // 500

// An error the edge answers with an explicit HTTP status (400, 413, 404/405 for routing).
absl::Status HttpError(int http_status, absl::string_view error_code, absl::string_view message,
                       std::vector<FieldIssue> details = {});

// The ErrorInfo payload of `status`, or one derived from its code.
calleval::v1::ErrorInfo ErrorInfoOf(const absl::Status& status);
int HttpStatusFor(const absl::Status& status);
// The `code` string used when a status carries no ErrorInfo (e.g. "not_found").
absl::string_view DefaultErrorCode(absl::StatusCode code);

// The full docs/api.md §1 error body for a failed status.
calleval::v1::ErrorResponse ToErrorResponse(const absl::Status& status);

}  // namespace calleval
