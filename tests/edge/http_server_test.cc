#include "edge/http_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "calleval/v1/accounts.pb.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "common/errors.h"
#include "edge/route_table.h"
#include "gmock/gmock.h"
#include "google/protobuf/empty.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace calleval::edge {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Json = nlohmann::json;
using Response = http::response<http::string_body>;
using ::testing::HasSubstr;

// Answers calleval methods with canned messages built from the request. GetCall completes
// inline; every other method completes on another thread, as a gRPC callback would.
class FakeInvoker : public MethodInvoker {
 public:
  ~FakeInvoker() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : threads_) t.join();
  }

  void Invoke(const google::protobuf::MethodDescriptor* method,
              std::unique_ptr<google::protobuf::Message> request, const CallContext& context,
              Done done) override {
    std::string debug = request->ShortDebugString();
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_method_ = method->name();
      last_request_ = debug;
      last_context_ = context;
      ++calls_;
    }
    const std::string& name = method->name();
    if (name == "GetCall") {
      const auto& get = static_cast<const v1::GetCallRequest&>(*request);
      if (get.call_identifier_or_id() == "missing") {
        return done(NotFoundError("call missing"), nullptr);
      }
      if (get.call_identifier_or_id() == "slow") {
        return Later(std::chrono::milliseconds(300), [done, id = get.call_identifier_or_id()] {
          auto call = std::make_unique<v1::Call>();
          call->set_call_identifier(id);
          done(absl::OkStatus(), std::move(call));
        });
      }
      auto call = std::make_unique<v1::Call>();
      call->set_call_identifier(get.call_identifier_or_id());
      call->set_client_id(get.client_id());
      return done(absl::OkStatus(), std::move(call));
    }
    std::shared_ptr<google::protobuf::Message> shared(std::move(request));
    Later(std::chrono::milliseconds(0), [name, shared, done] {
      if (name == "IngestCall") {
        const auto& ingest = static_cast<const v1::IngestCallRequest&>(*shared);
        auto call = std::make_unique<v1::Call>();
        call->set_id(42);
        call->set_call_identifier(ingest.call_identifier());
        call->set_agent_id(ingest.agent_id());
        return done(absl::OkStatus(), std::move(call));
      }
      if (name == "UpdateCall") {
        const auto& update = static_cast<const v1::UpdateCallRequest&>(*shared);
        auto call = std::make_unique<v1::Call>();
        call->set_call_identifier(update.call_identifier_or_id());
        call->set_agent_id(update.agent_id());
        if (update.update().has_label()) call->set_label(update.update().label());
        return done(absl::OkStatus(), std::move(call));
      }
      if (name == "DeleteCall") {
        return done(absl::OkStatus(), std::make_unique<google::protobuf::Empty>());
      }
      if (name == "ListCalls") {
        const auto& list = static_cast<const v1::ListCallsRequest&>(*shared);
        auto response = std::make_unique<v1::ListCallsResponse>();
        response->mutable_pagination()->set_per_page(list.per_page());
        return done(absl::OkStatus(), std::move(response));
      }
      done(ValidationError("not_faked", "no canned answer"), nullptr);
    });
  }

  std::string last_method() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_method_;
  }
  std::string last_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  CallContext last_context() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_context_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  template <typename Fn>
  void Later(std::chrono::milliseconds delay, Fn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([delay, fn = std::move(fn)] {
      std::this_thread::sleep_for(delay);
      fn();
    });
  }

  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::string last_method_;
  std::string last_request_;
  CallContext last_context_;
  int calls_ = 0;
};

// A blocking keep-alive client on one connection.
class Client {
 public:
  explicit Client(int port) : stream_(ioc_) {
    stream_.expires_after(std::chrono::seconds(10));
    stream_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }

  Response Do(http::verb verb, const std::string& target, const std::string& body = "",
              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> request(verb, target, 11);
    request.set(http::field::host, "localhost");
    for (const auto& [name, value] : headers) request.set(name, value);
    if (!body.empty() || verb == http::verb::post || verb == http::verb::patch ||
        verb == http::verb::put) {
      request.body() = body;
      request.prepare_payload();
    }
    stream_.expires_after(std::chrono::seconds(10));
    http::write(stream_, request);
    Response response;
    http::read(stream_, buffer_, response);
    return response;
  }

