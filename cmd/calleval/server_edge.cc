#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <thread>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "cmd/calleval/server_state.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/internal_credential.h"
#include "common/log.h"
#include "common/method_table.h"
#include "edge/dashboard_assets.h"
#include "common/schema.h"
#include "common/server_reflection_v1.h"
#include "common/status_macros.h"
#include "common/telemetry.h"
#include "edge/json_codec.h"
#include "edge/openapi.h"
#include "grpc/health/v1/health.pb.h"
#include "services/runs/line_route.h"

namespace calleval {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& addr) {
  size_t colon = addr.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad address (want host:port): ", addr));
  }
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

namespace {

// The services whose HTTP annotations make up the public API.
std::vector<const google::protobuf::ServiceDescriptor*> PublicServices() {
  // Reached through a message of each file, which also makes sure the file is linked in.
  return {v1::Workspace::descriptor()->file()->FindServiceByName("Accounts"),
          v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
          v1::Call::descriptor()->file()->FindServiceByName("Calls"),
          v1::Metric::descriptor()->file()->FindServiceByName("Metrics")};
}

edge::LocalResponse JsonResponse(int status, std::string body) {
  edge::LocalResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

edge::LocalResponse ErrorResponse(const absl::Status& status) {
  return JsonResponse(HttpStatusFor(status), edge::PrintJson(ToErrorResponse(status)));
}

// The method's label: the ones HTTP defines, else "other" (a client may send any token).
std::string_view HttpMethodLabel(std::string_view method) {
  for (std::string_view known : {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}) {
    if (method == known) return known;
  }
  return "other";
}

// The edge's requests for the operators' metrics (docs/operations.md, "Metrics"): the route is
// its template, never the raw path, so the labels stay few.
void ObserveHttpRequest(std::string_view route, std::string_view method, int status,
                        absl::Duration latency) {
  static telemetry::CounterFamily& requests = telemetry::DefaultRegistry().Counter(
      "calleval_http_requests_total",
      "Requests the public edge answered, by route template, method and status.",
      {"route", "method", "status"});
  static telemetry::HistogramFamily& durations = telemetry::DefaultRegistry().Histogram(
      "calleval_http_request_duration_seconds",
      "Time from a request's first byte to its answer, by route template and method.",
      {"route", "method"});
  const std::string route_label(route);
  const std::string method_label(HttpMethodLabel(method));
  requests.WithLabels({route_label, method_label, absl::StrCat(status)}).Increment();
  durations.WithLabels({route_label, method_label}).ObserveDuration(latency);
}

// The connection cap, lowered so that the connections plus the descriptors the rest of the
// process needs (SQLite, gRPC, sandbox pipes, recordings) fit RLIMIT_NOFILE: a cap the kernel
// would enforce first only turns into failed accepts and failed file opens.
int MaxConnectionsWithinFileLimit(int requested) {
  constexpr int kReservedFiles = 256;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return requested;
  const int64_t usable = static_cast<int64_t>(limit.rlim_cur) - kReservedFiles;
  if (usable >= requested) return requested;
  const int lowered = static_cast<int>(std::max<int64_t>(usable, 16));
  LogWarn("--max-connections lowered to fit the open-file limit",
          {{"requested", requested},
           {"lowered", lowered},
           {"open_file_limit", static_cast<unsigned long long>(limit.rlim_cur)}});
  return lowered;
}

// The method tables of the services run here, for the edge to call directly.
absl::Status RegisterDirectHandlers(ServerState& s) {
  edge::DirectInvoker& direct = *s.direct_invoker;
  auto serve = [&direct](auto* service) -> absl::Status {
    if (service == nullptr) return absl::OkStatus();
    using Service = std::remove_pointer_t<decltype(service)>;
    RETURN_IF_ERROR(CheckMethodTable<Service>());
    direct.RegisterTable(service);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(serve(s.accounts_service.get()));
  RETURN_IF_ERROR(serve(s.agents_service.get()));
  RETURN_IF_ERROR(serve(s.calls_service.get()));
  RETURN_IF_ERROR(serve(s.metrics_service.get()));
  return absl::OkStatus();
}

// The phone channel's carrier-facing routes (docs/channels.md) on `http`: under
// /media/<carrier>/<token> the media websocket, handed over to the run waiting on the line; its
// status webhooks, checked with the line's carrier account (a bad signature is 403 and delivers
// nothing); the answer document. A line held here is served here. With `relay` (the public
// edge), a line held by another process is reached through the route its token carries
// (services/runs/line_route.h), once the route's MAC verifies: the upgrade spliced, a request
// forwarded. An unknown or expired token is 404 everywhere, and so is a route that does not
// verify: no connection is made for it. The media listener registers the same routes without
// a relay, so a relayed request never travels further. Beside them, each carrier's fixed
// incoming-call webhook, /media/<carrier>/incoming, for runs whose agent calls in: answered by
// the lines of this process (a call no line here waits for gets the carrier's rejection).
void AddPhoneLineRoutes(edge::HttpServer& http, ServerState* state, bool relay) {
  const absl::Status unknown = absl::NotFoundError("no phone line is waiting at this address");
  // The process holding the line `path` names, when it is not this one and the route verifies.
  auto holder_of = [state, relay](const std::string& path) -> std::optional<std::string> {
    if (!relay || state->media_relay == nullptr) return std::nullopt;
    std::optional<std::string> holder =
        runs::VerifiedLineHolderOfPath(path, state->internal_credential);
    if (holder && *holder == state->media_advertised) return std::nullopt;  // ours, gone
    return holder;
  };
  http.AddUpgradeRoute("/media/", [state, holder_of, unknown](const edge::LocalRequest& r) {
    edge::UpgradeAnswer answer;
    if (!state->ready.load()) {
      answer.refusal = ErrorResponse(absl::UnavailableError("starting"));
      return answer;
    }
    absl::Status status = unknown;
    if (state->phone_lines != nullptr) {
      absl::StatusOr<std::function<void(runs::MediaHandoff)>> take =
          state->phone_lines->ClaimMedia(r.path);
      if (take.ok()) {
        answer.take = [take = *std::move(take)](edge::UpgradedConnection connection) {
          take(runs::MediaHandoff{connection.fd, std::move(connection.received)});
        };
        return answer;
      }
      status = take.status();
    }
    if (status.code() == absl::StatusCode::kNotFound) {
      if (std::optional<std::string> holder = holder_of(r.path)) {
        edge::MediaRelay* relay = state->media_relay.get();
        answer.take = [relay, holder = *std::move(holder)](edge::UpgradedConnection connection) {
          relay->Splice(std::move(connection), holder);
        };
        return answer;
      }
    }
    answer.refusal = ErrorResponse(status);
    return answer;
  });
  // A carrier's request as the line's webhook reader reads it.
  auto carrier_request = [](const edge::LocalRequest& r) {
    runs::CarrierWebhook hook;
    hook.method = r.method;
    hook.headers = r.headers;
    auto type = r.headers.find("content-type");
    if (type != r.headers.end()) hook.content_type = type->second;
    hook.body = r.body;
    return hook;
  };
  // A webhook or the answer document (which carriers fetch with either method; a signed POST's
  // events are delivered too: the call was answered), for a line held here: nullopt when no
  // line here has its token.
  auto local = [state, carrier_request](
                   const edge::LocalRequest& r) -> std::optional<edge::LocalResponse> {
    if (state->phone_lines == nullptr) {
      // No line waits here for an agent's call: the carrier's rejection, as when none matches.
      for (const char* carrier : {"twilio", "telnyx", "plivo"}) {
        if (r.method == "POST" && r.path == absl::StrCat("/media/", carrier, "/incoming")) {
          edge::LocalResponse refused;
          refused.body = runs::IncomingCallRejection(carrier);
          refused.content_type = refused.body.empty() ? "text/plain" : "text/xml";
          return refused;
        }
      }
      return std::nullopt;
    }
    if (absl::EndsWith(r.path, "/answer")) {
      std::optional<runs::CarrierWebhook> fetch;
      if (r.method == "POST") fetch = carrier_request(r);
      absl::StatusOr<std::string> document =
          state->phone_lines->Answer(r.path, std::move(fetch));
      if (!document.ok()) {
        if (document.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
        return ErrorResponse(document.status());
      }
      edge::LocalResponse ok;
      ok.content_type = "application/xml";
      ok.body = *std::move(document);
      return ok;
    }
    if (r.method != "POST") return std::nullopt;
    if (absl::EndsWith(r.path, "/incoming")) {
      absl::StatusOr<runs::PhoneLines::IncomingAnswer> taken =
          state->phone_lines->Incoming(r.path, carrier_request(r));
      if (!taken.ok()) return ErrorResponse(taken.status());
      edge::LocalResponse ok;
      ok.content_type = taken->document.empty() ? "text/plain" : "text/xml";
      ok.body = std::move(taken->document);
      return ok;
    }
    absl::Status delivered = state->phone_lines->Webhook(r.path, carrier_request(r));
    if (delivered.code() == absl::StatusCode::kNotFound) return std::nullopt;
    if (!delivered.ok()) return ErrorResponse(delivered);
    edge::LocalResponse ok;
    ok.content_type = "text/xml";
    ok.body = "<Response/>";  // what a carrier expects of a status callback: any 2xx
    return ok;
  };
  for (const char* method : {"GET", "POST"}) {
    http.AddAsyncLocalRoute(
        method, "/media/",
        [state, local, holder_of, unknown](edge::LocalRequest r,
                                           std::function<void(edge::LocalResponse)> respond) {
          if (!state->ready.load()) {
            return respond(ErrorResponse(absl::UnavailableError("starting")));
          }
          // A line held here is answered at once, on the I/O thread, as before.
          if (std::optional<edge::LocalResponse> answered = local(r)) {
            return respond(*std::move(answered));
          }
          std::optional<std::string> holder = holder_of(r.path);
          if (!holder) return respond(ErrorResponse(unknown));
          state->media_relay->Forward(std::move(r), *std::move(holder), std::move(respond));
        });
  }
}

// The media listener of --media-addr: a runs process's phone lines for the edges to relay to,
// its routes alone. Bound before the lines are opened, since their tokens name its address.
absl::Status BindMedia(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string listen = MediaListenAddr(config);
  if (listen.empty() || !HasRole(config, "runs")) return absl::OkStatus();
  RETURN_IF_ERROR(ValidateMediaFlags(config));
  ASSIGN_OR_RETURN(auto host_port, SplitHostPort(listen));
  ASSIGN_OR_RETURN(auto table, edge::RouteTable::Build({}));
  s->media_routes = std::make_unique<edge::RouteTable>(std::move(table));
  edge::HttpServerOptions options;
  options.host = host_port.first;
  options.port = host_port.second;
  options.threads = 1;  // upgrades and webhooks are handed off at once
  options.max_body_bytes = 1 << 20;  // a carrier's webhook is a few kilobytes
  options.max_connections = MaxConnectionsWithinFileLimit(std::min(config.max_connections, 4096));
  options.header_timeout = config.header_timeout;
  options.idle_timeout = config.idle_timeout;
  options.access_log = config.access_log;
  // No route table: the invoker is never called.
  s->media_server =
      std::make_unique<edge::HttpServer>(s->media_routes.get(), &s->invoker_slot, options);
  AddPhoneLineRoutes(*s->media_server, s, /*relay=*/false);
  if (absl::Status started = s->media_server->Start(); !started.ok()) {
    return absl::Status(started.code(),
                        absl::StrCat("--media-addr ", listen, ": ", started.message()));
  }
  if (config.public_base_url.empty() && !HasRole(config, "edge")) {
    // The lines' URLs would name this process's own --http-addr, where no edge listens.
    LogWarn("phone runs need --public-base-url: the carriers are given URLs under it and reach "
            "an edge there, which relays to this process's media listener",
            {{"media_addr", listen}});
  }
  s->media_advertised = config.media_advertise_addr;
  if (s->media_advertised.empty()) {
    std::string host = host_port.first;
    if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
    s->media_advertised = absl::StrCat(host, ":", s->media_server->port());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BindEdge(ServerState* s) {
  const ServerConfig& config = s->config;
  ASSIGN_OR_RETURN(auto http_host_port, SplitHostPort(config.http_addr));
  // The edge binds first: presigned links name its port, which is only known once bound when
  // --http-addr asks for port 0. Until the invoker is in place it answers 503.
  if (HasRole(config, "edge")) {
    ASSIGN_OR_RETURN(auto table, edge::RouteTable::Build(PublicServices()));
    s->routes = std::make_unique<edge::RouteTable>(std::move(table));
    s->openapi = edge::BuildOpenApi(*s->routes, "calleval", "1.0.0", config.public_base_url);
    edge::HttpServerOptions options;
    options.host = http_host_port.first;
    options.port = http_host_port.second;
    options.threads = config.http_threads;
    options.max_body_bytes = static_cast<size_t>(config.max_body_bytes);
    options.max_connections = MaxConnectionsWithinFileLimit(config.max_connections);
    options.header_timeout = config.header_timeout;
    options.idle_timeout = config.idle_timeout;
    options.access_log = config.access_log;
    options.rate_limit_per_second = config.rate_limit_per_second;
    options.rate_limit_burst = config.rate_limit_burst;
    // Limited per authenticated key: a guessed key must not get a bucket of its own.
    accounts::Authenticator* authenticator = s->authenticator.get();
    options.rate_limit_identity =
        [authenticator](std::string_view authorization) -> std::optional<std::string> {
      absl::StatusOr<accounts::Principal> principal = authenticator->Authenticate(
          absl::string_view(authorization.data(), authorization.size()));
      if (!principal.ok()) return std::nullopt;
      return absl::StrCat(principal->key_id);
    };
    options.observe_request = ObserveHttpRequest;
    s->http_server = std::make_unique<edge::HttpServer>(s->routes.get(), &s->invoker_slot, options);
    AddLocalRoutes(s);
    edge::MediaRelayOptions relay;
    relay.idle_timeout = config.idle_timeout;
    s->media_relay = std::make_unique<edge::MediaRelay>(relay);
    AddPhoneLineRoutes(*s->http_server, s, /*relay=*/true);
    RETURN_IF_ERROR(s->http_server->Start());
  }
  s->base_url = config.public_base_url;
  if (s->base_url.empty()) {
    std::string host = http_host_port.first;
    if (host == "0.0.0.0" || host == "::" || host.empty()) host = "127.0.0.1";
    if (host.find(':') != std::string::npos) host = absl::StrCat("[", host, "]");
    const int port = s->http_server ? s->http_server->port() : http_host_port.second;
    s->base_url = absl::StrCat("http://", host, ":", port);
  }
  // The phone channel's lines are served where the runs workers wait on them: by this process's
  // media listener, whose address their tokens carry for the edges to relay to, else by its
  // edge. A runs role with neither (--media-addr off, no edge) has none: its phone runs fail.
  RETURN_IF_ERROR(BindMedia(s));
  if (s->media_server != nullptr) {
    s->phone_lines = std::make_unique<runs::PhoneLines>(s->base_url, s->media_advertised,
                                                        s->internal_credential);
  } else if (HasRole(config, "edge") && HasRole(config, "runs")) {
    s->phone_lines = std::make_unique<runs::PhoneLines>(s->base_url);
  }
  return absl::OkStatus();
}

// The answer to a checked presigned link of `call_id`: the stored recording as a file, the
// blob store's own when it keeps one on this disk, else a temporary copy.
edge::LocalResponse RecordingResponse(const ServerState& state, int64_t call_id) {
  absl::StatusOr<calls::StoredRecording> recording = state.recording_locator(call_id);
  if (!recording.ok()) return ErrorResponse(recording.status());
  edge::LocalResponse response;
  response.content_type = recording->content_type;
  response.accept_ranges = true;  // a browser's player seeks by Range
  if (std::optional<std::string> local = state.recordings->LocalPath(recording->key)) {
    response.file_path = *local;
    return response;
  }
  const std::string copy =
      absl::StrCat(state.scratch_dir, "/serve-", call_id, "-", HexEncode(RandomBytes(8)));
  absl::Status fetched =
      state.recordings->Download(recording->key, copy, state.config.max_recording_bytes);
  if (!fetched.ok()) {
    LogWarn("the recording cannot be read from storage", {{"call_id", call_id}, {"error", fetched}});
    // The store's trouble is the service's to fix: the client may try again.
    return ErrorResponse(fetched.code() == absl::StatusCode::kNotFound
                             ? fetched
                             : absl::UnavailableError(
                                   "the recording cannot be read from storage now; try again"));
  }
  response.file_path = copy;
  response.delete_file_after_open = true;
  return response;
}

namespace {

// The headers a platform's event is verified by (services/agents/platform_events.h): only these
// travel on to the agents role.
constexpr const char* kPlatformEventHeaders[] = {"authorization", "x-vapi-secret",
                                                 "x-vapi-signature", "x-signature",
                                                 "x-timestamp", "x-retell-signature"};

// A voice platform's webhook (docs/api.md §5.9): no API key, the platform's own signature,
// checked by the agents role on the raw body, which the edge therefore does not transcode.
// With no key to charge, --rate-limit counts each event against its source address: each
// verification is a database read, which one address must not be able to repeat at will.
void AddPlatformEventRoute(ServerState* state, const std::string& provider) {
  const std::string path = absl::StrCat("/api/public/v1/integrations/", provider, "/events");
  edge::LocalRouteOptions limited;
  limited.rate_limit_by_address = true;
  state->http_server->AddAsyncLocalRoute(
      "POST", path,
      [state, provider, path](edge::LocalRequest r,
                              std::function<void(edge::LocalResponse)> respond) {
        if (r.path != path) {
          return respond(ErrorResponse(
              HttpError(404, "not_found", absl::StrCat("no route for POST ", r.path))));
        }
        if (!state->ready.load() || state->platform_events == nullptr) {
          return respond(ErrorResponse(absl::UnavailableError("the service is starting")));
        }
        v1::PlatformEventRequest request;
        request.set_provider(provider);
        request.set_body(std::move(r.body));
        for (const char* name : kPlatformEventHeaders) {
          auto header = r.headers.find(name);
          if (header != r.headers.end()) (*request.mutable_headers())[name] = header->second;
        }
        // A database read and write, or a call to the agents role: off the I/O thread.
        state->pool->Schedule([state, request = std::move(request), respond]() {
          absl::StatusOr<v1::PlatformEventResponse> handled =
              state->platform_events->Handle(request);
          if (!handled.ok()) return respond(ErrorResponse(handled.status()));
          respond(JsonResponse(200, edge::PrintJson(*handled)));
        });
      },
      limited);
}

}  // namespace

void AddLocalRoutes(ServerState* state) {
  edge::HttpServer& http = *state->http_server;
  http.AddLocalRoute("GET", "/healthz", [](const edge::LocalRequest&) {
    return JsonResponse(200, R"({"status":"ok"})");
  });
  http.AddLocalRoute("GET", "/readyz", [state](const edge::LocalRequest&) {
    if (!state->ready.load()) return ErrorResponse(absl::UnavailableError("starting"));
    // An edge that opens no database (every owner asked by address) is ready once started.
    if (state->database) {
      absl::Status ok =
          state->database->Read([](db::Connection& c) { return c.Exec("SELECT 1"); });
      if (!ok.ok()) return ErrorResponse(absl::UnavailableError("database not ready"));
    }
    return JsonResponse(200, R"({"status":"ready"})");
  });
  http.AddLocalRoute("GET", "/openapi.json", [state](const edge::LocalRequest&) {
    return JsonResponse(200, state->openapi);
  });
  // The dashboard (docs/dashboard.md): its page at / and its hashed files under /assets/.
  for (const char* path : {"/", "/assets/"}) {
    http.AddLocalRoute("GET", path, [](const edge::LocalRequest& r) {
      return edge::ServeDashboardAsset(edge::DashboardAssets(), r);
    });
  }
  AddPlatformEventRoute(state, "vapi");
  AddPlatformEventRoute(state, "retell");
  // Presigned recording links: the signature is checked here, on the I/O thread; the call's row
  // and the recording are read on the pool, since a recording in S3 is fetched whole into a
  // temporary file (up to --max-recording-bytes) before the first byte is sent, and the file
  // is unlinked once opened (the bytes go on until the response ends).
  http.AddAsyncLocalRoute("GET", "/recordings/", [state](edge::LocalRequest r,
                                                         std::function<void(edge::LocalResponse)>
                                                             respond) {
    if (!state->ready.load()) return respond(ErrorResponse(absl::UnavailableError("starting")));
    int64_t call_id = 0;
    absl::string_view id = absl::string_view(r.path).substr(std::string("/recordings/").size());
    auto expires = r.query.find("expires");
    auto signature = r.query.find("signature");
    if (!absl::SimpleAtoi(id, &call_id) || expires == r.query.end() || signature == r.query.end() ||
        !state->signer->Verify(call_id, expires->second, signature->second, absl::Now())) {
      return respond(ErrorResponse(
          ForbiddenError("invalid_signature",
                         "the recording link is invalid or has expired; fetch the call again "
                         "for a fresh presigned_recording_url")));
    }
    state->pool->Schedule([state, call_id, respond = std::move(respond)] {
      respond(RecordingResponse(*state, call_id));
    });
  });
}

absl::Status ConnectEdge(ServerState* s) {
  const ServerConfig& config = s->config;
  const std::string& internal_credential = s->internal_credential;
  if (!HasRole(config, "edge")) return absl::OkStatus();
  // Presigned links: the recording's row is the calls role's, asked like its routes.
  if (AskedOverGrpc(config, "calls", config.calls_addr)) {
    s->recording_locator = calls::NewGrpcRecordingLocator(
        CreateInternalChannel(config.calls_addr, internal_credential));
  } else {
    s->recording_locator = calls::StoreRecordingLocator(s->calls_store.get());
  }
  {
    // Roles elsewhere are reached over gRPC; roles here are called directly.
    auto remote = [&](const std::string& addr) {
      return CreateInternalChannel(addr.empty() ? config.grpc_addr : addr, internal_credential);
    };
    std::map<std::string, std::shared_ptr<grpc::Channel>> channels;
    if (!s->accounts_service) {
      channels[v1::Accounts::service_full_name()] = remote(config.accounts_addr);
    }
    if (!s->agents_service) channels[v1::Agents::service_full_name()] = remote(config.agents_addr);
    if (!s->calls_service) channels[v1::Calls::service_full_name()] = remote(config.calls_addr);
    if (!s->metrics_service) {
      channels[v1::Metrics::service_full_name()] = remote(config.metrics_addr);
    }
    s->grpc_invoker = std::make_unique<edge::GrpcInvoker>(std::move(channels), absl::Seconds(30));
    s->direct_invoker = std::make_unique<edge::DirectInvoker>(s->pool.get(), s->grpc_invoker.get());
    RETURN_IF_ERROR(RegisterDirectHandlers(*s));
    s->invoker_slot.target.store(s->direct_invoker.get());
  }
  return absl::OkStatus();
}

}  // namespace calleval
