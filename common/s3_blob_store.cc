#include "common/s3_blob_store.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/http_fetch.h"
#include "common/status_macros.h"

namespace calleval {
namespace {

constexpr absl::string_view kDefaultContentType = "application/octet-stream";
// A transfer that moves fewer bytes per second than this for stall_timeout is abandoned.
constexpr long kStallBytesPerSecond = 1024;

struct CurlEasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Percent-encodes all but S3's unreserved characters; '/' is kept in object paths.
std::string UriEncode(absl::string_view text, bool keep_slash) {
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", u);
    }
  }
  return out;
}

// The text of the first <name>...</name> in an S3 XML body (no nesting in what is read here),
// with the five predefined entities decoded. Empty when absent.
std::string XmlElement(absl::string_view xml, absl::string_view name) {
  const std::string open = absl::StrCat("<", name, ">");
  const std::string close = absl::StrCat("</", name, ">");
  const size_t start = xml.find(open);
  if (start == absl::string_view::npos) return "";
  const size_t from = start + open.size();
  const size_t end = xml.find(close, from);
  if (end == absl::string_view::npos) return "";
  absl::string_view raw = xml.substr(from, end - from);
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '&') {
      static constexpr std::pair<absl::string_view, char> kEntities[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool decoded = false;
      for (const auto& [entity, c] : kEntities) {
        if (raw.substr(i, entity.size()) == entity) {
          out.push_back(c);
          i += entity.size() - 1;
          decoded = true;
          break;
        }
      }
      if (decoded) continue;
    }
    out.push_back(raw[i]);
  }
  return out;
}

// What S3's error codes ask of the caller (docs: ErrorResponses). Unknown 4xx codes are a
// request this client should not have sent, or a store configured wrongly: not retryable.
absl::StatusCode CodeFor(long http_status, absl::string_view s3_code) {
  if (s3_code == "NoSuchKey") return absl::StatusCode::kNotFound;
  if (s3_code == "NoSuchBucket") return absl::StatusCode::kFailedPrecondition;
  if (s3_code == "RequestTimeout" || s3_code == "SlowDown" || s3_code == "InternalError" ||
      s3_code == "ServiceUnavailable" || s3_code == "RequestTimeTooSkewed") {
    return absl::StatusCode::kUnavailable;
  }
  if (s3_code == "InvalidRange") return absl::StatusCode::kOutOfRange;
  switch (http_status) {
    case 401:
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 408:
    case 429:
      return absl::StatusCode::kUnavailable;
    case 416:
      return absl::StatusCode::kOutOfRange;
    default:
      return http_status >= 500 ? absl::StatusCode::kUnavailable
                                : absl::StatusCode::kFailedPrecondition;
  }
}

std::string PermissionHint(absl::string_view s3_code) {
  if (s3_code == "SignatureDoesNotMatch") return " (wrong secret access key?)";
  if (s3_code == "InvalidAccessKeyId") return " (unknown access key id)";
  return "";
}

// State shared with libcurl's callbacks for one request.
struct Transfer {
  CURL* curl = nullptr;
  // Upload body: a range of a source, or bytes in memory.
  const BlobSource* source = nullptr;
  int64_t body_offset = 0;
  int64_t body_size = 0;
  int64_t body_sent = 0;
  absl::Status source_error;
  // Download: 2xx bodies go to the sink (when set), anything else to `body`, capped.
  const BlobSink* sink = nullptr;
  absl::Status sink_error;
  bool range_requested = false;
  int64_t skip = -1;  // bytes to drop from a 200 answer to a Range request; -1: not decided
  int64_t want = 0;   // with skip: how many bytes the range asked for (0: to the end)
  std::string body;
  int64_t max_body = 0;
  bool over_cap = false;
  // Deadline accounting (CheckProgress).
  absl::Time start;
  absl::Duration base_timeout;
  int64_t min_bytes_per_second = 1;
  bool timed_out = false;
};