  beast::tcp_stream& stream() { return stream_; }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// Writes `data`, optionally half-closes, and reads until the server closes (or 5 s pass).
std::string RawExchange(int port, const std::string& data, bool half_close = true) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::seconds(5));
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  beast::error_code ec;
  net::write(stream, net::buffer(data), ec);
  if (half_close) stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::string out;
  char buf[4096];
  while (true) {
    size_t n = stream.read_some(net::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

Json Body(const Response& response) { return Json::parse(response.body()); }

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table =
        RouteTable::Build({v1::Call::descriptor()->file()->FindServiceByName("Calls"),
                           v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
                           v1::Workspace::descriptor()->file()->FindServiceByName("Accounts")});
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = std::make_unique<RouteTable>(std::move(table).value());
  }

  void StartServer(HttpServerOptions options = {}) {
    options.port = 0;
    options.access_log = false;
    server_ = std::make_unique<HttpServer>(table_.get(), &invoker_, options);
    server_->AddLocalRoute("GET", "/healthz", [](const LocalRequest& request) {
      LocalResponse response;
      response.body = R"({"status":"ok"})";
      response.headers.emplace_back("cache-control", "no-store");
      return response;
    });
    server_->AddLocalRoute("GET", "/recordings/", [this](const LocalRequest& request) {
      LocalResponse response;
      last_local_ = request;
      auto it = request.query.find("signature");
      if (it == request.query.end() || it->second != "good sig") {
        response.status = 403;
        response.body = R"({"error":{"status":403}})";
        return response;
      }
      response.content_type = "audio/wav";
      response.file_path = request.path == "/recordings/1" ? file_path_ : "/nonexistent/file";
      return response;
    });
    if (options_root_) {
      server_->AddLocalRoute("GET", "/", [](const LocalRequest&) {
        LocalResponse response;
        response.content_type = "text/plain";
        response.body = "the root";
        return response;
      });
    }
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  bool options_root_ = false;  // StartServer adds a local route at "/"
  FakeInvoker invoker_;
  std::unique_ptr<RouteTable> table_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::string file_path_;
  LocalRequest last_local_;
};

TEST_F(HttpServerTest, RoutesGetWithPathAndQueryAndEchoesRequestId) {
  StartServer();
  Client client(port_);
  Response response =
      client.Do(http::verb::get, "/api/public/v1/calls/crm%2D1?client_id=5&unknown=1", "",
                {{"x-request-id", "req-123"}, {"authorization", "Bearer k1"}});
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_EQ(response[http::field::content_type], "application/json; charset=utf-8");
  EXPECT_EQ(response["x-request-id"], "req-123");
  Json body = Body(response);
  EXPECT_EQ(body["call_identifier"], "crm-1");
  EXPECT_EQ(body["client_id"], 5);
  EXPECT_EQ(invoker_.last_method(), "GetCall");
  EXPECT_EQ(invoker_.last_context().authorization, "Bearer k1");
  EXPECT_EQ(invoker_.last_context().request_id, "req-123");
}

TEST_F(HttpServerTest, GeneratesRequestIdWhenAbsent) {
  StartServer();
  Client client(port_);
  Response first = client.Do(http::verb::get, "/api/public/v1/calls/a");
  Response second = client.Do(http::verb::get, "/api/public/v1/calls/a");
  std::string id(first["x-request-id"]);
  EXPECT_EQ(id.size(), 24u);
  EXPECT_NE(id, std::string(second["x-request-id"]));
  EXPECT_EQ(invoker_.last_context().request_id, std::string(second["x-request-id"]));
}

// An id that could quote, split or fake a field of a log line, or is too long, is replaced
// whole, and the replacement is what the roles are given.
TEST_F(HttpServerTest, ReplacesUnsafeRequestIds) {
  StartServer();
  Client client(port_);
  for (const std::string& unsafe :
       {std::string("a\"b"), std::string("a b"), std::string("a,b"), std::string("a\\b"),
        std::string("x level=error"), std::string(129, 'x')}) {
    Response response =
        client.Do(http::verb::get, "/api/public/v1/calls/a", "", {{"x-request-id", unsafe}});
    const std::string id(response["x-request-id"]);
    EXPECT_EQ(id.size(), 24u) << unsafe;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_EQ(invoker_.last_context().request_id, id);
  }
  Response kept = client.Do(http::verb::get, "/api/public/v1/calls/a", "",
                            {{"x-request-id", "trace/1:2.3_4+5=6@h"}});
  EXPECT_EQ(kept["x-request-id"], "trace/1:2.3_4+5=6@h");
}

TEST_F(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  StartServer();
  Client client(port_);
  for (int i = 0; i < 20; ++i) {
    Response get = client.Do(http::verb::get, "/api/public/v1/calls/c" + std::to_string(i));
    ASSERT_EQ(get.result_int(), 200);
    EXPECT_TRUE(get.keep_alive());
    EXPECT_EQ(Body(get)["call_identifier"], "c" + std::to_string(i));
    Response post =
        client.Do(http::verb::post, "/api/public/v1/calls",
                  R"({"call_identifier": "n)" + std::to_string(i) + R"(", "agent_id": 7})");
    ASSERT_EQ(post.result_int(), 201);
    EXPECT_TRUE(post.keep_alive());
  }
  EXPECT_EQ(invoker_.calls(), 40);
}

TEST_F(HttpServerTest, CreateAnswers201WithBody) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::post, "/api/public/v1/calls",
                                R"({"call_identifier": "crm-9", "agent_id": 7})");
  ASSERT_EQ(response.result_int(), 201);
  Json body = Body(response);
  EXPECT_EQ(body["id"], 42);
  EXPECT_EQ(body["call_identifier"], "crm-9");
  EXPECT_EQ(body["agent_id"], 7);
  EXPECT_EQ(invoker_.last_method(), "IngestCall");
}

TEST_F(HttpServerTest, DeleteAnswers204WithoutBody) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::delete_, "/api/public/v1/calls/9");
  EXPECT_EQ(response.result_int(), 204);
  EXPECT_TRUE(response.body().empty());
  EXPECT_EQ(invoker_.last_request(), "call_identifier_or_id: \"9\"");
  // The connection stays usable after a body-less answer.
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/9").result_int(), 200);
}

TEST_F(HttpServerTest, PatchParsesBodyFieldAndQueryAndPath) {
  StartServer();
  Client client(port_);
  Response response =
      client.Do(http::verb::patch, "/api/public/v1/calls/abc?agent_id=3&client_id=2&label=ignored",
                R"({"label": "L1", "unknown": true})");
  ASSERT_EQ(response.result_int(), 200) << response.body();
  Json body = Body(response);
  EXPECT_EQ(body["label"], "L1");
  EXPECT_EQ(body["agent_id"], 3);
  EXPECT_EQ(body["call_identifier"], "abc");
  EXPECT_THAT(invoker_.last_request(), HasSubstr("client_id: 2"));
}

TEST_F(HttpServerTest, PathBoundFieldIsNotReadFromQuery) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::get, "/api/v1/agents/5?id=9");
  // GetAgent has no canned answer: the fake's 422 proves the request reached it.
  EXPECT_EQ(response.result_int(), 422);
  EXPECT_THAT(invoker_.last_request(), HasSubstr("id: 5"));
  EXPECT_THAT(invoker_.last_request(), ::testing::Not(HasSubstr("id: 9")));
}

TEST_F(HttpServerTest, ListCallsReadsQueryParameters) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::get, "/api/public/v1/calls?per_page=7&tag=a+b%21");
  ASSERT_EQ(response.result_int(), 200) << response.body();
  EXPECT_EQ(Body(response)["pagination"]["per_page"], 7);
  EXPECT_THAT(invoker_.last_request(), HasSubstr("tag: \"a b!\""));
}

