#include "tests/integration/http_client.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <thread>

namespace calleval::testing {
namespace {

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t AppendHeader(char* data, size_t size, size_t n, void* out) {
  std::string line(data, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r\n") + 1);
    (*static_cast<std::map<std::string, std::string>*>(out))[name] = value;
  }
  return size * n;
}

}  // namespace

nlohmann::json HttpResponse::json() const {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

HttpClient::HttpClient(std::string base_url) : base_url_(std::move(base_url)) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  curl_ = curl_easy_init();
}

HttpClient::~HttpClient() { curl_easy_cleanup(curl_); }

int HttpClient::connections_opened() const {
  long n = 0;
  curl_easy_getinfo(curl_, CURLINFO_NUM_CONNECTS, &n);
  return static_cast<int>(n);
}

HttpResponse HttpClient::Send(const std::string& method, const std::string& path,
                              const std::string* body,
                              const std::map<std::string, std::string>& headers) {
  HttpResponse response;
  const std::string url = path.rfind("http", 0) == 0 ? path : base_url_ + path;
  curl_easy_reset(curl_);
  curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl_, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl_, CURLOPT_HEADERFUNCTION, AppendHeader);
  curl_easy_setopt(curl_, CURLOPT_HEADERDATA, &response.headers);
  if (body != nullptr) {
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  } else if (method == "GET") {
    curl_easy_setopt(curl_, CURLOPT_HTTPGET, 1L);
  }
  struct curl_slist* list = nullptr;
  if (!api_key_.empty() && headers.count("Authorization") == 0) {
    list = curl_slist_append(list, ("Authorization: Bearer " + api_key_).c_str());
  }
  list = curl_slist_append(list, "Content-Type: application/json");
  list = curl_slist_append(list, "Expect:");
  for (const auto& [name, value] : headers) {
    list = curl_slist_append(list, (name + ": " + value).c_str());
  }
  curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, list);
  CURLcode rc = curl_easy_perform(curl_);
  curl_slist_free_all(list);
  if (rc != CURLE_OK) {
    response.status = -1;
    response.body = curl_easy_strerror(rc);
    return response;
  }
  curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

nlohmann::json HttpClient::WaitForAnalysis(const std::string& id_or_key) {
  nlohmann::json call;
  for (int i = 0; i < 2400; ++i) {  // up to a minute (a transcription may be part of it)
    call = Get("/api/public/v1/calls/" + id_or_key).json();
    const std::string status = call.is_object() ? call.value("analysis_status", "") : "";
    if (status == "completed" || status == "failed" || status == "skipped") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return call;
}

int64_t BalanceOnceSettled(HttpClient& client, int64_t expected) {
  const auto balance = [&]() -> int64_t {
    return client.Get("/api/v1/workspaces/current").json()["credit_balance"];
  };
  int64_t now = balance();
  for (int i = 0; i < 1000 && now != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = balance();
  }
  return now;
}

}  // namespace calleval::testing
