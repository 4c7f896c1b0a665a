#include "cmd/calleval/server_config.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cmd/flags.h"
#include "common/lease_heartbeat.h"
#include "common/status_macros.h"
#include "common/url_guard.h"

namespace calleval {
namespace {

using cli::BoolFlag;
using cli::IntFlag;
using cli::SecondsFlag;
using cli::StringFlag;
using Flag = cli::Flag<ServerConfig>;

constexpr char kEnvPrefix[] = "CALLEVAL_";

Flag RolesFlag() {
  Flag flag;
  flag.name = "roles";
  flag.value_name = "LIST";
  flag.description = absl::StrCat("comma list of the roles this process runs: all, ",
                                  absl::StrJoin(AllRoles(), ", "));
  flag.get = [](const ServerConfig& c) {
    return c.roles == AllRoles() ? std::string("all") : absl::StrJoin(c.roles, ",");
  };
  flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
    c->roles.clear();
    for (absl::string_view role : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      std::string r(absl::StripAsciiWhitespace(role));
      if (r == "all") {
        c->roles = AllRoles();
        continue;
      }
      if (AllRoles().count(r) == 0) {
        return cli::UsageError(absl::StrCat("unknown role ", r, " (known: all, ",
                                            absl::StrJoin(AllRoles(), ", "), ")"));
      }
      c->roles.insert(r);
    }
    if (c->roles.empty()) return cli::UsageError("no role given");
    return absl::OkStatus();
  };
  return flag;
}

Flag RateLimitFlag() {
  Flag flag;
  flag.name = "rate-limit";
  flag.value_name = "PER_SECOND";
  flag.description = "requests per second per API key (429 with Retry-After beyond); 0: unlimited";
  flag.get = [](const ServerConfig& c) { return absl::StrCat(c.rate_limit_per_second); };
  flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
    double rate = 0;
    if (!absl::SimpleAtod(v, &rate) || !(rate >= 0) || rate > 1e9) {
      return cli::UsageError(absl::StrCat("not a number of requests per second >= 0: ", v));
    }
    c->rate_limit_per_second = rate;
    c->rate_limit_burst = static_cast<int>(rate * 2) + 1;
    return absl::OkStatus();
  };
  return flag;
}

Flag LogFormatFlag() {
  Flag flag;
  flag.name = "log-format";
  flag.value_name = "FORMAT";
  flag.description = "the log on stderr: text (key=value) or json (one object per line)";
  flag.get = [](const ServerConfig& c) { return std::string(LogFormatName(c.log_format)); };
  flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
    absl::StatusOr<LogFormat> format = ParseLogFormat(v);
    if (!format.ok()) return cli::UsageError(format.status().message());
    c->log_format = *format;
    return absl::OkStatus();
  };
  return flag;
}

Flag LogLevelFlag() {
  Flag flag;
  flag.name = "log-level";
  flag.value_name = "LEVEL";
  flag.description = "the least level logged: debug, info, warn or error";
  flag.get = [](const ServerConfig& c) { return std::string(LogLevelName(c.log_level)); };
  flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
    absl::StatusOr<LogLevel> level = ParseLogLevel(v);
    if (!level.ok()) return cli::UsageError(level.status().message());
    c->log_level = *level;
    return absl::OkStatus();
  };
  return flag;
}

// A provider's REST API base (--twilio-api-url ...): http or https with a host, no query or
// fragment; a trailing '/' is dropped so paths join cleanly.
Flag ProviderUrlFlag(std::string name, std::string provider, std::string ServerConfig::*field) {
  Flag flag = StringFlag(std::move(name), "URL", field,
                         absl::StrCat(provider, "'s REST API base (an operator setting; tests "
                                      "point it at a local server)"));
  flag.set = [field](absl::string_view v, ServerConfig* c) -> absl::Status {
    const absl::string_view url = absl::StripSuffix(v, "/");
    const bool http = absl::StartsWith(url, "http://") || absl::StartsWith(url, "https://");
    const size_t host_at = url.find("//") + 2;
    if (!http || host_at >= url.size() || url[host_at] == '/' ||
        url.find_first_of("?#") != absl::string_view::npos) {
      return cli::UsageError(
          absl::StrCat("not an http(s) base URL with a host (no query or fragment): ", v));
    }
    c->*field = std::string(url);
    return absl::OkStatus();
  };
  return flag;
}