// The search and the timestamps arrive as sent: %25 a literal %, %2B the + of an offset.
TEST_F(HttpServerTest, ListCallsReadsTheFiltersOfTheDashboard) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::get,
                                "/api/public/v1/calls?search=50%25_x&transcription_status=failed"
                                "&call_timestamp_from=2026-11-22T10:00:00%2B02:00"
                                "&call_timestamp_to=2026-11-23T00:00:00Z");
  ASSERT_EQ(response.result_int(), 200) << response.body();
  EXPECT_THAT(invoker_.last_request(), HasSubstr("search: \"50%_x\""));
  EXPECT_THAT(invoker_.last_request(), HasSubstr("transcription_status: \"failed\""));
  EXPECT_THAT(invoker_.last_request(),
              HasSubstr("call_timestamp_from: \"2026-11-22T10:00:00+02:00\""));
  EXPECT_THAT(invoker_.last_request(), HasSubstr("call_timestamp_to: \"2026-11-23T00:00:00Z\""));
}

TEST_F(HttpServerTest, QueryTypeErrorIs422) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::get, "/api/public/v1/calls?page=abc");
  EXPECT_EQ(response.result_int(), 422);
  Json body = Body(response);
  EXPECT_EQ(body["error"]["status"], 422);
  EXPECT_EQ(invoker_.calls(), 0);
}

TEST_F(HttpServerTest, UnknownRouteIs404WithErrorBody) {
  StartServer();
  Client client(port_);
  Response response =
      client.Do(http::verb::get, "/api/v1/nothing-here", "", {{"x-request-id", "nf-1"}});
  EXPECT_EQ(response.result_int(), 404);
  EXPECT_EQ(response["x-request-id"], "nf-1");
  Json body = Body(response);
  EXPECT_EQ(body["error"]["status"], 404);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_TRUE(body["error"]["details"].is_array());
  EXPECT_TRUE(response.keep_alive());
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::put, "/api/public/v1/calls/1", "{}");
  EXPECT_EQ(response.result_int(), 405);
  EXPECT_EQ(response[http::field::allow], "GET, PATCH, DELETE");
  Json body = Body(response);
  EXPECT_EQ(body["error"]["status"], 405);
  EXPECT_EQ(body["error"]["code"], "method_not_allowed");

  Response local = client.Do(http::verb::post, "/healthz", "{}");
  EXPECT_EQ(local.result_int(), 405);
  EXPECT_EQ(local[http::field::allow], "GET");
}

TEST_F(HttpServerTest, ServiceErrorsMapToStatus) {
  StartServer();
  Client client(port_);
  Response response = client.Do(http::verb::get, "/api/public/v1/calls/missing");
  EXPECT_EQ(response.result_int(), 404);
  Json body = Body(response);
  EXPECT_EQ(body["error"]["code"], "not_found");
  EXPECT_EQ(body["error"]["message"], "call missing not found");
}

TEST_F(HttpServerTest, EmptyOrMalformedBodyIs400) {
  StartServer();
  Client client(port_);
  Response empty = client.Do(http::verb::post, "/api/public/v1/calls", "");
  EXPECT_EQ(empty.result_int(), 400);
  EXPECT_EQ(Body(empty)["error"]["code"], "malformed_json");

  Response broken = client.Do(http::verb::post, "/api/public/v1/calls", "{\"call_identifier\":");
  EXPECT_EQ(broken.result_int(), 400);
  EXPECT_EQ(Body(broken)["error"]["status"], 400);

  Response array = client.Do(http::verb::post, "/api/public/v1/calls", "[1]");
  EXPECT_EQ(array.result_int(), 400);
  EXPECT_EQ(invoker_.calls(), 0);
  // Still the same healthy connection.
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/x").result_int(), 200);
}

TEST_F(HttpServerTest, OversizedBodyIs413AndCloses) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  Client client(port_);
  std::string big = "{\"call_identifier\": \"" + std::string(4096, 'x') + "\"}";
  Response response =
      client.Do(http::verb::post, "/api/public/v1/calls", big, {{"x-request-id", "big-1"}});
  EXPECT_EQ(response.result_int(), 413);
  EXPECT_FALSE(response.keep_alive());
  EXPECT_EQ(response["x-request-id"], "big-1");
  Json body = Body(response);
  EXPECT_EQ(body["error"]["status"], 413);
  EXPECT_EQ(body["error"]["code"], "body_too_large");
  EXPECT_EQ(invoker_.calls(), 0);

  // A body just under the limit is fine.
  Client other(port_);
  EXPECT_EQ(other.Do(http::verb::post, "/api/public/v1/calls", R"({"call_identifier": "s"})")
                .result_int(),
            201);
}

TEST_F(HttpServerTest, ObserverIsToldTheRouteTemplateNeverThePath) {
  struct Seen {
    std::string route, method;
    int status;
  };
  std::mutex mu;
  std::vector<Seen> seen;
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  options.observe_request = [&](std::string_view route, std::string_view method, int status,
                                absl::Duration latency) {
    EXPECT_GE(latency, absl::ZeroDuration());
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back({std::string(route), std::string(method), status});
  };
  StartServer(options);
  Client client(port_);
  // Each answer is observed before it is written, so it has been once the client has it.
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/crm-1").result_int(), 200);
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/missing").result_int(), 404);
  EXPECT_EQ(client.Do(http::verb::post, "/api/public/v1/calls", "[1]").result_int(), 400);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
  EXPECT_EQ(client.Do(http::verb::get, "/api/v1/nothing-here").result_int(), 404);
  EXPECT_EQ(client.Do(http::verb::put, "/api/public/v1/calls/1", "{}").result_int(), 405);
  Client big(port_);
  EXPECT_EQ(big.Do(http::verb::post, "/api/public/v1/calls", std::string(4096, 'x'))
                .result_int(),
            413);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 7u);
  const std::vector<std::tuple<std::string, std::string, int>> expected = {
      {"/api/public/v1/calls/{call_identifier_or_id}", "GET", 200},
      {"/api/public/v1/calls/{call_identifier_or_id}", "GET", 404},
      {"/api/public/v1/calls", "POST", 400},
      {"/healthz", "GET", 200},
      {"unmatched", "GET", 404},
      {"unmatched", "PUT", 405},
      {"unmatched", "POST", 413}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(std::make_tuple(seen[i].route, seen[i].method, seen[i].status), expected[i]) << i;
  }
}