size_t ReadBody(char* out, size_t size, size_t nitems, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const int64_t left = t->body_size - t->body_sent;
  if (left <= 0) return 0;
  const size_t max =
      static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(size * nitems)));
  absl::StatusOr<size_t> n = t->source->read_at(t->body_offset + t->body_sent, out, max);
  if (!n.ok()) {
    t->source_error = n.status();
    return CURL_READFUNC_ABORT;
  }
  if (*n == 0) {
    t->source_error = absl::InternalError("the source ended before its size");
    return CURL_READFUNC_ABORT;
  }
  t->body_sent += static_cast<int64_t>(*n);
  return *n;
}

// libcurl rewinds the body when it must send it again (a redirect, a reused connection that
// turned out closed).
int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(userdata);
  if (origin != SEEK_SET || offset < 0 || offset > t->body_size) return CURL_SEEKFUNC_FAIL;
  t->body_sent = offset;
  return CURL_SEEKFUNC_OK;
}

size_t WriteBody(char* data, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * nmemb;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->sink != nullptr && status >= 200 && status < 300) {
    absl::string_view bytes(data, n);
    if (t->range_requested && status == 200) {
      // A server that ignored the Range header: cut the range out of the whole object.
      const int64_t drop = std::min<int64_t>(t->skip, static_cast<int64_t>(bytes.size()));
      bytes.remove_prefix(static_cast<size_t>(drop));
      t->skip -= drop;
      if (t->want > 0) {
        bytes = bytes.substr(0, static_cast<size_t>(std::min<int64_t>(t->want, bytes.size())));
        t->want -= static_cast<int64_t>(bytes.size());
        if (t->want == 0) t->want = -1;  // done: the rest is dropped
      } else if (t->want < 0) {
        bytes = absl::string_view();
      }
    }
    if (!bytes.empty()) {
      absl::Status sunk = (*t->sink)(bytes);
      if (!sunk.ok()) {
        t->sink_error = std::move(sunk);
        return 0;
      }
    }
    return n;
  }
  if (static_cast<int64_t>(t->body.size() + n) > t->max_body) {
    t->over_cap = true;
    return 0;
  }
  t->body.append(data, n);
  return n;
}

// The total timeout, scaled to the bytes the request moves: the upload's size is known up
// front, a download's once its headers arrive.
int CheckProgress(void* userdata, curl_off_t dltotal, curl_off_t, curl_off_t ultotal, curl_off_t) {
  auto* t = static_cast<Transfer*>(userdata);
  const int64_t bytes = std::max<int64_t>(dltotal, ultotal);
  const absl::Duration allowed =
      t->base_timeout + absl::Seconds(static_cast<double>(bytes) / t->min_bytes_per_second);
  if (absl::Now() - t->start > allowed) {
    t->timed_out = true;
    return 1;
  }
  return 0;
}

std::string FormatSeconds(absl::Duration d) { return absl::StrCat(absl::ToDoubleSeconds(d), " s"); }

}  // namespace

struct S3BlobStore::Request {
  const char* method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string op;              // for messages: "PUT", "UploadPart 2/3"
  std::string key;
  std::string url;
  std::vector<std::string> headers;
  // PUT: bytes [body_offset, body_offset + body_size) of *source. POST: `post_body`.
  const BlobSource* source = nullptr;
  int64_t body_offset = 0;
  int64_t body_size = 0;
  std::string post_body;
  // GET: 2xx bodies go here; `range` is CURLOPT_RANGE ("10-19", "10-").
  const BlobSink* sink = nullptr;
  std::string range;
  int64_t range_offset = 0;
  int64_t range_length = 0;  // 0: to the end
};

struct S3BlobStore::Response {
  long http_status = 0;
  std::string body;
  std::string etag;
  std::string content_type;
  int64_t content_length = -1;
};

S3BlobStore::S3BlobStore(S3Location location, S3Credentials credentials,
                         const BlobStoreOptions& options)
    : location_(std::move(location)),
      credentials_(std::move(credentials)),
      options_(options),
      sigv4_(absl::StrCat("aws:amz:", location_.region, ":s3")) {
  GlobalInitOnce();
}

std::string S3BlobStore::Describe() const {
  return location_.prefix.empty() ? absl::StrCat("s3://", location_.bucket)
                                  : absl::StrCat("s3://", location_.bucket, "/", location_.prefix);
}

