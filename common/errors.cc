#include "common/errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace calleval {

absl::Status MakeError(absl::StatusCode code, absl::string_view error_code,
                       absl::string_view message, std::vector<FieldIssue> details) {
  absl::Status status(code, message);
  v1::ErrorInfo info;
  info.set_code(std::string(error_code));
  for (auto& d : details) {
    auto* detail = info.add_details();
    if (d.field) detail->set_field(*d.field);
    detail->set_issue(std::move(d.issue));
  }
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(info.SerializeAsString()));
  return status;
}

absl::Status ValidationError(absl::string_view error_code, absl::string_view message,
                             std::vector<FieldIssue> details) {
  return MakeError(absl::StatusCode::kInvalidArgument, error_code, message, std::move(details));
}

absl::Status FieldError(absl::string_view field, absl::string_view issue,
                        absl::string_view error_code) {
  return ValidationError(error_code, absl::StrCat(field, ": ", issue),
                         {{std::string(field), std::string(issue)}});
}

absl::Status NotFoundError(absl::string_view what) {
  return MakeError(absl::StatusCode::kNotFound, "not_found", absl::StrCat(what, " not found"));
}

absl::Status ConflictError(absl::string_view error_code, absl::string_view message,
                           std::vector<FieldIssue> details) {
  return MakeError(absl::StatusCode::kAlreadyExists, error_code, message, std::move(details));
}

absl::Status ForbiddenError(absl::string_view error_code, absl::string_view message) {
  return MakeError(absl::StatusCode::kPermissionDenied, error_code, message);
}

absl::Status UnauthenticatedError(absl::string_view message) {
  return MakeError(absl::StatusCode::kUnauthenticated, "unauthenticated", message);
}

absl::Status InternalError(absl::string_view message) {
  return MakeError(absl::StatusCode::kInternal, "internal", message);
}

absl::Status HttpError(int http_status, absl::string_view error_code, absl::string_view message,
                       std::vector<FieldIssue> details) {
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  switch (http_status) {
    case 401:
      code = absl::StatusCode::kUnauthenticated;
      break;
    case 403:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case 404:
      code = absl::StatusCode::kNotFound;
      break;
    case 413:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case 429:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case 503:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  absl::Status status = MakeError(code, error_code, message, std::move(details));
  v1::ErrorInfo info = ErrorInfoOf(status);
  info.set_http_status(http_status);
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(info.SerializeAsString()));
  return status;
}

absl::string_view DefaultErrorCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return "validation_failed";
    case absl::StatusCode::kFailedPrecondition:
      return "failed_precondition";
    case absl::StatusCode::kNotFound:
      return "not_found";
    case absl::StatusCode::kAlreadyExists:
      return "conflict";
    case absl::StatusCode::kPermissionDenied:
      return "forbidden";
    case absl::StatusCode::kUnauthenticated:
      return "unauthenticated";
    case absl::StatusCode::kResourceExhausted:
      return "rate_limited";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kUnimplemented:
      return "not_implemented";
    default:
      return "internal";
  }
}

v1::ErrorInfo ErrorInfoOf(const absl::Status& status) {
  v1::ErrorInfo info;
  auto payload = status.GetPayload(kErrorInfoTypeUrl);
  if (payload && info.ParseFromString(std::string(*payload))) return info;
  info.Clear();
  info.set_code(std::string(DefaultErrorCode(status.code())));
  return info;
}

int HttpStatusFor(const absl::Status& status) {
  v1::ErrorInfo info = ErrorInfoOf(status);
  if (info.has_http_status()) return info.http_status();
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 422;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

v1::ErrorResponse ToErrorResponse(const absl::Status& status) {
  v1::ErrorResponse response;
  v1::ErrorInfo info = ErrorInfoOf(status);
  auto* error = response.mutable_error();
  error->set_status(HttpStatusFor(status));
  error->set_code(info.code());
  error->set_message(std::string(status.message()));
  for (const auto& d : info.details()) *error->add_details() = d;
  return response;
}

}  // namespace calleval
