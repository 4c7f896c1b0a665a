#pragma once

// The runs role: workers lease queued runs, hold the conversation over the run's channel,
// ingest it as a call (call_identifier "run-<id>") and, once the call is scored, report the
// run completed with `passed` (docs/api.md §5). Channels this installation cannot serve end the run
// failed with an error that says so.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "calleval/v1/agents.pb.h"
#include "calleval/v1/calls.pb.h"
#include "calleval/v1/metrics.pb.h"
#include "common/blob_store.h"
#include "common/lease_heartbeat.h"
#include "common/llm_client.h"
#include "common/polling_workers.h"
#include "common/url_guard.h"
#include "services/agents/web_channel.h"
#include "services/runs/carrier.h"
#include "services/runs/phone_lines.h"
#include "services/runs/platform_run.h"
#include "services/runs/run_agents.h"
#include "services/runs/run_calls.h"
#include "services/runs/run_queue.h"
#include "services/runs/runs_store.h"
#include "services/runs/speech_synthesizer.h"
#include "services/runs/voice_session.h"
#include "services/scoring/speech_to_text.h"

namespace calleval::runs {

// What a run needs from the other services of the installation: each service's part through
// the interface it answers, in this process or over its internal methods, so the workers never
// read another service's tables.
struct RunDependencies {
  // The agents service's part: the run's scenario and agent, the agent's web channel. Must
  // outlive the workers.
  RunAgents* agents = nullptr;
  // The calls service's part: the run's call ingested and read back. Must outlive the workers.
  RunCalls* calls = nullptr;
  // The metrics service's part: the definitions of a call's metrics (MetricsStore::Definitions).
  std::function<absl::StatusOr<std::vector<v1::Metric>>(int64_t workspace_id,
                                                        const std::vector<int64_t>& ids)>
      metric_definitions;
  LlmClient* llm = nullptr;  // null: the text channel is unavailable
  // The websocket channel: where a run's recording is put (the installation's blob store,
  // --recordings-url) before its call is ingested naming it; null: websocket runs fail.
  BlobStore* recordings = nullptr;
  // Hears the agent's turns for a caller played by the LLM over the websocket channel (the
  // embedded recognizer or an OpenAI-compatible transcriptions endpoint); null: such runs fail.
  std::function<absl::StatusOr<std::unique_ptr<scoring::SpeechRecognizer>>(
      const std::atomic<bool>* cancel)>
      make_recognizer;
  // The caller's voice: an OpenAI-compatible speech endpoint when configured; null: eSpeak NG.
  std::function<std::unique_ptr<SpeechSynthesizer>(const std::atomic<bool>* cancel)>
      make_synthesizer;
  // The phone channel: the lines this process's edge serves under /media/ (null: no edge here
  // serves them, and phone runs fail saying so).
  PhoneLines* phone_lines = nullptr;
  // How long an agent's phone may ring before the run ends `no_answer`.
  absl::Duration ring_timeout = absl::Seconds(30);
  // How long a run whose agent calls in (call_directions without `inbound`) awaits the agent's
  // call before it ends `no_answer`.
  absl::Duration call_in_timeout = absl::Minutes(2);
  // Whether the carriers' incoming-call webhooks reach this process's lines: they carry no token
  // to route by, so only an edge in this process answers them (docs/channels.md).
  bool takes_incoming_calls = true;
  UrlGuardOptions url_guard;  // the operator's allow-list for the agents' URLs
  std::string agent_ca_file;  // further trusted CAs for wss:// agents (--agent-ca-file)
  // Room runs' WebRTC: the installation's STUN server and TURN relays
  // ("turn://user:password@host:port"), and the local addresses to gather host candidates on
  // (empty: every interface).
  std::string stun_server;
  std::vector<std::string> turn_servers;
  std::vector<std::string> webrtc_local_addresses;
  // The carriers' and platforms' REST APIs (--twilio-api-url ...), and the base URL at which
  // they reach this installation (--public-base-url; the media websocket and the webhooks are
  // under <public_base_url>/media/<carrier>/).
  ProviderApiUrls provider_urls;
  std::string public_base_url;
};

// docs/api.md §5: true when every metric with a structured_output ended meets_expectations or
// exceeds_expectations (so true when none has one).
bool RunPassed(const v1::Call& call, const std::vector<v1::Metric>& definitions);

class RunWorkers {
 public:
  struct Options {
    int workers = 2;
    absl::Duration poll_interval = absl::Seconds(1);
    // A run's lease; the pool's heartbeat renews every lease it holds every third of this, so
    // a dead worker's run is taken over within it.
    absl::Duration lease = absl::Seconds(30);
    int max_attempts = 3;
    // This process's lease holder id, carried by the tokens it takes (RunQueue::Lease).
    std::string holder;
    // How long a run waits for its call to be scored before it fails.
    absl::Duration scoring_timeout = absl::Minutes(30);
    RunDependencies deps;
  };
  // `queue` must outlive the workers.
  RunWorkers(RunQueue* queue, Options options) : queue_(queue), options_(std::move(options)) {}
  ~RunWorkers() { Stop(); }