// HOST:PORT with a port (0 allowed only when `zero_port`); IPv6 hosts in brackets.
bool IsHostPort(absl::string_view v, bool zero_port, absl::string_view* host) {
  const size_t colon = v.rfind(':');
  int port = -1;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(v.substr(colon + 1), &port) || port < (zero_port ? 0 : 1) ||
      port > 65535) {
    return false;
  }
  *host = v.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    host->remove_prefix(1);
    host->remove_suffix(1);
  }
  if (host->empty() || host->find_first_of(" /?#@") != absl::string_view::npos) return false;
  // An unbracketed IPv6 host would be ambiguous with the port.
  return host->find(':') == absl::string_view::npos || v.front() == '[';
}

bool IsWildcardHost(absl::string_view host) {
  return host == "0.0.0.0" || host == "::" || host == "[::]";
}

const std::vector<Flag>& Flags() {
  static const auto* flags = new std::vector<Flag>{
      StringFlag("data-dir", "DIR", &ServerConfig::data_dir,
                 "database (calleval.db), recordings, signing key, bootstrap key"),
      StringFlag("database-url", "URL", &ServerConfig::database_url,
                 "the database: sqlite://PATH (or a path) or postgres://USER@HOST/DB?... "
                 "(libpq's URI form; a password is better in PGPASSWORD or ~/.pgpass); "
                 "unused, and none opened, by a process of edge, scoring or runs roles given "
                 "the four --*-addr",
                 "sqlite://<data-dir>/calleval.db"),
      StringFlag("http-addr", "HOST:PORT", &ServerConfig::http_addr,
                 "the JSON edge; port 0 picks a free port (printed at start)"),
      StringFlag("grpc-addr", "HOST:PORT", &ServerConfig::grpc_addr,
                 "the gRPC services, health and reflection"),
      [] {
        Flag flag = StringFlag("admin-addr", "HOST:PORT", &ServerConfig::admin_addr,
                               "operational metrics (Prometheus text format) at GET /metrics, "
                               "apart from the public edge; port 0 picks a free port (printed "
                               "at start); \"\" or off: none");
        flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
          if (v.empty() || v == "off") {
            c->admin_addr.clear();
            return absl::OkStatus();
          }
          const size_t colon = v.rfind(':');
          int port = -1;
          if (colon == absl::string_view::npos || !absl::SimpleAtoi(v.substr(colon + 1), &port) ||
              port < 0 || port > 65535) {
            return cli::UsageError(absl::StrCat("bad address (want HOST:PORT or off): ", v));
          }
          c->admin_addr = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      RolesFlag(),
      [] {
        Flag flag = StringFlag("public-base-url", "URL", &ServerConfig::public_base_url,
                               "base of presigned recording links", "http://<http-addr>");
        flag.set = [](absl::string_view v, ServerConfig* c) {
          c->public_base_url = std::string(absl::StripSuffix(v, "/"));
          return absl::OkStatus();
        };
        return flag;
      }(),
      [] {
        Flag flag = StringFlag(
            "media-addr", "HOST:PORT", &ServerConfig::media_addr,
            "a runs process's listener for its phone lines (the /media/ routes the edges relay "
            "the carriers' traffic to, docs/channels.md); port 0 picks a free port (printed at "
            "start); off: none, phone runs then fail here",
            "127.0.0.1:0 with the runs role and no edge, else off");
        flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
          absl::string_view host;
          if (v != "off" && !v.empty() && !IsHostPort(v, /*zero_port=*/true, &host)) {
            return cli::UsageError(absl::StrCat("bad address (want HOST:PORT or off): ", v));
          }
          c->media_addr = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      [] {
        Flag flag = StringFlag(
            "media-advertise-addr", "HOST:PORT", &ServerConfig::media_advertise_addr,
            "where the edges reach --media-addr (in Kubernetes the pod's IP), carried in the "
            "phone lines' tokens",
            "--media-addr as bound");
        flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
          absl::string_view host;
          if (!v.empty() && (!IsHostPort(v, /*zero_port=*/false, &host) || IsWildcardHost(host))) {
            return cli::UsageError(absl::StrCat(
                "bad address (want a HOST:PORT other processes can connect to): ", v));
          }
          c->media_advertise_addr = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      IntFlag("workers", "N", &ServerConfig::workers, 0, 256,
              "scoring workers (threads) of the scoring role; 0: one per core"),
      SecondsFlag("analysis-lease-seconds", &ServerConfig::analysis_lease, 1,
                  "how long a scoring worker's lease on a call lasts; renewed every third of "
                  "it while the call is scored, so a dead worker's call is taken over within it"),
      [] {
        Flag flag = StringFlag("lease-holder", "ID", &ServerConfig::lease_holder,
                               "this process's lease holder id, carried by its lease tokens; a "
                               "restart releases every lease its previous life held (no ':' or "
                               "spaces)",
                               "<hostname>/<roles>");
        flag.set = [](absl::string_view v, ServerConfig* c) -> absl::Status {
          if (!v.empty()) {
            absl::Status valid = ValidateLeaseHolder(v);
            if (!valid.ok()) return cli::UsageError(valid.message());
          }
          c->lease_holder = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      IntFlag("http-threads", "N", &ServerConfig::http_threads, 1, 64, "edge I/O threads"),
      IntFlag("max-body-bytes", "BYTES", &ServerConfig::max_body_bytes, 1024,
              std::numeric_limits<int64_t>::max(), "request body limit (413 beyond)"),
      IntFlag("max-connections", "N", &ServerConfig::max_connections, 1, 1000000,
              "connections the edge holds at once; more are closed on accept (lowered to fit "
              "RLIMIT_NOFILE)"),
      SecondsFlag("header-timeout-seconds", &ServerConfig::header_timeout, 1,
                  "a request's header must be complete this long after its first byte "
                  "(slowloris)"),
      SecondsFlag("idle-timeout-seconds", &ServerConfig::idle_timeout, 1,
                  "an idle keep-alive connection is closed after this long"),
      SecondsFlag("presign-ttl-seconds", &ServerConfig::presign_validity, 1,
                  "validity of presigned recording links"),
      [] {
        Flag flag;
        flag.name = "allow-private-hosts";
        flag.value_name = "HOSTS";
        flag.description =
            "comma list of hosts exempt from the public-address rule, matched exactly as written "
            "in URLs (on-premise installs, tests)";
        flag.get = [](const ServerConfig& c) { return absl::StrJoin(c.allow_private_hosts, ","); };
        flag.set = [](absl::string_view v, ServerConfig* c) {
          c->allow_private_hosts = ParseAllowedHosts(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      StringFlag("accounts-addr", "HOST:PORT", &ServerConfig::accounts_addr,
                 "where the accounts role is reached when this process does not run it",
                 "--grpc-addr"),
      StringFlag("agents-addr", "HOST:PORT", &ServerConfig::agents_addr,
                 "where the agents role is reached when this process does not run it",
                 "--grpc-addr"),
      StringFlag("calls-addr", "HOST:PORT", &ServerConfig::calls_addr,
                 "where the calls role is reached when this process does not run it (a scoring "
                 "process with it leases over gRPC; without it, from the shared database)",
                 "--grpc-addr"),
      StringFlag("metrics-addr", "HOST:PORT", &ServerConfig::metrics_addr,
                 "where the metrics role is reached when this process does not run it",
                 "--grpc-addr"),
      BoolFlag("access-log", &ServerConfig::access_log, "one log line per request"),
      LogFormatFlag(),
      LogLevelFlag(),
      RateLimitFlag(),
      IntFlag("max-recording-bytes", "BYTES", &ServerConfig::max_recording_bytes, 1,
              std::numeric_limits<int64_t>::max(), "recording download cap"),
      StringFlag("llm-base-url", "URL", &ServerConfig::llm_base_url,
                 "an OpenAI-compatible chat-completions endpoint (docs/llm.md); none: LLM "
                 "metrics end llm_unavailable"),
      StringFlag("llm-api-key", "KEY", &ServerConfig::llm_api_key, "the LLM provider's API key"),
      StringFlag("llm-model", "MODEL", &ServerConfig::llm_model, "the LLM provider's model"),
      IntFlag("llm-batch-size", "N", &ServerConfig::llm_batch_size, 1, 32,
              "single-sample LLM questions of one call asked in one request"),
      IntFlag("llm-max-in-flight", "N", &ServerConfig::llm_max_in_flight, 1, 256,
              "LLM provider requests this process has open at once"),
      IntFlag("sandbox-pool-threads", "N", &ServerConfig::sandbox_pool_threads, 1, 256,
              "validate_code and test_code requests run at once (from the edge or over gRPC)"),
      IntFlag("sandbox-pool-queue", "N", &ServerConfig::sandbox_pool_queue, 1, 100000,
              "validate_code and test_code requests waiting for a thread; more answer 503"),
      IntFlag("llm-pool-threads", "N", &ServerConfig::llm_pool_threads, 1, 256,
              "generate requests run at once (from the edge or over gRPC)"),
      IntFlag("llm-pool-queue", "N", &ServerConfig::llm_pool_queue, 1, 100000,
              "generate requests waiting for a thread; more answer 503"),
      StringFlag("stt-base-url", "URL", &ServerConfig::stt_base_url,
                 "an OpenAI-compatible /audio/transcriptions endpoint (docs/speech-to-text.md); "
                 "none: the embedded PocketSphinx recognizer"),
      StringFlag("stt-api-key", "KEY", &ServerConfig::stt_api_key,
                 "the speech-to-text endpoint's API key"),
      StringFlag("stt-model", "MODEL", &ServerConfig::stt_model,
                 "the speech-to-text endpoint's model"),
      StringFlag("stt-language", "LANG", &ServerConfig::stt_language,
                 "ISO-639-1 language hint for the speech-to-text endpoint; none: detected"),
      IntFlag("stt-workers", "N", &ServerConfig::stt_workers, 0, 64,
              "recordings the scoring role transcribes at once (one core each, and a model's "
              "memory with the embedded recognizer); 0: none here, another scoring process must"),
      SecondsFlag("transcription-lease-seconds", &ServerConfig::transcription_lease, 1,
                  "how long a transcription worker's lease on a recording lasts; renewed every "
                  "third of it while the recording is transcribed"),
      SecondsFlag("alert-evaluation-interval-seconds", &ServerConfig::alert_evaluation_interval, 1,
                  "alert rules are evaluated at least this often (time windows slide), and "
                  "evaluations without new samples count towards resolving this far apart"),
      SecondsFlag("alert-retry-base-seconds", &ServerConfig::alert_retry_base, 1,
                  "the first retry of a failed alert notification; later ones wait 3, 12, 60, "
                  "180 and 360 times it"),
      SecondsFlag("alert-quiet-period-seconds", &ServerConfig::alert_quiet_period, 0,
                  "an alert rule that resolved less than this ago fires again only on three "
                  "evaluations in a row"),
      StringFlag("agent-ca-file", "FILE", &ServerConfig::agent_ca_file,
                 "PEM certificate authorities trusted, besides the system's, when runs dial "
                 "wss:// agents"),
      StringFlag("stun-server", "URL", &ServerConfig::stun_server,
                 "room runs' STUN server (stun://host:port); none: host and relay candidates only"),
      StringFlag("turn-servers", "URLS", &ServerConfig::turn_servers,
                 "room runs' TURN relays, comma-separated (turn://user:password@host:port, "
                 "turns://...)"),
      IntFlag("run-workers", "N", &ServerConfig::run_workers, 1, 256,
              "runs the runs role holds at once (docs/runs.md)"),
      ProviderUrlFlag("twilio-api-url", "Twilio", &ServerConfig::twilio_api_url),
      ProviderUrlFlag("telnyx-api-url", "Telnyx", &ServerConfig::telnyx_api_url),
      ProviderUrlFlag("plivo-api-url", "Plivo", &ServerConfig::plivo_api_url),
      ProviderUrlFlag("vapi-api-url", "Vapi", &ServerConfig::vapi_api_url),
      ProviderUrlFlag("retell-api-url", "Retell", &ServerConfig::retell_api_url),
      StringFlag("retell-room-url", "URL", &ServerConfig::retell_room_url,
                 "the LiveKit server of Retell's web calls (wss://)"),
      SecondsFlag("ring-timeout", &ServerConfig::ring_timeout, 5,
                  "how long an agent's phone rings before a phone run ends no_answer", 120),
      StringFlag("tts-base-url", "URL", &ServerConfig::tts_base_url,
                 "an OpenAI-compatible /audio/speech endpoint for simulated callers; none: "
                 "eSpeak NG"),
      StringFlag("tts-api-key", "KEY", &ServerConfig::tts_api_key,
                 "the text-to-speech endpoint's API key"),
      StringFlag("tts-model", "MODEL", &ServerConfig::tts_model,
                 "the text-to-speech endpoint's model"),
      StringFlag("tts-voice", "VOICE", &ServerConfig::tts_voice,
                 "the text-to-speech endpoint's voice"),
      StringFlag("credentials-key-file", "FILE", &ServerConfig::credentials_key_file,
                 "32 bytes sealing agents' web channel credentials; created on first start when "
                 "missing (mode 0600)",
                 "<data-dir>/credentials-key"),
      StringFlag("recordings-url", "URL", &ServerConfig::recordings_url,
                 "where recordings are kept: a directory, or "
                 "s3://BUCKET/PREFIX?endpoint=URL&region=NAME (S3-compatible storage; keys from "
                 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); the same for every process",
                 "<data-dir>/recordings"),
      StringFlag("signing-key-file", "FILE", &ServerConfig::signing_key_file,
                 "the key signing presigned recording links, shared by every process with the "
                 "calls or edge role; must exist when given (at least 16 bytes)",
                 "<data-dir>/signing-key"),
      StringFlag("internal-credential-file", "FILE", &ServerConfig::internal_credential_file,
                 "the installation's internal credential, which opens the internal gRPC methods; "
                 "created on first start when missing (mode 0600)",
                 "<data-dir>/internal-credential"),
      StringFlag("sandbox-bwrap", "PATH", &ServerConfig::sandbox_bwrap,
                 "bubblewrap, for code metrics (docs/code-judge.md)"),
      StringFlag("sandbox-python", "PATH", &ServerConfig::sandbox_python,
                 "the Python run inside the sandbox; must be under /usr, the only tree mounted "
                 "there"),
  };
  return *flags;
}

}  // namespace

std::string MediaListenAddr(const ServerConfig& config) {
  if (config.media_addr == "off") return "";
  if (!config.media_addr.empty()) return config.media_addr;
  const bool runs = config.roles.count("runs") > 0, edge = config.roles.count("edge") > 0;
  // Loopback and a free port: processes on one host find each other through the address the
  // tokens carry; across hosts the operator names an interface and the address to advertise.
  return runs && !edge ? "127.0.0.1:0" : "";
}

absl::Status ValidateMediaFlags(const ServerConfig& config) {
  const std::string listen = MediaListenAddr(config);
  if (!config.media_addr.empty() && config.media_addr != "off" &&
      config.roles.count("runs") == 0) {
    return absl::InvalidArgumentError(
        "--media-addr serves the runs role's phone lines, which this process does not run");
  }
  if (!config.media_advertise_addr.empty() && listen.empty()) {
    return absl::InvalidArgumentError(
        "--media-advertise-addr names the --media-addr listener, which this process does not "
        "open");
  }
  absl::string_view host;
  if (!listen.empty() && config.media_advertise_addr.empty() &&
      IsHostPort(listen, /*zero_port=*/true, &host) && IsWildcardHost(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--media-addr ", listen, " listens on every interface: give --media-advertise-addr, "
        "the HOST:PORT the edges reach it at"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args, bool* help) {
  ServerConfig config;
  cli::ParseOptions options;
  options.env_prefix = kEnvPrefix;
  ASSIGN_OR_RETURN(cli::Parsed parsed, cli::ParseFlags(Flags(), args, options, &config));
  if (help != nullptr) *help = parsed.help;
  if (absl::Status media = ValidateMediaFlags(config); !media.ok()) {
    return cli::UsageError(media.message());
  }
  return config;
}

std::string ServeHelp() {
  return absl::StrCat(
      "usage: calleval serve [--flag VALUE | --flag=VALUE ...]\n\n"
      "Runs the roles of the service (all of them by default). Each flag is also read from\n"
      "the environment variable shown with it; the command line wins. Stops on SIGTERM.\n\n"
      "flags:\n",
      cli::FlagsHelp(Flags(), kEnvPrefix));
}

}  // namespace calleval