TEST_F(HttpServerTest, OversizedBodyWithExpectContinueIs413) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(options);
  std::string raw =
      "POST /api/public/v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n"
      "Expect: 100-continue\r\n\r\n";
  std::string answer = RawExchange(port_, raw, /*half_close=*/false);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.1 413"));
  EXPECT_THAT(answer, HasSubstr("body_too_large"));
}

TEST_F(HttpServerTest, ExpectContinueGetsInterimAnswer) {
  StartServer();
  std::string body = R"({"call_identifier": "e1", "agent_id": 1})";
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::seconds(5));
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  std::string head = "POST /api/public/v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n";
  net::write(stream, net::buffer(head));
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> interim;
  http::read_header(stream, buffer, interim);
  EXPECT_EQ(interim.get().result_int(), 100);
  net::write(stream, net::buffer(body));
  Response response;
  http::read(stream, buffer, response);
  EXPECT_EQ(response.result_int(), 201);
  EXPECT_EQ(Body(response)["call_identifier"], "e1");
}

// A local route at "/" (the dashboard's page) answers the root alone: every API route and
// every unknown path below it still reaches the route table.
TEST_F(HttpServerTest, RootLocalRouteMatchesTheRootAlone) {
  options_root_ = true;
  StartServer();
  Client client(port_);
  Response root = client.Do(http::verb::get, "/");
  EXPECT_EQ(root.result_int(), 200);
  EXPECT_EQ(root.body(), "the root");
  Response api = client.Do(http::verb::get, "/api/public/v1/calls/crm-1", "",
                           {{"authorization", "Bearer k1"}});
  EXPECT_EQ(api.result_int(), 200);
  EXPECT_EQ(client.Do(http::verb::get, "/nothing/here").result_int(), 404);
  EXPECT_EQ(client.Do(http::verb::post, "/").result_int(), 405);
}

TEST_F(HttpServerTest, LocalRoutesServeJsonAndFiles) {
  file_path_ = ::testing::TempDir() + "/http_server_test_recording.wav";
  std::string content = "RIFF";
  for (int i = 0; i < 100000; ++i) content.push_back(static_cast<char>(i * 7));
  {
    std::ofstream out(file_path_, std::ios::binary);
    out << content;
  }
  StartServer();
  Client client(port_);
  Response health = client.Do(http::verb::get, "/healthz");
  EXPECT_EQ(health.result_int(), 200);
  EXPECT_EQ(Body(health)["status"], "ok");
  EXPECT_EQ(health["cache-control"], "no-store");
  EXPECT_FALSE(health["x-request-id"].empty());

  Response file = client.Do(http::verb::get, "/recordings/1?expires=10&signature=good+sig", "",
                            {{"X-Custom", "v"}});
  ASSERT_EQ(file.result_int(), 200);
  EXPECT_EQ(file[http::field::content_type], "audio/wav");
  EXPECT_EQ(file.body(), content);
  EXPECT_EQ(last_local_.method, "GET");
  EXPECT_EQ(last_local_.path, "/recordings/1");
  EXPECT_EQ(last_local_.query.at("expires"), "10");
  EXPECT_EQ(last_local_.headers.at("x-custom"), "v");

  Response forbidden = client.Do(http::verb::get, "/recordings/1?expires=10&signature=bad");
  EXPECT_EQ(forbidden.result_int(), 403);
  Response missing = client.Do(http::verb::get, "/recordings/2?signature=good%20sig");
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(Body(missing)["error"]["code"], "not_found");
  // Prefix "/healthz" does not swallow "/healthzz".
  EXPECT_EQ(client.Do(http::verb::get, "/healthzz").result_int(), 404);
  std::remove(file_path_.c_str());
}

TEST_F(HttpServerTest, RateLimitAnswers429WithRetryAfter) {
  HttpServerOptions options;
  options.rate_limit_per_second = 0.5;
  options.rate_limit_burst = 2;
  StartServer(options);
  Client client(port_);
  std::vector<std::pair<std::string, std::string>> key_a = {{"authorization", "Bearer a"}};
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1", "", key_a).result_int(), 200);
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1", "", key_a).result_int(), 200);
  Response limited = client.Do(http::verb::get, "/api/public/v1/calls/1", "", key_a);
  EXPECT_EQ(limited.result_int(), 429);
  int retry_after = std::stoi(std::string(limited[http::field::retry_after]));
  EXPECT_GE(retry_after, 1);
  EXPECT_LE(retry_after, 2);
  Json body = Body(limited);
  EXPECT_EQ(body["error"]["code"], "rate_limited");
  EXPECT_EQ(body["error"]["status"], 429);
  // Another key has its own bucket; local routes are never limited.
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1", "", {{"authorization", "b"}})
                .result_int(),
            200);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz", "", key_a).result_int(), 200);
}

TEST_F(HttpServerTest, SurvivesClientDisconnectMidBody) {
  StartServer();
  std::string partial =
      "POST /api/public/v1/calls HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"call_";
  std::string answer = RawExchange(port_, partial, /*half_close=*/true);
  EXPECT_EQ(answer, "");
  // Disconnect without reading, in the middle of a header.
  RawExchange(port_, "GET /api/public/v1/calls/1 HTTP/1.1\r\nHo", true);
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1").result_int(), 200);
  EXPECT_EQ(invoker_.calls(), 1);
}