std::string S3BlobStore::ObjectUrl(absl::string_view key, absl::string_view query) const {
  const std::string full_key =
      location_.prefix.empty() ? std::string(key) : absl::StrCat(location_.prefix, "/", key);
  std::string url = absl::StrCat(location_.endpoint, "/", location_.bucket, "/",
                                 UriEncode(full_key, /*keep_slash=*/true));
  if (!query.empty()) absl::StrAppend(&url, "?", query);
  return url;
}

int64_t S3BlobStore::PartSizeFor(int64_t size) const {
  const int64_t needed = (size + kMaxParts - 1) / kMaxParts;
  return std::max(options_.part_size, needed);
}

absl::StatusOr<S3BlobStore::Response> S3BlobStore::Perform(const Request& request) const {
  auto failure = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(code, absl::StrCat("blob store ", Describe(), ": ", request.op, " ",
                                           request.key, ": ", what));
  };
  std::unique_ptr<CURL, CurlEasyDeleter> curl(curl_easy_init());
  if (!curl) return failure(absl::StatusCode::kInternal, "could not start libcurl");
  CURL* c = curl.get();

  std::unique_ptr<curl_slist, CurlSlistDeleter> headers;
  auto add_header = [&](const std::string& header) {
    curl_slist* next = curl_slist_append(headers.get(), header.c_str());
    if (next != nullptr) {
      headers.release();
      headers.reset(next);
    }
  };
  // libcurl signs every header given here (and Host, x-amz-date), and signs the payload as
  // the value of this one instead of hashing a body it does not have.
  add_header("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!credentials_.session_token.empty()) {
    add_header(absl::StrCat("x-amz-security-token: ", credentials_.session_token));
  }
  for (const std::string& h : request.headers) add_header(h);

  Transfer t;
  t.curl = c;
  t.source = request.source;
  t.body_offset = request.body_offset;
  t.body_size = request.body_size;
  t.sink = request.sink;
  t.range_requested = !request.range.empty();
  t.skip = request.range_offset;
  t.want = request.range_length;
  t.max_body = options_.max_response_bytes;
  t.start = absl::Now();
  t.base_timeout = options_.request_timeout;
  t.min_bytes_per_second = std::max<int64_t>(1, options_.min_bytes_per_second);
  char error_buffer[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  // The endpoint is configured by the operator; an environment proxy is not wanted for it.
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_USERAGENT, "calleval/1");
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4_.c_str());
  curl_easy_setopt(c, CURLOPT_USERNAME, credentials_.access_key_id.c_str());
  curl_easy_setopt(c, CURLOPT_PASSWORD, credentials_.secret_access_key.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(
      c, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.connect_timeout))));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, kStallBytesPerSecond);
  curl_easy_setopt(
      c, CURLOPT_LOW_SPEED_TIME,
      static_cast<long>(std::max<int64_t>(1, absl::ToInt64Seconds(options_.stall_timeout))));
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &CheckProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &WriteBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer);

  const absl::string_view method = request.method;
  if (method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (method == "PUT") {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body_size));
    curl_easy_setopt(c, CURLOPT_READFUNCTION, &ReadBody);
    curl_easy_setopt(c, CURLOPT_READDATA, &t);
    curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, &SeekBody);
    curl_easy_setopt(c, CURLOPT_SEEKDATA, &t);
  } else if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.post_body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.post_body.size()));
  } else if (method == "DELETE") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  if (!request.range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, request.range.c_str());

  const CURLcode rc = curl_easy_perform(c);
  if (!t.sink_error.ok()) return t.sink_error;
  if (!t.source_error.ok()) return failure(t.source_error.code(), t.source_error.message());
  if (t.timed_out) {
    return failure(absl::StatusCode::kUnavailable,
                   absl::StrCat("timed out after ", FormatSeconds(absl::Now() - t.start),
                                " (endpoint ", location_.endpoint, ")"));
  }
  long http_status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http_status);
  const bool success = http_status >= 200 && http_status < 300;
  // An error answer over the cap is still reported by its status (from what was read of it).
  if (t.over_cap && success) {
    return failure(absl::StatusCode::kFailedPrecondition,
                   absl::StrCat("the answer exceeds ", FormatBytes(options_.max_response_bytes)));
  }
  if (rc != CURLE_OK && !(t.over_cap && rc == CURLE_WRITE_ERROR)) {
    std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(rc);
    if (rc == CURLE_OPERATION_TIMEDOUT && absl::StrContains(detail, "peed")) {
      detail = absl::StrCat("stalled: less than ", kStallBytesPerSecond, " bytes/s for ",
                            FormatSeconds(options_.stall_timeout));
    }
    return failure(absl::StatusCode::kUnavailable,
                   absl::StrCat("endpoint ", location_.endpoint, ": ", detail));
  }

  Response response;
  response.http_status = http_status;
  response.body = std::move(t.body);
  if (!success) {
    const std::string s3_code = XmlElement(response.body, "Code");
    const std::string s3_message = XmlElement(response.body, "Message");
    std::string what = absl::StrCat("HTTP ", response.http_status);
    if (!s3_code.empty()) absl::StrAppend(&what, " ", s3_code);
    if (!s3_message.empty()) absl::StrAppend(&what, ": ", s3_message);
    absl::StrAppend(&what, PermissionHint(s3_code));
    if (s3_code == "NoSuchBucket") absl::StrAppend(&what, " (bucket ", location_.bucket, ")");
    return failure(CodeFor(response.http_status, s3_code), what);
  }
  char* content_type = nullptr;
  curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &content_type);
  if (content_type != nullptr) response.content_type = content_type;
  curl_off_t length = -1;
  curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  response.content_length = length;
  curl_header* etag = nullptr;
  if (curl_easy_header(c, "ETag", 0, CURLH_HEADER, -1, &etag) == CURLHE_OK && etag != nullptr &&
      etag->value != nullptr) {
    response.etag = etag->value;
  }
  return response;
}

