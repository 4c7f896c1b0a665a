#include "cmd/calleval/server_config.h"

#include <cstdlib>
#include <functional>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/url_guard.h"

namespace calleval {
namespace {

using Setter = std::function<absl::Status(const std::string& value, ServerConfig* config)>;

absl::Status ParseInt(const std::string& name, const std::string& value, int64_t* out) {
  if (!absl::SimpleAtoi(value, out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not an integer: ", value));
  }
  return absl::OkStatus();
}

absl::Status ParseBool(const std::string& name, const std::string& value, bool* out) {
  if (!absl::SimpleAtob(value, out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": not a boolean: ", value));
  }
  return absl::OkStatus();
}

const std::map<std::string, Setter>& Setters() {
  static const auto* setters = new std::map<std::string, Setter>{
      {"data-dir",
       [](const std::string& v, ServerConfig* c) {
         c->data_dir = v;
         return absl::OkStatus();
       }},
      {"http-addr",
       [](const std::string& v, ServerConfig* c) {
         c->http_addr = v;
         return absl::OkStatus();
       }},
      {"grpc-addr",
       [](const std::string& v, ServerConfig* c) {
         c->grpc_addr = v;
         return absl::OkStatus();
       }},
      {"roles",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         c->roles.clear();
         for (absl::string_view role : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
           std::string r(absl::StripAsciiWhitespace(role));
           if (r == "all") {
             c->roles = AllRoles();
             continue;
           }
           if (AllRoles().count(r) == 0) {
             return absl::InvalidArgumentError(absl::StrCat("--roles: unknown role ", r,
                                                            " (known: all, ",
                                                            absl::StrJoin(AllRoles(), ", "), ")"));
           }
           c->roles.insert(r);
         }
         if (c->roles.empty()) return absl::InvalidArgumentError("--roles: no role given");
         return absl::OkStatus();
       }},
      {"public-base-url",
       [](const std::string& v, ServerConfig* c) {
         c->public_base_url = std::string(absl::StripSuffix(v, "/"));
         return absl::OkStatus();
       }},
      {"workers",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("workers", v, &n); !s.ok()) return s;
         if (n < 0 || n > 256) return absl::InvalidArgumentError("--workers: 0..256");
         c->workers = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"http-threads",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("http-threads", v, &n); !s.ok()) return s;
         if (n < 1 || n > 64) return absl::InvalidArgumentError("--http-threads: 1..64");
         c->http_threads = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"max-body-bytes",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("max-body-bytes", v, &n); !s.ok()) return s;
         if (n < 1024) return absl::InvalidArgumentError("--max-body-bytes: at least 1024");
         c->max_body_bytes = n;
         return absl::OkStatus();
       }},
      {"max-connections",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("max-connections", v, &n); !s.ok()) return s;
         if (n < 1 || n > 1000000) {
           return absl::InvalidArgumentError("--max-connections: 1..1000000");
         }
         c->max_connections = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"header-timeout-seconds",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("header-timeout-seconds", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--header-timeout-seconds: at least 1");
         c->header_timeout = absl::Seconds(n);
         return absl::OkStatus();
       }},
      {"idle-timeout-seconds",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("idle-timeout-seconds", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--idle-timeout-seconds: at least 1");
         c->idle_timeout = absl::Seconds(n);
         return absl::OkStatus();
       }},
      {"presign-ttl-seconds",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("presign-ttl-seconds", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--presign-ttl-seconds: at least 1");
         c->presign_validity = absl::Seconds(n);
         return absl::OkStatus();
       }},
      {"allow-private-hosts",
       [](const std::string& v, ServerConfig* c) {
         c->allow_private_hosts = ParseAllowedHosts(v);
         return absl::OkStatus();
       }},
      {"accounts-addr",
       [](const std::string& v, ServerConfig* c) {
         c->accounts_addr = v;
         return absl::OkStatus();
       }},
      {"agents-addr",
       [](const std::string& v, ServerConfig* c) {
         c->agents_addr = v;
         return absl::OkStatus();
       }},
      {"calls-addr",
       [](const std::string& v, ServerConfig* c) {
         c->calls_addr = v;
         return absl::OkStatus();
       }},
      {"metrics-addr",
       [](const std::string& v, ServerConfig* c) {
         c->metrics_addr = v;
         return absl::OkStatus();
       }},
      {"access-log", [](const std::string& v,
                        ServerConfig* c) { return ParseBool("access-log", v, &c->access_log); }},
      {"rate-limit",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         if (!absl::SimpleAtod(v, &c->rate_limit_per_second) || c->rate_limit_per_second < 0) {
           return absl::InvalidArgumentError("--rate-limit: requests per second per key, >= 0");
         }
         if (c->rate_limit_burst == 0) {
           c->rate_limit_burst = static_cast<int>(c->rate_limit_per_second * 2) + 1;
         }
         return absl::OkStatus();
       }},
      {"analysis-lease-seconds",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("analysis-lease-seconds", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--analysis-lease-seconds: at least 1");
         c->analysis_lease = absl::Seconds(n);
         return absl::OkStatus();
       }},
      {"llm-base-url",
       [](const std::string& v, ServerConfig* c) {
         c->llm_base_url = v;
         return absl::OkStatus();
       }},
      {"llm-api-key",
       [](const std::string& v, ServerConfig* c) {
         c->llm_api_key = v;
         return absl::OkStatus();
       }},
      {"llm-batch-size",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("llm-batch-size", v, &n); !s.ok()) return s;
         if (n < 1 || n > 32) return absl::InvalidArgumentError("--llm-batch-size: 1..32");
         c->llm_batch_size = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"llm-max-in-flight",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("llm-max-in-flight", v, &n); !s.ok()) return s;
         if (n < 1 || n > 256) return absl::InvalidArgumentError("--llm-max-in-flight: 1..256");
         c->llm_max_in_flight = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"llm-model",
       [](const std::string& v, ServerConfig* c) {
         c->llm_model = v;
         return absl::OkStatus();
       }},
      {"agent-ca-file",
       [](const std::string& v, ServerConfig* c) {
         c->agent_ca_file = v;
         return absl::OkStatus();
       }},
      {"credentials-key-file",
       [](const std::string& v, ServerConfig* c) {
         c->credentials_key_file = v;
         return absl::OkStatus();
       }},
      {"internal-credential-file",
       [](const std::string& v, ServerConfig* c) {
         c->internal_credential_file = v;
         return absl::OkStatus();
       }},
      {"run-workers",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("run-workers", v, &n); !s.ok()) return s;
         if (n < 1 || n > 256) return absl::InvalidArgumentError("--run-workers: 1..256");
         c->run_workers = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"tts-base-url",
       [](const std::string& v, ServerConfig* c) {
         c->tts_base_url = v;
         return absl::OkStatus();
       }},
      {"tts-api-key",
       [](const std::string& v, ServerConfig* c) {
         c->tts_api_key = v;
         return absl::OkStatus();
       }},
      {"tts-model",
       [](const std::string& v, ServerConfig* c) {
         c->tts_model = v;
         return absl::OkStatus();
       }},
      {"tts-voice",
       [](const std::string& v, ServerConfig* c) {
         c->tts_voice = v;
         return absl::OkStatus();
       }},
      {"stt-base-url",
       [](const std::string& v, ServerConfig* c) {
         c->stt_base_url = v;
         return absl::OkStatus();
       }},
      {"stt-api-key",
       [](const std::string& v, ServerConfig* c) {
         c->stt_api_key = v;
         return absl::OkStatus();
       }},
      {"stt-model",
       [](const std::string& v, ServerConfig* c) {
         c->stt_model = v;
         return absl::OkStatus();
       }},
      {"stt-language",
       [](const std::string& v, ServerConfig* c) {
         c->stt_language = v;
         return absl::OkStatus();
       }},
      {"stt-workers",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("stt-workers", v, &n); !s.ok()) return s;
         if (n < 0 || n > 64) return absl::InvalidArgumentError("--stt-workers: 0..64");
         c->stt_workers = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"transcription-lease-seconds",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("transcription-lease-seconds", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--transcription-lease-seconds: at least 1");
         c->transcription_lease = absl::Seconds(n);
         return absl::OkStatus();
       }},
      {"sandbox-bwrap",
       [](const std::string& v, ServerConfig* c) {
         c->sandbox_bwrap = v;
         return absl::OkStatus();
       }},
      {"sandbox-python",
       [](const std::string& v, ServerConfig* c) {
         c->sandbox_python = v;
         return absl::OkStatus();
       }},
      {"max-recording-bytes",
       [](const std::string& v, ServerConfig* c) -> absl::Status {
         int64_t n = 0;
         if (absl::Status s = ParseInt("max-recording-bytes", v, &n); !s.ok()) return s;
         if (n < 1) return absl::InvalidArgumentError("--max-recording-bytes: at least 1");
         c->max_recording_bytes = n;
         return absl::OkStatus();
       }},
  };
  return *setters;
}

std::string EnvName(const std::string& flag) {
  return absl::StrCat("CALLEVAL_", absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}

}  // namespace

absl::StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args) {
  ServerConfig config;
  for (const auto& [name, set] : Setters()) {
    if (const char* value = std::getenv(EnvName(name).c_str()); value != nullptr && *value) {
      if (absl::Status s = set(value, &config); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(EnvName(name), ": ", s.message()));
      }
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument: ", args[i]));
    }
    std::string name, value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else {
      name = std::string(arg);
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[++i];
    }
    auto setter = Setters().find(name);
    if (setter == Setters().end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (absl::Status s = setter->second(value, &config); !s.ok()) return s;
  }
  return config;
}

std::string ServeUsage() {
  std::string out =
      "usage: calleval serve [--flag value ...]\nflags (each also CALLEVAL_<NAME>):\n";
  for (const auto& [name, set] : Setters()) absl::StrAppend(&out, "  --", name, "\n");
  return out;
}

}  // namespace calleval
