#pragma once

// A small blocking HTTP/1.1 client for integration tests (libcurl, one keep-alive connection
// per client).

#include <curl/curl.h>

#include <map>
#include <string>

#include "nlohmann/json.hpp"

namespace calleval::testing {

struct HttpResponse {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
  // The body parsed as JSON (null when it is not JSON).
  nlohmann::json json() const;
};

class HttpClient {
 public:
  explicit HttpClient(std::string base_url);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  void set_api_key(std::string key) { api_key_ = std::move(key); }

  HttpResponse Get(const std::string& path) { return Send("GET", path, nullptr); }
  HttpResponse Delete(const std::string& path) { return Send("DELETE", path, nullptr); }
  HttpResponse Post(const std::string& path, const std::string& body) {
    return Send("POST", path, &body);
  }
  HttpResponse Patch(const std::string& path, const std::string& body) {
    return Send("PATCH", path, &body);
  }
  HttpResponse Put(const std::string& path, const std::string& body) {
    return Send("PUT", path, &body);
  }
  HttpResponse Post(const std::string& path, const nlohmann::json& body) {
    return Post(path, body.dump());
  }
  HttpResponse Patch(const std::string& path, const nlohmann::json& body) {
    return Patch(path, body.dump());
  }
  // Any method, absolute URL or path, optional body and extra headers.
  HttpResponse Send(const std::string& method, const std::string& path, const std::string* body,
                    const std::map<std::string, std::string>& headers = {});

  int connections_opened() const;

  // Polls GET /api/public/v1/calls/{id_or_key} until analysis_status is final (completed,
  // failed or skipped) or about a minute has passed, and returns the last record read.
  nlohmann::json WaitForAnalysis(const std::string& id_or_key);

 private:
  std::string base_url_;
  std::string api_key_;
  CURL* curl_;
};

// The workspace's credit_balance once it equals `expected`, or what it is after 10 s. Refunds are
// applied just after a call settles (docs/architecture.md, "Credits across services"), so a read
// right after the call shows completed may come before them.
int64_t BalanceOnceSettled(HttpClient& client, int64_t expected);

}  // namespace calleval::testing
