#pragma once

// Configuration of `calleval serve` (docs/operations.md §1): every flag also reads CALLEVAL_<NAME>
// from the environment; a flag on the command line wins over the environment.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/log.h"

namespace calleval {

inline const std::set<std::string>& AllRoles() {
  static const auto* roles = new std::set<std::string>{"edge",     "calls",   "metrics", "agents",
                                                       "accounts", "scoring", "runs"};
  return *roles;
}

struct ServerConfig {
  std::string data_dir = "./data";
  // The database (common/database.h): sqlite://PATH, a path, or postgres://... Empty:
  // <data_dir>/calleval.db.
  std::string database_url;
  std::string http_addr = "127.0.0.1:8080";  // port 0 picks a free port
  std::string grpc_addr = "127.0.0.1:50051";
  // Operational metrics (Prometheus text format) at GET /metrics on a listener of their own,
  // never the public edge; port 0 picks a free port. Empty: no admin listener.
  std::string admin_addr = "127.0.0.1:9090";
  std::set<std::string> roles = AllRoles();
  // Base of presigned recording links; default http://<http_addr>.
  std::string public_base_url;
  // The phone lines' listener of a runs process without an edge (docs/channels.md, "When the
  // runs and edge roles run apart"): the /media/ routes the edges relay the carriers' traffic
  // to. Empty: 127.0.0.1:0 (a free port) when the roles include runs but not edge, else none;
  // "off": none (phone runs then fail in this process). See MediaListenAddr.
  std::string media_addr;
  // HOST:PORT the edges reach that listener at, carried in the lines' tokens; empty: the
  // listener's own address (which must then not be a wildcard).
  std::string media_advertise_addr;
  int workers = 0;      // scoring workers; 0 = number of cores
  int run_workers = 4;  // runs held at once by the runs role
  int http_threads = 2;
  // Pools of their own for slow work reached through the edge, so ingest and reads never wait
  // behind it: the code sandbox (validate_code, test_code) and the LLM (generate). Requests
  // beyond the threads plus the queue answer 503 "overloaded" with Retry-After.
  int sandbox_pool_threads = 2;
  int sandbox_pool_queue = 8;
  int llm_pool_threads = 4;
  int llm_pool_queue = 16;
  int64_t max_body_bytes = 16 << 20;
  // Connections the edge holds at once (more are closed on accept; lowered to fit
  // RLIMIT_NOFILE), how long a request's header may take once begun (slowloris), and how long a
  // keep-alive connection may sit idle.
  int max_connections = 10000;
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration presign_validity = absl::Hours(1);
  // 32 bytes sealing agents' web channel credentials; default <data-dir>/credentials-key
  // (created on first start, mode 0600). Point it at a mounted secret to keep it off the disk
  // that holds the database.
  std::string credentials_key_file;
  // Where recordings are kept (common/blob_store.h): a directory (default
  // <data-dir>/recordings) or s3://bucket/prefix?endpoint=&region= with credentials from
  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Every process of an installation is given the
  // same one; with S3 no role reads another's working dir.
  std::string recordings_url;
  // The key that signs presigned recording links (the calls role) and checks them (the edge).
  // Default <data-dir>/signing-key, created on first start; processes with their own working
  // dirs must all be given the same file (a mounted Secret), which must then exist.
  std::string signing_key_file;
  // The installation's internal credential (common/internal_credential.h): a file holding the
  // secret that opens internal gRPC methods, sent by this process to the roles it calls. Every
  // process of an installation must be given the same one (the same file, or a mounted
  // Kubernetes Secret). Default <data-dir>/internal-credential, created on first start (mode
  // 0600), so processes sharing a data dir share it.
  std::string internal_credential_file;
  // Hosts exempt from the public-address rule of docs/api.md §8, exactly as written in URLs.
  std::vector<std::string> allow_private_hosts;
  // Where roles not run by this process are reached (default: grpc_addr).
  std::string accounts_addr, agents_addr, calls_addr, metrics_addr;
  bool access_log = true;
  // The log on stderr (common/log.h): text or one JSON object per line, and the least level
  // written.
  LogFormat log_format = LogFormat::kText;
  LogLevel log_level = LogLevel::kInfo;
  double rate_limit_per_second = 0;  // per API key; 0 = unlimited
  int rate_limit_burst = 0;
  int64_t max_recording_bytes = int64_t{512} << 20;
  absl::Duration download_timeout = absl::Minutes(5);
  // How long a scoring worker's lease on a call lasts; the worker renews it every third of
  // that while it scores (a heartbeat), so a dead worker's call is taken over within it.
  absl::Duration analysis_lease = absl::Seconds(30);
  // This process's lease holder id, carried by the lease tokens it takes: a restart releases
  // every lease of its previous life at once. Empty: <hostname>/<roles>. Processes sharing a
  // database on one host with the same roles need distinct ones.
  std::string lease_holder;
  // The code sandbox (docs/api.md §6): bubblewrap and Debian's python3 (which must live under /usr,
  // the only tree mounted in the sandbox).
  std::string sandbox_bwrap = "/usr/bin/bwrap";
  // The LLM provider (docs/api.md §7): any OpenAI-compatible chat-completions endpoint, e.g.
  // https://api.openai.com/v1. Empty: LLM metrics fail llm_unavailable, generate answers 503.
  std::string llm_base_url;
  std::string llm_api_key;
  std::string llm_model;
  // Single-sample LLM questions of one call asked in one request (1: each on its own, for
  // models that judge worse with several questions at once).
  int llm_batch_size = 8;
  // Provider requests this process has in flight at once; more wait their turn.
  int llm_max_in_flight = 8;
  std::string sandbox_python = "/usr/bin/python3";
  // Speech-to-text (docs/api.md §7): any OpenAI-compatible /audio/transcriptions endpoint, e.g.
  // https://api.openai.com/v1 with model whisper-1. Empty: the embedded recognizer
  // (PocketSphinx with Debian's US-English model).
  std::string stt_base_url;
  std::string stt_api_key;
  std::string stt_model = "whisper-1";
  std::string stt_language;  // ISO-639-1 hint for the endpoint ("en"); empty: detected
  // Recordings transcribed at once by this process; each embedded recognizer holds its model
  // (about 140 MB) and one core while it runs.
  int stt_workers = 1;
  // A PEM file of further certificate authorities trusted when dialing wss:// agents (an
  // on-premise agent with a private CA); the system's trust store is always used.
  std::string agent_ca_file;
  // Room runs' WebRTC (docs/channels.md, "LiveKit rooms"): a STUN server ("stun://host:port")
  // and TURN relays ("turn://user:password@host:port" or turns://, comma-separated).
  std::string stun_server;
  std::string turn_servers;
  // Text-to-speech for simulated callers (docs/api.md §7): any OpenAI-compatible /audio/speech
  // endpoint; empty: the embedded synthesizer (eSpeak NG).
  std::string tts_base_url;
  std::string tts_api_key;
  std::string tts_model = "tts-1";
  std::string tts_voice = "alloy";
  // Where the carriers' and platforms' REST APIs are (docs/channels.md): operator settings,
  // never workspace input, so a workspace cannot aim the service at an address of its choosing.
  // Tests point them at local servers.
  std::string twilio_api_url = "https://api.twilio.com";
  std::string telnyx_api_url = "https://api.telnyx.com";
  std::string plivo_api_url = "https://api.plivo.com";
  std::string vapi_api_url = "https://api.vapi.ai";
  std::string retell_api_url = "https://api.retellai.com";
  // Where Retell's web calls' LiveKit rooms are (docs/channels.md, "LiveKit rooms").
  std::string retell_room_url = "wss://retell-ai-4ihahnq7.livekit.cloud";
  // How long an agent's phone may ring before a phone run ends `no_answer` (docs/channels.md);
  // the carriers are asked for it when the call is placed.
  absl::Duration ring_timeout = absl::Seconds(30);
  // How long a phone run whose agent calls in awaits its call (docs/channels.md, "The agent
  // calls in"); tests shorten it.
  absl::Duration phone_call_in_timeout = absl::Minutes(2);
  // How long a transcription worker's lease on a recording lasts, renewed like the analysis
  // lease while it transcribes (an hour of audio takes about 6 minutes with the embedded
  // recognizer, which the heartbeat covers).
  absl::Duration transcription_lease = absl::Seconds(30);
  // Alert rules (docs/api.md §5.11): every rule is evaluated at least this often (and an
  // evaluation without new samples counts towards the damping only this far apart from the
  // last); a failed notification's first retry waits alert_retry_base (later ones 3, 12, 60, 180
  // and 360 times it); a rule that resolved fires again within alert_quiet_period only on three
  // evaluations in a row. Tests shorten them.
  absl::Duration alert_evaluation_interval = absl::Seconds(60);
  absl::Duration alert_retry_base = absl::Seconds(10);
  absl::Duration alert_quiet_period = absl::Minutes(10);
};

// Parses `serve` flags (argv after the subcommand) over the environment's CALLEVAL_* values.
// Errors are usage errors naming the flag (exit status 2). `help` (may be null) is set when
// --help or -h was given; the config is then the defaults.
absl::StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args,
                                               bool* help = nullptr);

// The address the phone lines' listener binds (--media-addr resolved against the roles), or
// empty when this process has none.
std::string MediaListenAddr(const ServerConfig& config);
// The media flags against each other and the roles: InvalidArgument naming the flag at fault.
absl::Status ValidateMediaFlags(const ServerConfig& config);

// `calleval serve --help`: every flag with its default, environment variable and meaning,
// generated from the table the parser uses.
std::string ServeHelp();

}  // namespace calleval