absl::Status S3BlobStore::Put(absl::string_view key, const BlobSource& source,
                              absl::string_view content_type) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  const absl::string_view type = content_type.empty() ? kDefaultContentType : content_type;
  if (source.size > options_.multipart_threshold) return PutMultipart(key, source, type);
  return PutSingle(key, source, type);
}

absl::Status S3BlobStore::PutSingle(absl::string_view key, const BlobSource& source,
                                    absl::string_view content_type) {
  Request request;
  request.method = "PUT";
  request.op = "PUT";
  request.key = std::string(key);
  request.url = ObjectUrl(key);
  request.headers.push_back(absl::StrCat("Content-Type: ", content_type));
  request.source = &source;
  request.body_size = source.size;
  return Perform(request).status();
}

absl::Status S3BlobStore::PutMultipart(absl::string_view key, const BlobSource& source,
                                       absl::string_view content_type) {
  Request create;
  create.method = "POST";
  create.op = "CreateMultipartUpload";
  create.key = std::string(key);
  create.url = ObjectUrl(key, "uploads=");
  // The object's content type is set here; the parts carry none.
  create.headers.push_back(absl::StrCat("Content-Type: ", content_type));
  ASSIGN_OR_RETURN(Response created, Perform(create));
  const std::string upload_id = XmlElement(created.body, "UploadId");
  if (upload_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "blob store ", Describe(), ": CreateMultipartUpload ", key, ": no UploadId in the answer"));
  }
  const std::string encoded_id = UriEncode(upload_id, /*keep_slash=*/false);

  auto abort_upload = [&](absl::Status cause) {
    // Best effort: S3 would otherwise keep (and bill) the parts until a lifecycle rule
    // removes them. The cause is what the caller needs to see.
    Request abort;
    abort.method = "DELETE";
    abort.op = "AbortMultipartUpload";
    abort.key = std::string(key);
    abort.url = ObjectUrl(key, absl::StrCat("uploadId=", encoded_id));
    absl::Status aborted = Perform(abort).status();
    if (!aborted.ok()) {
      return absl::Status(
          cause.code(),
          absl::StrCat(cause.message(), " (and the abort failed: ", aborted.message(), ")"));
    }
    return cause;
  };

  const int64_t part_size = PartSizeFor(source.size);
  const int64_t parts = (source.size + part_size - 1) / part_size;
  std::string complete_xml = "<CompleteMultipartUpload>";
  for (int64_t number = 1; number <= parts; ++number) {
    Request part;
    part.method = "PUT";
    part.op = absl::StrCat("UploadPart ", number, "/", parts);
    part.key = std::string(key);
    // Sorted: partNumber before uploadId (see the file comment).
    part.url = ObjectUrl(key, absl::StrCat("partNumber=", number, "&uploadId=", encoded_id));
    part.source = &source;
    part.body_offset = (number - 1) * part_size;
    part.body_size = std::min(part_size, source.size - part.body_offset);
    absl::StatusOr<Response> uploaded = Perform(part);
    if (!uploaded.ok()) return abort_upload(uploaded.status());
    if (uploaded->etag.empty()) {
      return abort_upload(absl::FailedPreconditionError(absl::StrCat(
          "blob store ", Describe(), ": ", part.op, " ", key, ": no ETag in the answer")));
    }
    absl::StrAppend(&complete_xml, "<Part><PartNumber>", number, "</PartNumber><ETag>",
                    uploaded->etag, "</ETag></Part>");
  }
  absl::StrAppend(&complete_xml, "</CompleteMultipartUpload>");

  Request complete;
  complete.method = "POST";
  complete.op = "CompleteMultipartUpload";
  complete.key = std::string(key);
  complete.url = ObjectUrl(key, absl::StrCat("uploadId=", encoded_id));
  complete.headers.push_back("Content-Type: application/xml");
  complete.post_body = std::move(complete_xml);
  absl::StatusOr<Response> completed = Perform(complete);
  if (!completed.ok()) return abort_upload(completed.status());
  // S3 may answer 200 and report the failure in the body (it keeps the connection alive by
  // sending whitespace while it assembles the parts).
  if (absl::StrContains(completed->body, "<Error>")) {
    const std::string s3_code = XmlElement(completed->body, "Code");
    return abort_upload(
        absl::Status(CodeFor(500, s3_code),
                     absl::StrCat("blob store ", Describe(), ": CompleteMultipartUpload ", key,
                                  ": ", s3_code, ": ", XmlElement(completed->body, "Message"))));
  }
  return absl::OkStatus();
}