  void Start();
  // Wakes a worker now (a run was queued).
  void Notify() { workers_.Notify(); }
  // Stops leasing; runs in progress give their lease back and resume on the next start.
  void Stop() {
    workers_.Stop();
    if (heartbeat_) heartbeat_->Stop();
  }

 private:
  // Leases one run and holds it to its end; false when none was queued.
  bool WorkOnce();
  // Runs one leased job to its end; nullopt when it was interrupted by Stop() or the agents
  // service could not answer for the scenario or agent (released, tried again), or when its
  // lease was lost (`held`, may be null).
  std::optional<RunOutcome> Execute(RunJob& job, const LeaseHeartbeat::Held* held);
  // Holds the conversation of a text run and ingests it; the call's id.
  absl::StatusOr<int64_t> TextRun(const RunJob& job, const v1::Scenario& scenario,
                                  const v1::Agent& agent, std::string* end_reason);
  // Calls the agent's websocket (`web`, with its credentials) as the caller, records both sides
  // and ingests the recording; the call's id. kCancelled when the workers stop. `platform`: the
  // websocket is a call on a voice platform (its hang-up message is sent at the end, and the
  // call's metadata names it); null for the agent's own websocket.
  absl::StatusOr<int64_t> WebsocketRun(const RunJob& job, const v1::Scenario& scenario,
                                       const v1::Agent& agent, const agents::WebChannel& web,
                                       const PlatformWebCall* platform, std::string* end_reason);
  // Joins the agent's LiveKit room (docs/channels.md, "LiveKit rooms"): `rubric` creates it with
  // the agent's or the workspace's room credentials and deletes it after; `client` asks the
  // agent's bot_runner_url for it. Then as WebsocketRun.
  // `platform`: a platform's call in a room (Retell's), joined with the room it names.
  absl::StatusOr<int64_t> RoomRun(const RunJob& job, const v1::Scenario& scenario,
                                  const v1::Agent& agent, const agents::WebChannel& web,
                                  const PlatformWebCall* platform, std::string* end_reason);
  // Has the agent's carrier dial the agent (docs/channels.md) and plays the caller on the call,
  // or, for an agent that calls in (its call_directions lack `inbound`), awaits its call on one
  // of the workspace's numbers (having Retell place it, for an external_retell agent),
  // records both sides and ingests the recording; the call's id. A call that never became a
  // conversation (busy, no_answer, voicemail, carrier_error) is an error with `end_reason` set.
  // The version of the agent Retell says places its call goes on `job` (platform_version).
  absl::StatusOr<int64_t> PhoneRun(RunJob& job, const v1::Scenario& scenario,
                                   const v1::Agent& agent, const CarrierAccount& account,
                                   std::string* end_reason);
  // The voice caller of a run, for both voice channels: the scenario's lines, or the LLM
  // playing persona and goal (hearing the agent through `ears`, kept alive by the caller).
  absl::Status CallerSession(const v1::Scenario& scenario, const v1::Agent& agent,
                             VoiceSessionOptions* session,
                             std::unique_ptr<scoring::SpeechRecognizer>* ears);
  std::unique_ptr<SpeechSynthesizer> CallerVoice();
  // Puts the recording in the blob store and ingests the call naming it; the call's id.
  // `platform`: as WebsocketRun's.
  absl::StatusOr<int64_t> IngestRecording(const RunJob& job, const v1::Scenario& scenario,
                                          const VoiceRecording& recording,
                                          const std::string& end_reason,
                                          const PlatformWebCall* platform = nullptr);

  RunQueue* queue_;
  Options options_;
  // Renews the leases of the runs in progress (one thread for the pool).
  std::unique_ptr<LeaseHeartbeat> heartbeat_;
  PollingWorkers workers_;
};

}  // namespace calleval::runs