TEST_F(HttpServerTest, SurvivesClientDisconnectBeforeAnswer) {
  StartServer();
  {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
    std::string request = "GET /api/public/v1/calls/slow HTTP/1.1\r\nHost: x\r\n\r\n";
    net::write(stream, net::buffer(request));
    // Closed before the 300 ms answer arrives.
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1").result_int(), 200);
}

TEST_F(HttpServerTest, MalformedHttpGets400AndClose) {
  StartServer();
  std::string answer = RawExchange(port_, "GARBAGE\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("400"));
  answer = RawExchange(port_, "GET /x HTTP/1.1\r\nBad Header Line\r\n\r\n");
  EXPECT_THAT(answer, HasSubstr("400"));
  answer = RawExchange(port_, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11));
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1").result_int(), 200);
}

TEST_F(HttpServerTest, HttpOneZeroClosesUnlessKeepAlive) {
  StartServer();
  std::string answer =
      RawExchange(port_, "GET /api/public/v1/calls/z HTTP/1.0\r\n\r\n", /*half_close=*/false);
  EXPECT_THAT(answer, HasSubstr("HTTP/1.0 200"));
  EXPECT_THAT(answer, HasSubstr("\"call_identifier\":\"z\""));
}

TEST_F(HttpServerTest, ShutdownFinishesInFlightRequestAndIsIdempotent) {
  StartServer();
  Response slow;
  std::thread requester([&] {
    Client client(port_);
    slow = client.Do(http::verb::get, "/api/public/v1/calls/slow");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // An idle keep-alive connection must not hold up shutdown.
  Client idle(port_);
  EXPECT_EQ(idle.Do(http::verb::get, "/api/public/v1/calls/1").result_int(), 200);
  server_->Shutdown();
  requester.join();
  EXPECT_EQ(slow.result_int(), 200);
  EXPECT_FALSE(slow.keep_alive());
  EXPECT_EQ(Body(slow)["call_identifier"], "slow");
  server_->Shutdown();
  // No longer accepting.
  net::io_context ioc;
  tcp::socket socket(ioc);
  beast::error_code ec;
  socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
  EXPECT_TRUE(ec);
}

TEST_F(HttpServerTest, StartFailsOnBusyPort) {
  StartServer();
  HttpServerOptions options;
  options.port = port_;
  options.access_log = false;
  HttpServer second(table_.get(), &invoker_, options);
  absl::Status status = second.Start();
  EXPECT_FALSE(status.ok());
  second.Shutdown();
}

TEST_F(HttpServerTest, ManyConcurrentConnections) {
  HttpServerOptions options;
  options.threads = 4;
  StartServer(options);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      Client client(port_);
      for (int i = 0; i < 50; ++i) {
        std::string id = "c" + std::to_string(c) + "-" + std::to_string(i);
        Response response = client.Do(http::verb::get, "/api/public/v1/calls/" + id);
        if (response.result_int() == 200 && Body(response)["call_identifier"] == id) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 400);
}

// A raw loopback connection for timing tests: writes bytes and reports when the server closes.
class RawConnection {
 public:
  explicit RawConnection(int port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  bool Write(const std::string& data) {
    beast::error_code ec;
    net::write(socket_, net::buffer(data), ec);
    return !ec;
  }
  // Reads until the server closes the connection or `limit` passes; true when it closed.
  bool ClosedWithin(std::chrono::milliseconds limit, std::string* received = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    socket_.non_blocking(true);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      beast::error_code ec;
      size_t n = socket_.read_some(net::buffer(buf), ec);
      if (received != nullptr) received->append(buf, n);
      if (ec == net::error::would_block) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (ec) return true;  // eof or reset
    }
    return false;
  }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
};

TEST_F(HttpServerTest, ConnectionsBeyondTheCapAreClosed) {
  HttpServerOptions options;
  options.max_connections = 2;
  StartServer(options);
  auto first = std::make_unique<RawConnection>(port_);
  RawConnection second(port_);
  // Let the server register both before the third arrives.
  ASSERT_FALSE(first->ClosedWithin(std::chrono::milliseconds(200)));
  RawConnection third(port_);
  EXPECT_TRUE(third.ClosedWithin(std::chrono::seconds(2)));
  EXPECT_FALSE(second.ClosedWithin(std::chrono::milliseconds(100)));
  // A slot freed is a slot usable again.
  first.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(HttpServerTest, SlowHeaderIsClosedAfterTheHeaderTimeout) {
  HttpServerOptions options;
  options.header_timeout = absl::Seconds(1);
  options.idle_timeout = absl::Seconds(30);
  StartServer(options);
  RawConnection slow(port_);
  const std::string header = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: aaaaaaaaaaaa";
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  // One byte every 200 ms: never idle, never done.
  for (char c : header) {
    if (!slow.Write(std::string(1, c)) || slow.ClosedWithin(std::chrono::milliseconds(200))) {
      closed = true;
      break;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(8)) break;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(closed);
  EXPECT_GE(elapsed, std::chrono::milliseconds(800));
  EXPECT_LT(elapsed, std::chrono::seconds(4));
}

TEST_F(HttpServerTest, IdleKeepAliveIsClosedAfterTheIdleTimeout) {
  HttpServerOptions options;
  options.idle_timeout = absl::Seconds(1);
  options.header_timeout = absl::Seconds(30);
  StartServer(options);
  RawConnection idle(port_);
  ASSERT_TRUE(idle.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  std::string received;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(idle.ClosedWithin(std::chrono::seconds(5), &received));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_THAT(received, HasSubstr("200 OK"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(800));
  EXPECT_LT(elapsed, std::chrono::seconds(4));
}


// Waits up to `limit` for `done()`; true when it came true.
bool WaitUntil(const std::function<bool()>& done,
               std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Whether this process still has the inode open: an unlinked file's bytes live on until then.
bool ProcessHoldsInode(ino_t inode) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    struct stat st;
    if (::stat(entry.path().c_str(), &st) == 0 && st.st_ino == inode) return true;
  }
  return false;
}

ino_t InodeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::string PatternBytes(size_t n) {
  std::string content;
  content.reserve(n);
  for (size_t i = 0; i < n; ++i) content.push_back(static_cast<char>(i * 7 + i / 251));
  return content;
}

// Asynchronous local routes: the handler queues each request with its `respond`, and the test
// answers from its own thread, when it wants.
class AsyncLocalRouteTest : public HttpServerTest {
 protected:
  struct Pending {
    LocalRequest request;
    std::function<void(LocalResponse)> respond;
  };

  void StartAsyncServer(HttpServerOptions options = {}) {
    options.port = 0;
    options.access_log = false;
    server_ = std::make_unique<HttpServer>(table_.get(), &invoker_, options);
    server_->AddLocalRoute("GET", "/healthz", [](const LocalRequest&) {
      LocalResponse response;
      response.body = R"({"status":"ok"})";
      return response;
    });
    // Registered before the async prefix that also covers it: it wins.
    server_->AddLocalRoute("GET", "/async/sync", [](const LocalRequest&) {
      LocalResponse response;
      response.body = R"({"route":"sync"})";
      return response;
    });
    server_->AddAsyncLocalRoute(
        "GET", "/async/", [this](LocalRequest request, std::function<void(LocalResponse)> respond) {
          if (request.path == "/async/drop") return;  // never answers
          if (request.path == "/async/throw") throw std::runtime_error("boom");
          std::lock_guard<std::mutex> lock(pending_mu_);
          pending_.push_back({std::move(request), std::move(respond)});
          pending_cv_.notify_all();
        });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
  }

  void TearDown() override {
    // An unanswered request would hold up Shutdown() for its timeout; dropping `respond`
    // answers it 500.
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      pending_.clear();
    }
    HttpServerTest::TearDown();
    for (const std::string& path : files_) std::remove(path.c_str());
  }

  // The next request handed to the async route.
  Pending NextPending() {
    std::unique_lock<std::mutex> lock(pending_mu_);
    EXPECT_TRUE(pending_cv_.wait_for(lock, std::chrono::seconds(5), [&] { return !pending_.empty(); }));
    if (pending_.empty()) return {};
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    return next;
  }

  std::string WriteFile(const std::string& name, const std::string& content) {
    std::string path = ::testing::TempDir() + "/http_server_async_" + name;
    std::ofstream out(path, std::ios::binary);
    out << content;
    files_.push_back(path);
    return path;
  }

  static LocalResponse FileAnswer(const std::string& path, bool delete_after_open) {
    LocalResponse response;
    response.content_type = "audio/wav";
    response.file_path = path;
    response.accept_ranges = true;
    response.delete_file_after_open = delete_after_open;
    return response;
  }

  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  std::deque<Pending> pending_;
  std::vector<std::string> files_;
};

TEST_F(AsyncLocalRouteTest, AnswersFromAnotherThreadWhileTheOnlyIoThreadServesOthers) {
  HttpServerOptions options;
  options.threads = 1;
  StartAsyncServer(options);
  Response slow;
  std::thread requester([&] {
    Client client(port_);
    slow = client.Do(http::verb::get, "/async/call?x=a%20b", "",
                     {{"X-Request-Id", "async-1"}, {"X-Custom", "v"}});
  });
  Pending pending = NextPending();
  EXPECT_EQ(pending.request.method, "GET");
  EXPECT_EQ(pending.request.path, "/async/call");
  EXPECT_EQ(pending.request.query.at("x"), "a b");
  EXPECT_EQ(pending.request.headers.at("x-custom"), "v");
  EXPECT_EQ(pending.request.request_id, "async-1");

  // The one io thread is free while the first request waits for its answer.
  Client other(port_);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(other.Do(http::verb::get, "/healthz").result_int(), 200);
  EXPECT_EQ(Body(other.Do(http::verb::get, "/async/sync"))["route"], "sync");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));

  std::thread responder([respond = std::move(pending.respond)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    LocalResponse response;
    response.status = 202;
    response.body = R"({"route":"async"})";
    response.headers.emplace_back("cache-control", "no-store");
    respond(std::move(response));
  });
  requester.join();
  responder.join();
  EXPECT_EQ(slow.result_int(), 202);
  EXPECT_EQ(Body(slow)["route"], "async");
  EXPECT_EQ(slow["cache-control"], "no-store");
  EXPECT_EQ(slow["x-request-id"], "async-1");
  EXPECT_TRUE(slow.keep_alive());
}

TEST_F(AsyncLocalRouteTest, KeepAliveConnectionServesTheNextRequestAfterAnAsyncAnswer) {
  StartAsyncServer();
  Client client(port_);
  for (int i = 0; i < 3; ++i) {
    std::thread responder([&] {
      Pending pending = NextPending();
      LocalResponse response;
      response.body = "{\"i\":" + std::to_string(i) + "}";
      pending.respond(std::move(response));
    });
    Response response = client.Do(http::verb::get, "/async/" + std::to_string(i));
    responder.join();
    EXPECT_EQ(Body(response)["i"], i);
  }
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(AsyncLocalRouteTest, ShareTheLocalRoutesAllowAndTheRouteTableStaysBehindThem) {
  StartAsyncServer();
  Client client(port_);
  Response wrong = client.Do(http::verb::post, "/async/x", "{}");
  EXPECT_EQ(wrong.result_int(), 405);
  EXPECT_EQ(wrong[http::field::allow], "GET");
  EXPECT_EQ(client.Do(http::verb::get, "/api/public/v1/calls/1").result_int(), 200);
  EXPECT_EQ(client.Do(http::verb::get, "/asyncx").result_int(), 404);
}

TEST_F(AsyncLocalRouteTest, TimeoutsDoNotCloseAConnectionWaitingForItsAnswer) {
  HttpServerOptions options;
  options.header_timeout = absl::Milliseconds(300);
  options.idle_timeout = absl::Milliseconds(300);
  StartAsyncServer(options);
  std::thread responder([&] {
    Pending pending = NextPending();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    LocalResponse response;
    response.body = "{}";
    pending.respond(std::move(response));
  });
  Client client(port_);
  Response response = client.Do(http::verb::get, "/async/late");
  responder.join();
  EXPECT_EQ(response.result_int(), 200);
}

TEST_F(AsyncLocalRouteTest, FileAnswerHonoursRangeAnd416) {
  StartAsyncServer();
  const std::string content = PatternBytes(100000);
  const std::string path = WriteFile("range.wav", content);
  Client client(port_);
  auto answer_with_file = [&] {
    return std::thread([&] { NextPending().respond(FileAnswer(path, false)); });
  };

  std::thread responder = answer_with_file();
  Response whole = client.Do(http::verb::get, "/async/rec");
  responder.join();
  EXPECT_EQ(whole.result_int(), 200);
  EXPECT_EQ(whole[http::field::accept_ranges], "bytes");
  EXPECT_EQ(whole[http::field::content_type], "audio/wav");
  EXPECT_EQ(whole.body(), content);

  responder = answer_with_file();
  Response part = client.Do(http::verb::get, "/async/rec", "", {{"Range", "bytes=1000-1999"}});
  responder.join();
  EXPECT_EQ(part.result_int(), 206);
  EXPECT_EQ(part[http::field::content_range], "bytes 1000-1999/100000");
  EXPECT_EQ(part.body(), content.substr(1000, 1000));

  responder = answer_with_file();
  Response suffix = client.Do(http::verb::get, "/async/rec", "", {{"Range", "bytes=-10"}});
  responder.join();
  EXPECT_EQ(suffix.result_int(), 206);
  EXPECT_EQ(suffix.body(), content.substr(content.size() - 10));

  responder = answer_with_file();
  Response outside = client.Do(http::verb::get, "/async/rec", "", {{"Range", "bytes=100000-"}});
  responder.join();
  EXPECT_EQ(outside.result_int(), 416);
  EXPECT_EQ(outside[http::field::content_range], "bytes */100000");
  EXPECT_EQ(Body(outside)["error"]["code"], "range_not_satisfiable");
  EXPECT_TRUE(FileExists(path));  // not asked to delete it
}

TEST_F(AsyncLocalRouteTest, DeleteFileAfterOpenLeavesNoFileWhateverIsAnswered) {
  StartAsyncServer();
  const std::string content = PatternBytes(300000);
  Client client(port_);
  struct Case {
    std::string name;
    std::vector<std::pair<std::string, std::string>> headers;
    int status;         // what the route answers
    int want;           // what the client gets
  };
  const std::vector<Case> cases = {
      {"whole", {}, 200, 200},
      {"ranged", {{"Range", "bytes=5-99"}}, 200, 206},
      {"unsatisfiable", {{"Range", "bytes=400000-"}}, 200, 416},
      // An error page the route built into its temporary file.
      {"route_error", {}, 503, 503},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = WriteFile(c.name + ".wav", content);
    const ino_t inode = InodeOf(path);
    std::thread responder([&] {
      LocalResponse response = FileAnswer(path, true);
      response.status = c.status;
      NextPending().respond(std::move(response));
    });
    Response response = client.Do(http::verb::get, "/async/rec", "", c.headers);
    responder.join();
    EXPECT_EQ(response.result_int(), c.want);
    if (c.want == 200 || c.want == 503) {
      EXPECT_EQ(response.body(), content);
    } else if (c.want == 206) {
      EXPECT_EQ(response.body(), content.substr(5, 95));
    }
    EXPECT_FALSE(FileExists(path));
    EXPECT_TRUE(WaitUntil([&] { return !ProcessHoldsInode(inode); }));
  }

  // A file that is gone by the time it is opened: 404, as for a synchronous route.
  std::thread responder([&] {
    NextPending().respond(FileAnswer(::testing::TempDir() + "/http_server_async_none", true));
  });
  EXPECT_EQ(client.Do(http::verb::get, "/async/rec").result_int(), 404);
  responder.join();
}

TEST_F(AsyncLocalRouteTest, DeleteFileAfterOpenWhenTheClientLeavesMidBody) {
  StartAsyncServer();
  // Far more than the socket buffers hold, so the send is still going when the client leaves.
  const std::string path = WriteFile("big.wav", PatternBytes(32 * 1024 * 1024));
  const ino_t inode = InodeOf(path);
  {
    net::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
    net::write(socket, net::buffer(std::string("GET /async/big HTTP/1.1\r\nHost: x\r\n\r\n")));
    NextPending().respond(FileAnswer(path, true));
    char buf[64 * 1024];
    size_t received = 0;
    while (received < 256 * 1024) received += socket.read_some(net::buffer(buf));
    EXPECT_FALSE(FileExists(path));
    EXPECT_TRUE(ProcessHoldsInode(inode));  // unlinked, still being sent
    // Closed with unread bytes: a reset, which fails the server's next write.
  }
  EXPECT_TRUE(WaitUntil([&] { return !ProcessHoldsInode(inode); }));
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(AsyncLocalRouteTest, ClientGoneBeforeRespondMakesTheLateAnswerHarmless) {
  StartAsyncServer();
  const std::string path = WriteFile("orphan.wav", PatternBytes(1000));
  const std::string second = WriteFile("orphan_second.wav", "x");
  const ino_t inode = InodeOf(path);
  std::thread responder;
  {
    RawConnection gone(port_);
    ASSERT_TRUE(gone.Write("GET /async/orphan HTTP/1.1\r\nHost: x\r\n\r\n"));
    Pending pending = NextPending();
    // The client hangs up; the answer comes later, from another thread.
    responder = std::thread([respond = std::move(pending.respond), path, second] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      respond(FileAnswer(path, true));
      // A second answer is ignored, and its file removed too.
      respond(FileAnswer(second, true));
    });
  }
  responder.join();
  EXPECT_TRUE(WaitUntil([&] { return !FileExists(path) && !FileExists(second); }));
  EXPECT_TRUE(WaitUntil([&] { return !ProcessHoldsInode(inode); }));
  Client client(port_);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(AsyncLocalRouteTest, HandlerThatDropsRespondOrThrowsAnswers500) {
  StartAsyncServer();
  Client client(port_);
  Response dropped = client.Do(http::verb::get, "/async/drop");
  EXPECT_EQ(dropped.result_int(), 500);
  EXPECT_EQ(Body(dropped)["error"]["status"], 500);
  Response thrown = client.Do(http::verb::get, "/async/throw");
  EXPECT_EQ(thrown.result_int(), 500);
  EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(AsyncLocalRouteTest, DestructorWaitsForAPendingAnswer) {
  StartAsyncServer();
  Response slow;
  std::thread requester([&] {
    Client client(port_);
    slow = client.Do(http::verb::get, "/async/slow");
  });
  Pending pending = NextPending();
  std::thread responder([respond = std::move(pending.respond)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    LocalResponse response;
    response.body = R"({"route":"async"})";
    respond(std::move(response));
  });
  server_.reset();  // the destructor shuts down, waiting for the in-flight answer
  requester.join();
  responder.join();
  EXPECT_EQ(slow.result_int(), 200);
  EXPECT_FALSE(slow.keep_alive());
  EXPECT_EQ(Body(slow)["route"], "async");
}

TEST_F(AsyncLocalRouteTest, AnswerAfterTheServerGaveUpAndWasDestroyedIsDropped) {
  HttpServerOptions options;
  options.shutdown_timeout = absl::Milliseconds(200);
  StartAsyncServer(options);
  const std::string path = WriteFile("abandoned.wav", PatternBytes(1000));
  RawConnection waiting(port_);
  ASSERT_TRUE(waiting.Write("GET /async/abandoned HTTP/1.1\r\nHost: x\r\n\r\n"));
  Pending pending = NextPending();
  server_.reset();  // gives up on the pending request after 200 ms
  pending.respond(FileAnswer(path, true));
  pending.respond = nullptr;  // the last hold on the connection
  EXPECT_FALSE(FileExists(path));
  std::string received;
  EXPECT_TRUE(waiting.ClosedWithin(std::chrono::seconds(2), &received));
  EXPECT_EQ(received, "");
}


namespace websocket = beast::websocket;

// Upgrade routes: a websocket upgrade handed over with its socket and the bytes read so far;
// the taker here completes the upgrade with Beast and echoes text frames on a thread of its own.
class UpgradeRouteTest : public HttpServerTest {
 protected:
  void StartUpgradeServer(HttpServerOptions options = {}) {
    options.port = 0;
    options.access_log = false;
    server_ = std::make_unique<HttpServer>(table_.get(), &invoker_, options);
    server_->AddUpgradeRoute("/media/", [this](const LocalRequest& request) {
      UpgradeAnswer answer;
      if (request.path != "/media/known") {
        answer.refusal.status = 404;
        answer.refusal.body = R"({"error":"unknown line"})";
        return answer;
      }
      seen_request_ = request;
      answer.take = [this](UpgradedConnection connection) {
        std::lock_guard<std::mutex> lock(mu_);
        echoers_.emplace_back([connection = std::move(connection)] { Echo(connection); });
      };
      return answer;
    });
    // The same prefix's other requests: a local route answers them.
    server_->AddLocalRoute("POST", "/media/", [this](const LocalRequest& request) {
      posted_body_ = request.body;
      LocalResponse response;
      response.body = R"({"posted":true})";
      return response;
    });
    server_->AddLocalRoute("GET", "/healthz", [](const LocalRequest&) { return LocalResponse{}; });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
  }

  void TearDown() override {
    HttpServerTest::TearDown();
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : echoers_) t.join();
  }

  static void Echo(const UpgradedConnection& connection) {
    net::io_context ioc;
    websocket::stream<tcp::socket> ws(tcp::socket(ioc, tcp::v4(), connection.fd));
    beast::error_code ec;
    ws.accept(net::buffer(connection.received), ec);
    if (ec) return;
    while (true) {
      beast::flat_buffer buffer;
      ws.read(buffer, ec);
      if (ec) return;
      ws.text(true);
      ws.write(net::buffer("echo:" + beast::buffers_to_string(buffer.data())), ec);
      if (ec) return;
    }
  }

  std::mutex mu_;
  std::vector<std::thread> echoers_;
  LocalRequest seen_request_;
  std::string posted_body_;
};

// A websocket client of the test server.
class WsClient {
 public:
  explicit WsClient(int port) : ws_(ioc_) {
    beast::get_lowest_layer(ws_).connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  }
  beast::error_code Handshake(const std::string& target, websocket::response_type* response) {
    beast::error_code ec;
    ws_.handshake(*response, "localhost", target, ec);
    return ec;
  }
  std::string RoundTrip(const std::string& text) {
    ws_.text(true);
    ws_.write(net::buffer(text));
    beast::flat_buffer buffer;
    ws_.read(buffer);
    return beast::buffers_to_string(buffer.data());
  }

 private:
  net::io_context ioc_;
  websocket::stream<tcp::socket> ws_;
};

TEST_F(UpgradeRouteTest, HandsTheConnectionOverAndItLeavesTheServer) {
  HttpServerOptions options;
  options.max_connections = 1;
  options.shutdown_timeout = absl::Seconds(20);
  StartUpgradeServer(options);
  WsClient ws(port_);
  websocket::response_type response;
  ASSERT_FALSE(ws.Handshake("/media/known?x=1", &response));
  EXPECT_EQ(response.result_int(), 101);
  EXPECT_EQ(ws.RoundTrip("hello"), "echo:hello");
  EXPECT_EQ(seen_request_.path, "/media/known");
  EXPECT_EQ(seen_request_.query.at("x"), "1");
  EXPECT_EQ(seen_request_.headers.at("upgrade"), "websocket");

  // The upgraded connection counts toward no cap: with max_connections 1 another is served.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  {
    Client client(port_);
    EXPECT_EQ(client.Do(http::verb::get, "/healthz").result_int(), 200);
  }
  // Shutdown() neither waits on it nor closes it.
  const auto start = std::chrono::steady_clock::now();
  server_->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(ws.RoundTrip("still there"), "echo:still there");
}

TEST_F(UpgradeRouteTest, RefusalIsAnsweredOverHttpAndOtherRequestsGoToTheLocalRoutes) {
  StartUpgradeServer();
  {
    WsClient ws(port_);
    websocket::response_type response;
    EXPECT_TRUE(ws.Handshake("/media/unknown", &response));
  }
  Client client(port_);
  // The refusal is an HTTP answer, and the connection serves on.
  Response refused = client.Do(http::verb::get, "/media/unknown", "",
                               {{"Connection", "Upgrade"},
                                {"Upgrade", "websocket"},
                                {"Sec-WebSocket-Version", "13"},
                                {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}});
  EXPECT_EQ(refused.result_int(), 404);
  EXPECT_THAT(refused.body(), HasSubstr("unknown line"));
  // A POST under the prefix carries its body to the local route.
  Response posted = client.Do(http::verb::post, "/media/known/events", "CallStatus=ringing",
                              {{"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(posted.result_int(), 200);
  EXPECT_EQ(posted_body_, "CallStatus=ringing");
  // A GET that asks no upgrade is not the upgrade route's: only POST is allowed there.
  Response plain = client.Do(http::verb::get, "/media/known");
  EXPECT_EQ(plain.result_int(), 405);
  EXPECT_EQ(plain[http::field::allow], "POST");
}

}  // namespace
}  // namespace calleval::edge