absl::StatusOr<BlobInfo> S3BlobStore::Stat(absl::string_view key) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  Request request;
  request.method = "HEAD";
  request.op = "HEAD";
  request.key = std::string(key);
  request.url = ObjectUrl(key);
  ASSIGN_OR_RETURN(Response response, Perform(request));
  if (response.content_length < 0) {
    return absl::FailedPreconditionError(absl::StrCat("blob store ", Describe(), ": HEAD ", key,
                                                      ": no Content-Length in the answer"));
  }
  BlobInfo info;
  info.size = response.content_length;
  info.content_type =
      response.content_type.empty() ? std::string(kDefaultContentType) : response.content_type;
  return info;
}

absl::Status S3BlobStore::Read(absl::string_view key, int64_t offset, int64_t length,
                               const BlobSink& sink) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  if (offset < 0 || length < kToEnd) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob store ", Describe(), ": GET ", key, ": negative offset or length"));
  }
  if (length == 0) return Stat(key).status();
  Request request;
  request.method = "GET";
  request.op = "GET";
  request.key = std::string(key);
  request.url = ObjectUrl(key);
  request.sink = &sink;
  // A whole-object read sends no Range: "bytes=0-" is unsatisfiable on an empty object.
  if (offset != 0 || length != kToEnd) {
    request.range = length == kToEnd ? absl::StrCat(offset, "-")
                                     : absl::StrCat(offset, "-", offset + length - 1);
    request.range_offset = offset;
    request.range_length = length == kToEnd ? 0 : length;
  }
  return Perform(request).status();
}

absl::Status S3BlobStore::Delete(absl::string_view key) {
  RETURN_IF_ERROR(CheckBlobKey(key));
  Request request;
  request.method = "DELETE";
  request.op = "DELETE";
  request.key = std::string(key);
  request.url = ObjectUrl(key);
  absl::Status status = Perform(request).status();
  if (absl::IsNotFound(status)) return absl::OkStatus();
  return status;
}

}  // namespace calleval
