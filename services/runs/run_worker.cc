#include "services/runs/run_worker.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/errors.h"
#include "common/log.h"
#include "common/telemetry.h"
#include "nlohmann/json.hpp"
#include "services/agents/agent_rules.h"
#include "services/runs/livekit_api.h"
#include "services/runs/livekit_room.h"
#include "services/runs/phone_run.h"
#include "services/runs/platform_run.h"
#include "services/runs/text_channel.h"
#include "services/runs/voice_session.h"
#include "services/runs/websocket_client.h"

namespace calleval::runs {
namespace {

RunOutcome Failed(std::string error) { return {"failed", std::nullopt, "", std::move(error)}; }

// Why a web transport cannot be served here (the websocket transport aside).
std::string UnservedTransport(const std::string& transport) {
  if (transport == "daily") {
    return "the daily transport is not served: Daily's room signalling has no public protocol a "
           "caller outside Daily's own SDKs could speak (docs/channels.md, \"LiveKit rooms\")";
  }
  return absl::StrCat("the ", transport, " transport reaches agents through the ", transport,
                      " platform, which this installation cannot call");
}

// Why a phone call that did not become a conversation ended, for the run's error.
std::string PhoneCallEndedMessage(const PhoneCallResult& call) {
  std::string why;
  if (call.end_reason == "busy") {
    why = "the agent's line was busy";
  } else if (call.end_reason == "no_answer") {
    why = call.awaited_number.empty() ? "the agent did not answer" : "no call came";
  } else if (call.end_reason == "agent_hangup") {
    why = "the agent hung up before the carrier streamed the call";
  } else if (call.end_reason == "voicemail") {
    why = "the call reached voicemail (answering-machine detection heard a machine)";
  } else {
    why = "the carrier could not connect the call";
  }
  if (!call.detail.empty()) absl::StrAppend(&why, ": ", call.detail);
  return why;
}

bool Cancelled(const absl::Status& status) {
  return status.code() == absl::StatusCode::kCancelled ||
         absl::StrContains(status.message(), "llm_cancelled");
}

// The call a run's conversation becomes: call_identifier "run-<id>", the scenario's metrics,
// and the run in the metadata for the clients reading the call (the calls service takes the
// run's origin from the ingest's own fields, never from the metadata).
v1::IngestCallRequest RunCallRequest(const RunJob& job, const v1::Scenario& scenario,
                                     const std::string& end_reason) {
  v1::IngestCallRequest ingest;
  ingest.set_call_identifier(absl::StrCat("run-", job.run_id));
  ingest.set_agent_id(job.agent_id);
  for (int64_t id : scenario.metric_ids()) ingest.add_metric_ids(id);
  auto& metadata = *ingest.mutable_metadata()->mutable_fields();
  metadata["run_id"].set_number_value(static_cast<double>(job.run_id));
  metadata["scenario_id"].set_number_value(static_cast<double>(job.scenario_id));
  metadata["end_reason"].set_string_value(end_reason);
  return ingest;
}

// Ingests the run's call; the call's id.
absl::StatusOr<int64_t> IngestRunCall(RunCalls& calls, const RunJob& job,
                                      const v1::IngestCallRequest& ingest,
                                      const std::optional<RunRecording>& recording) {
  // The platform's version of the agent comes from what the platform answered the run, never
  // from the call's metadata.
  absl::StatusOr<v1::Call> call =
      calls.Ingest(job.workspace_id, ingest,
                   RunCallOrigin{job.run_id, job.scenario_id, job.platform_version}, recording);
  if (!call.ok() && call.status().code() == absl::StatusCode::kAlreadyExists) {
    // A lease that died between the ingest and SetCall: the call is there already.
    call = calls.Get(job.workspace_id, ingest.call_identifier());
  }
  if (!call.ok()) return call.status();
  return call->id();
}

}  // namespace

bool RunPassed(const v1::Call& call, const std::vector<v1::Metric>& definitions) {
  for (const v1::MetricResult& result : call.metric_results()) {
    const v1::Metric* definition = nullptr;
    for (const v1::Metric& m : definitions) {
      if (m.id() == result.metric_id()) definition = &m;
    }
    const bool judged = definition != nullptr ? definition->structured_output_size() > 0
                                              : result.has_structured_output();
    if (!judged) continue;
    const std::string outcome = result.structured_output().outcome_classification();
    if (result.status() != "completed" ||
        (outcome != "meets_expectations" && outcome != "exceeds_expectations")) {
      return false;
    }
  }
  return true;
}

void RunWorkers::Start() {
  if (options_.lease > absl::ZeroDuration()) {
    heartbeat_ =
        std::make_unique<LeaseHeartbeat>("runs", LeaseHeartbeat::IntervalFor(options_.lease));
  }
  workers_.Start(
      options_.workers, options_.poll_interval, [this] { return WorkOnce(); }, "runs");
}

absl::StatusOr<int64_t> RunWorkers::TextRun(const RunJob& job, const v1::Scenario& scenario,
                                            const v1::Agent& agent, std::string* end_reason) {
  TextAgent text_agent;
  text_agent.instructions = agent.instructions();
  text_agent.opening_mode = agent.opening_message().mode();
  text_agent.opening_text = agent.opening_message().text();
  text_agent.model = agent.model();
  TextCaller caller;
  caller.script.assign(scenario.caller_script().begin(), scenario.caller_script().end());
  caller.persona = scenario.persona();
  caller.goal = scenario.goal();
  ConversationLimits limits;
  limits.max_turns = scenario.max_turns();
  limits.max_duration = absl::Seconds(scenario.has_max_duration_seconds()
                                          ? scenario.max_duration_seconds()
                                          : agent.max_call_duration_seconds());
  absl::StatusOr<Conversation> conversation =
      RunTextConversation(*options_.deps.llm, text_agent, caller, limits);
  if (!conversation.ok()) return conversation.status();
  *end_reason = conversation->end_reason;

  v1::IngestCallRequest ingest = RunCallRequest(job, scenario, conversation->end_reason);
  for (const v1::Turn& turn : conversation->transcript) *ingest.add_transcript() = turn;
  return IngestRunCall(*options_.deps.calls, job, ingest, std::nullopt);
}

absl::Status RunWorkers::CallerSession(const v1::Scenario& scenario, const v1::Agent& agent,
                                       VoiceSessionOptions* session,
                                       std::unique_ptr<scoring::SpeechRecognizer>* ears) {
  const RunDependencies& deps = options_.deps;
  session->caller_lines.assign(scenario.caller_script().begin(), scenario.caller_script().end());
  if (scenario.caller_script_size() == 0) {
    absl::StatusOr<std::unique_ptr<scoring::SpeechRecognizer>> made =
        deps.make_recognizer(workers_.cancel_flag());
    if (!made.ok()) return made.status();
    *ears = *std::move(made);
    TextCaller caller;
    caller.persona = scenario.persona();
    caller.goal = scenario.goal();
    LlmClient* llm = deps.llm;
    session->next_line = [llm, caller](const std::vector<v1::Turn>& conversation)
        -> absl::StatusOr<NextCallerLine> {
      absl::StatusOr<CallerMessage> said = NextCallerMessage(*llm, caller, conversation);
      if (!said.ok()) return said.status();
      return NextCallerLine{said->message, said->goal_reached};
    };
    scoring::SpeechRecognizer* recognizer = ears->get();
    session->transcribe = [recognizer](const std::vector<int16_t>& audio,
                                       int rate) -> absl::StatusOr<std::string> {
      absl::StatusOr<std::vector<int16_t>> wide =
          ResamplePcm16(audio, rate, scoring::kSpeechSampleRate);
      if (!wide.ok()) return wide.status();
      absl::StatusOr<scoring::ChannelTranscript> heard = recognizer->Transcribe(*wide);
      if (!heard.ok()) return heard.status();
      std::string text;
      for (const auto& word : heard->words) absl::StrAppend(&text, text.empty() ? "" : " ", word.text);
      return text;
    };
  }
  session->agent_speaks_first = agent.opening_message().mode() != "user_speaks_first";
  session->max_turns = scenario.max_turns();
  session->max_duration = absl::Seconds(scenario.has_max_duration_seconds()
                                            ? scenario.max_duration_seconds()
                                            : agent.max_call_duration_seconds());
  session->cancel = workers_.cancel_flag();
  return absl::OkStatus();
}

std::unique_ptr<SpeechSynthesizer> RunWorkers::CallerVoice() {
  const RunDependencies& deps = options_.deps;
  return deps.make_synthesizer ? deps.make_synthesizer(workers_.cancel_flag())
                               : NewEspeakSynthesizer();
}

absl::StatusOr<int64_t> RunWorkers::IngestRecording(const RunJob& job, const v1::Scenario& scenario,
                                                    const VoiceRecording& recording,
                                                    const std::string& end_reason,
                                                    const PlatformWebCall* platform) {
  const RunDependencies& deps = options_.deps;
  // The recording goes into the blob store from here, under a key of its own, and the ingest
  // names it: the bytes never travel to the calls service. The calls service deletes the
  // object when it does not store the call; a crash in between leaves an object no call names.
  const std::string wav = EncodeStereoWav(recording);
  RunRecording stored{absl::StrCat(kRunRecordingPrefix, HexEncode(RandomBytes(16))), "audio/wav",
                      static_cast<int64_t>(wav.size())};
  if (absl::Status put = deps.recordings->Put(stored.key, StringBlobSource(wav), "audio/wav");
      !put.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the run's recording cannot be stored: ", put.message()));
  }
  v1::IngestCallRequest ingest = RunCallRequest(job, scenario, end_reason);
  auto& metadata = *ingest.mutable_metadata()->mutable_fields();
  // The platform's own id of the call, as its production events name it (platform_events.h),
  // so the run's call can be found on the platform's dashboard.
  if (platform != nullptr) {
    metadata["platform"].set_string_value(platform->platform);
    metadata["platform_call_id"].set_string_value(platform->platform_call_id);
  }
  // A phone caller that yielded to the agent talking over it: a reader of the call sees why a
  // line of the script was cut short.
  if (recording.barge_ins > 0) metadata["barge_ins"].set_number_value(recording.barge_ins);
  return IngestRunCall(*deps.calls, job, ingest, stored);
}

namespace {

// Without a caller_script the caller is the LLM, which hears the agent through a recognizer.
absl::Status VoiceCallerAvailable(const RunDependencies& deps, const v1::Scenario& scenario) {
  if (scenario.caller_script_size() == 0 && (deps.llm == nullptr || !deps.make_recognizer)) {
    return absl::FailedPreconditionError(
        "llm_unavailable: without a caller_script the caller is played by the LLM provider from "
        "persona and goal, and none is configured");
  }
  if (deps.recordings == nullptr) {
    return absl::FailedPreconditionError("the voice channels are not configured here");
  }
  return absl::OkStatus();
}

std::string CarrierApiUrl(const RunDependencies& deps, const std::string& carrier) {
  if (carrier == "twilio") return deps.provider_urls.twilio;
  if (carrier == "telnyx") return deps.provider_urls.telnyx;
  if (carrier == "plivo") return deps.provider_urls.plivo;
  return "";
}

// The carrier account in a workspace's integration settings (docs/api.md §5.8).
CarrierAccount CarrierAccountFromSettings(const agents::IntegrationSettings& settings) {
  CarrierAccount account;
  account.carrier = settings.provider;
  auto text = [](const nlohmann::json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (settings.provider == "twilio") {
    account.account_id = text(settings.fields, "account_sid");
    account.secret = text(settings.secrets, "auth_token");
  } else if (settings.provider == "telnyx") {
    account.account_id = text(settings.fields, "connection_id");
    account.secret = text(settings.secrets, "api_key");
    account.public_key = text(settings.fields, "public_key");
  } else if (settings.provider == "plivo") {
    account.account_id = text(settings.fields, "auth_id");
    account.secret = text(settings.secrets, "auth_token");
  }
  auto numbers = settings.fields.find("caller_numbers");
  if (numbers != settings.fields.end() && numbers->is_array()) {
    for (const auto& number : *numbers) {
      if (number.is_string()) account.caller_numbers.push_back(number.get<std::string>());
    }
  }
  return account;
}

// The workspace's account at the agent's carrier. FailedPrecondition, saying what to set, when
// the workspace has no settings for it or no number to call from; kUnavailable when the agents
// service could not answer (the run is given back).
absl::StatusOr<CarrierAccount> CarrierAccountOf(RunAgents& agents, const RunJob& job,
                                                const std::string& carrier) {
  if (carrier.empty()) {
    return absl::FailedPreconditionError("the agent's phone_number selects no telephony carrier");
  }
  absl::StatusOr<std::optional<agents::IntegrationSettings>> settings =
      agents.GetIntegration(job.workspace_id, carrier);
  if (!settings.ok()) {
    return absl::UnavailableError(absl::StrCat("the integration settings could not be read: ",
                                               settings.status().message()));
  }
  if (!settings->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the phone channel calls the agent through ", carrier,
                     " with the workspace's integration settings, and it has none: PUT "
                     "/api/v1/integrations/",
                     carrier));
  }
  CarrierAccount account = CarrierAccountFromSettings(**settings);
  if (account.caller_numbers.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the workspace's ", carrier,
        " integration settings have no caller_numbers to call from: PUT /api/v1/integrations/",
        carrier));
  }
  return account;
}

}  // namespace

absl::StatusOr<int64_t> RunWorkers::WebsocketRun(const RunJob& job, const v1::Scenario& scenario,
                                                 const v1::Agent& agent,
                                                 const agents::WebChannel& web,
                                                 const PlatformWebCall* platform,
                                                 std::string* end_reason) {
  const RunDependencies& deps = options_.deps;
  if (absl::Status s = VoiceCallerAvailable(deps, scenario); !s.ok()) return s;
  WebSocketOptions ws_options;
  ws_options.guard = deps.url_guard;
  ws_options.ca_file = deps.agent_ca_file;
  const std::string token = web.credentials.value("auth_token", "");
  if (!token.empty()) ws_options.headers.emplace_back("Authorization", "Bearer " + token);
  absl::StatusOr<std::unique_ptr<WebSocketConnection>> connection =
      WebSocketConnection::Connect(web.fields.value("websocket_url", ""), ws_options);
  if (!connection.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach the agent's websocket: ", connection.status().message()));
  }
  VoiceSessionOptions session;
  session.protocol = web.fields.value("protocol", "twilio_media_streams");
  session.auth_token = token;
  if (platform != nullptr) session.hangup_message = platform->hangup_message;
  std::unique_ptr<scoring::SpeechRecognizer> ears;
  if (absl::Status s = CallerSession(scenario, agent, &session, &ears); !s.ok()) return s;
  std::unique_ptr<SpeechSynthesizer> voice = CallerVoice();
  absl::StatusOr<VoiceRecording> recording = RunVoiceSession(**connection, *voice, session);
  if (!recording.ok()) {
    if (recording.status().code() == absl::StatusCode::kCancelled) return recording.status();
    return absl::UnavailableError(
        absl::StrCat("the conversation broke off: ", recording.status().message()));
  }
  *end_reason = recording->end_reason;
  return IngestRecording(job, scenario, *recording, recording->end_reason, platform);
}

absl::StatusOr<int64_t> RunWorkers::RoomRun(const RunJob& job, const v1::Scenario& scenario,
                                            const v1::Agent& agent, const agents::WebChannel& web,
                                            const PlatformWebCall* platform,
                                            std::string* end_reason) {
  const RunDependencies& deps = options_.deps;
  if (absl::Status s = VoiceCallerAvailable(deps, scenario); !s.ok()) return s;
  // From here (the run's lease taken, its agent read) to the agent's first audio: the room's
  // making, the join and the media's setup (docs/operations.md, "Metrics").
  const absl::Time run_start = absl::Now();
  auto text = [](const nlohmann::json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  LiveKitRoomAccess access;
  std::optional<LiveKitServerApi> api;  // rubric: the room to delete after the run
  const std::string room_name =
      absl::StrCat("calleval-run-", job.run_id, "-", HexEncode(RandomBytes(4)));
  if (platform != nullptr) {
    access = {platform->room_url, platform->room_token};
  } else if (text(web.fields, "room_management") == "client") {
    BotRunnerRequest request;
    request.url = text(web.fields, "bot_runner_url");
    request.guard = &deps.url_guard;
    absl::StatusOr<LiveKitRoomAccess> answer = RequestBotRunnerRoom(request);
    if (!answer.ok()) {
      return absl::Status(answer.status().code(),
                          absl::StrCat("the agent's bot_runner_url did not hand out a room: ",
                                       answer.status().message()));
    }
    access = *std::move(answer);
  } else {
    // The agent's room credentials, or the workspace's (docs/api.md §5.8).
    LiveKitApiOptions server;
    server.url = text(web.fields, "room_server_url");
    server.api_key = text(web.credentials, "room_api_key");
    server.api_secret = text(web.credentials, "room_api_secret");
    if (server.url.empty() || server.api_key.empty() || server.api_secret.empty()) {
      absl::StatusOr<std::optional<agents::IntegrationSettings>> settings =
          deps.agents->GetIntegration(job.workspace_id, "livekit");
      if (!settings.ok()) {
        return absl::Status(kPlatformRunRetry,
                            absl::StrCat("the integration settings could not be read: ",
                                         settings.status().message()));
      }
      if (settings->has_value()) {
        if (server.url.empty()) server.url = text((*settings)->fields, "server_url");
        if (server.api_key.empty() || server.api_secret.empty()) {
          server.api_key = text((*settings)->fields, "api_key");
          server.api_secret = text((*settings)->secrets, "api_secret");
        }
      }
    }
    if (server.url.empty() || server.api_key.empty() || server.api_secret.empty()) {
      return absl::FailedPreconditionError(
          "a rubric-managed LiveKit room needs the server's URL and API key and secret: set the "
          "agent's web_channel room_server_url, room_api_key and room_api_secret, or PUT "
          "/api/v1/integrations/livekit");
    }
    server.guard = &deps.url_guard;
    api.emplace(server);
    absl::StatusOr<LiveKitRoom> room = api->CreateRoom(room_name, absl::Minutes(2), 4);
    if (!room.ok()) {
      return absl::Status(
          room.status().code(),
          absl::StrCat("the LiveKit room could not be created: ", room.status().message()));
    }
    // A named agent is dispatched explicitly; without a name LiveKit's automatic dispatch sends
    // the agent's workers to the new room.
    const std::string agent_name = text(web.fields, "agent_name");
    if (!agent_name.empty()) {
      absl::StatusOr<std::string> dispatch =
          api->CreateDispatch(room_name, agent_name, nlohmann::json{{"run_id", job.run_id}}.dump());
      if (!dispatch.ok()) {
        (void)api->DeleteRoom(room_name);
        return absl::Status(dispatch.status().code(), absl::StrCat("the LiveKit agent ", agent_name,
                                                                   " could not be dispatched: ",
                                                                   dispatch.status().message()));
      }
    }
    absl::StatusOr<std::string> token =
        MintLiveKitToken(CallerToken(server.api_key, server.api_secret, room_name,
                                     absl::StrCat("calleval-caller-", job.run_id)));
    if (!token.ok()) return token.status();
    access = {server.url, *token};
  }
  const std::string mode = platform != nullptr ? "retell"
                           : api                ? "rubric"
                                                : "client";
  LiveKitRoomOptions room_options;
  room_options.signal.websocket.guard = deps.url_guard;
  room_options.signal.websocket.ca_file = deps.agent_ca_file;
  room_options.peer.guard = deps.url_guard;
  room_options.peer.stun_server = deps.stun_server;
  room_options.peer.turn_servers = deps.turn_servers;
  room_options.peer.local_addresses = deps.webrtc_local_addresses;
  VoiceSessionOptions session;
  std::unique_ptr<scoring::SpeechRecognizer> ears;
  absl::StatusOr<VoiceRecording> recording = absl::UnknownError("not run");
  if (absl::Status s = CallerSession(scenario, agent, &session, &ears); !s.ok()) {
    recording = s;
  } else {
    absl::StatusOr<std::unique_ptr<LiveKitRoomCaller>> caller =
        LiveKitRoomCaller::Join(access, room_options);
    if (!caller.ok()) {
      recording = absl::UnavailableError(
          absl::StrCat("cannot join the agent's LiveKit room: ", caller.status().message()));
    } else {
      std::unique_ptr<SpeechSynthesizer> voice = CallerVoice();
      recording = RunVoiceSession(**caller, *voice, session);
      const absl::Time first_audio = (*caller)->first_audio_at();
      if (first_audio != absl::InfinitePast()) {
        static telemetry::HistogramFamily& first_audio_seconds =
            telemetry::DefaultRegistry().Histogram(
                "calleval_room_first_audio_seconds",
                "Time from a room run's start to the agent's first audio, by room management.",
                {"mode"});
        first_audio_seconds.WithLabels({mode}).ObserveDuration(first_audio - run_start);
      }
      if (!recording.ok() && recording.status().code() != absl::StatusCode::kCancelled) {
        recording = absl::UnavailableError(
            absl::StrCat("the conversation broke off: ", recording.status().message()));
      }
    }
  }
  if (api) {
    if (absl::Status s = api->DeleteRoom(room_name); !s.ok()) {
      LogWarn("run: the LiveKit room could not be deleted",
              {{"run_id", job.run_id}, {"room", room_name}, {"error", s}});
    }
  }
  if (!recording.ok()) return recording.status();
  *end_reason = recording->end_reason;
  return IngestRecording(job, scenario, *recording, recording->end_reason, platform);
}

absl::StatusOr<int64_t> RunWorkers::PhoneRun(RunJob& job, const v1::Scenario& scenario,
                                             const v1::Agent& agent, const CarrierAccount& account,
                                             std::string* end_reason) {
  const RunDependencies& deps = options_.deps;
  if (absl::Status s = VoiceCallerAvailable(deps, scenario); !s.ok()) return s;
  PhoneCallOptions call;
  call.account = account;
  call.api_url = CarrierApiUrl(deps, account.carrier);
  call.to = agent.phone_number();
  call.lines = deps.phone_lines;
  call.ring_timeout = deps.ring_timeout;
  // docs/channels.md, "The agent calls in": an agent that takes no calls (outbound only) is not
  // dialled; the run awaits its call instead.
  const auto& directions = agent.call_directions();
  call.agent_calls_in =
      std::find(directions.begin(), directions.end(), agents::rules::kInbound) == directions.end();
  call.call_in_timeout = deps.call_in_timeout;
  if (call.agent_calls_in && !deps.takes_incoming_calls) {
    return absl::FailedPreconditionError(
        "the agent calls in (its call_directions lack inbound), and the carriers' incoming-call "
        "webhooks reach only an edge in the runs process: run the runs and edge roles together "
        "for agents that call in (docs/channels.md)");
  }
  absl::Status platform_refused;  // Retell's answer when asked to place the agent's call
  if (call.agent_calls_in && agent.agent_source() == agents::rules::kExternalRetell) {
    call.request_call = [&](const std::string& number) {
      absl::StatusOr<agents::RetellPhoneCall> placed =
          RequestRetellCall(*deps.agents, job.workspace_id, agent, deps.provider_urls, number,
                            workers_.cancel_flag());
      platform_refused = placed.status();
      if (placed.ok()) job.platform_version = placed->agent_version;
      return platform_refused;
    };
  }
  std::unique_ptr<scoring::SpeechRecognizer> ears;
  if (absl::Status s = CallerSession(scenario, agent, &call.session, &ears); !s.ok()) return s;
  std::unique_ptr<SpeechSynthesizer> voice = CallerVoice();
  call.voice = voice.get();
  call.cancel = workers_.cancel_flag();
  absl::StatusOr<PhoneCallResult> held = HoldPhoneCall(call);
  if (!held.ok()) {
    if (held.status().code() == absl::StatusCode::kCancelled) return held.status();
    // The platform asked to place the agent's call refused (its message), or its key could not
    // be read (given back).
    if (!platform_refused.ok()) return platform_refused;
    *end_reason = "carrier_error";
    return absl::UnavailableError(
        absl::StrCat("the phone call broke off: ", held.status().message()));
  }
  *end_reason = held->end_reason;
  if (!held->recording) {
    return absl::FailedPreconditionError(PhoneCallEndedMessage(*held));
  }
  if (held->end_reason == "voicemail" || held->end_reason == "carrier_error") {
    return absl::FailedPreconditionError(PhoneCallEndedMessage(*held));
  }
  return IngestRecording(job, scenario, *held->recording, held->end_reason);
}

std::optional<RunOutcome> RunWorkers::Execute(RunJob& job, const LeaseHeartbeat::Held* held) {
  const RunDependencies& deps = options_.deps;
  // Only NotFound ends the run: any other error (the agents role restarting, a deadline) gives
  // the lease back, and the run is tried again once the scenario and agent can be read.
  absl::StatusOr<v1::Scenario> scenario =
      deps.agents->GetScenario(job.workspace_id, job.scenario_id);
  if (!scenario.ok()) {
    if (scenario.status().code() == absl::StatusCode::kNotFound) {
      return Failed(absl::StrCat("scenario ", job.scenario_id, " is gone"));
    }
    LogWarn("run: the scenario could not be read; the run is given back",
            {{"run_id", job.run_id}, {"error", scenario.status()}});
    return std::nullopt;
  }
  absl::StatusOr<v1::Agent> agent = deps.agents->GetAgent(job.workspace_id, job.agent_id);
  if (!agent.ok()) {
    if (agent.status().code() == absl::StatusCode::kNotFound) {
      return Failed(absl::StrCat("agent ", job.agent_id, " is gone"));
    }
    LogWarn("run: the agent could not be read; the run is given back",
            {{"run_id", job.run_id}, {"error", agent.status()}});
    return std::nullopt;
  }
  if (agent->has_version()) job.agent_version = agent->version();

  std::string end_reason;
  if (!job.call_id) {
    absl::StatusOr<int64_t> call_id;
    if (job.channel == "phone") {
      if (!agent->has_phone_number()) return Failed("the agent has no phone_number to call");
      // Every runs process serves its lines, on its edge or its media listener, unless that
      // listener was turned off.
      if (deps.phone_lines == nullptr) {
        return Failed(
            "the phone channel needs somewhere to serve the carrier's media websocket and "
            "webhooks: this runs process has no edge and its --media-addr is off");
      }
      const std::string carrier = agent->telephony_carrier();
      absl::StatusOr<CarrierAccount> account = CarrierAccountOf(*deps.agents, job, carrier);
      if (!account.ok()) {
        if (account.status().code() == absl::StatusCode::kUnavailable) {
          LogWarn("run: the integration settings could not be read; the run is given back",
                  {{"run_id", job.run_id}, {"error", account.status()}});
          return std::nullopt;
        }
        return Failed(std::string(account.status().message()));
      }
      call_id = PhoneRun(job, *scenario, *agent, *account, &end_reason);
      if (!call_id.ok() && call_id.status().code() == kPlatformRunRetry) {
        LogWarn("run: the agent's platform key could not be read; the run is given back",
                {{"run_id", job.run_id}, {"error", call_id.status()}});
        return std::nullopt;
      }
      if (!call_id.ok() && !Cancelled(call_id.status())) {
        RunOutcome failed = Failed(std::string(call_id.status().message()));
        failed.end_reason = end_reason;
        return failed;
      }
    } else if (job.channel == "web" && agents::rules::IsExternal(agent->agent_source())) {
      // A Vapi call's websocket, dialled like a pcm16 agent's (services/runs/platform_run.h).
      absl::StatusOr<PlatformWebCall> platform = StartPlatformWebCall(
          *deps.agents, job.workspace_id, *agent, deps.provider_urls, workers_.cancel_flag());
      if (!platform.ok()) {
        if (platform.status().code() == kPlatformRunRetry) {
          LogWarn("run: the agent's platform key could not be read; the run is given back",
                  {{"run_id", job.run_id}, {"error", platform.status()}});
          return std::nullopt;
        }
        if (Cancelled(platform.status())) return std::nullopt;
        return Failed(std::string(platform.status().message()));
      }
      job.platform_version = platform->platform_version;
      call_id = platform->room_url.empty()
                    ? WebsocketRun(job, *scenario, platform->agent, platform->channel, &*platform,
                                   &end_reason)
                    : RoomRun(job, *scenario, platform->agent, platform->channel, &*platform,
                              &end_reason);
    } else if (job.channel == "web") {
      if (!agent->has_web_channel()) {
        return Failed("the agent has no web_channel to reach it over the web");
      }
      const std::string transport = agent->transport();
      if (transport != "websocket" && transport != "livekit") {
        return Failed(UnservedTransport(transport));
      }
      // With its credentials, from the agents role: like the scenario and the agent above, only
      // NotFound ends the run; an owner that cannot answer gives the lease back.
      absl::StatusOr<std::optional<agents::WebChannel>> channel =
          deps.agents->GetWebChannel(job.workspace_id, job.agent_id);
      if (!channel.ok()) {
        if (channel.status().code() == absl::StatusCode::kNotFound) {
          return Failed(absl::StrCat("agent ", job.agent_id, " is gone"));
        }
        LogWarn("run: the agent's web channel could not be read; the run is given back",
                {{"run_id", job.run_id}, {"error", channel.status()}});
        return std::nullopt;
      }
      if (!channel->has_value()) {
        return Failed("the agent has no web_channel to reach it over the web");
      }
      call_id = transport == "livekit"
                    ? RoomRun(job, *scenario, *agent, **channel, nullptr, &end_reason)
                    : WebsocketRun(job, *scenario, *agent, **channel, nullptr, &end_reason);
      if (!call_id.ok() && call_id.status().code() == kPlatformRunRetry) {
        LogWarn("run: the workspace's room credentials could not be read; the run is given back",
                {{"run_id", job.run_id}, {"error", call_id.status()}});
        return std::nullopt;
      }
    } else {
      if (agent->agent_source() != "internal") {
        return Failed(absl::StrCat("the text channel reaches internal agents only; this agent is ",
                                   agent->agent_source(), ", hosted on a third-party platform"));
      }
      if (deps.llm == nullptr) {
        return Failed(
            "llm_unavailable: the text channel plays the agent through the LLM provider, and "
            "none is configured");
      }
      call_id = TextRun(job, *scenario, *agent, &end_reason);
      if (!call_id.ok() && !Cancelled(call_id.status())) {
        return Failed(absl::StrCat("the conversation could not be held: ",
                                   call_id.status().message()));
      }
    }
    if (!call_id.ok()) {
      if (Cancelled(call_id.status())) return std::nullopt;
      return Failed(std::string(call_id.status().message()));
    }
    job.call_id = *call_id;
    if (absl::Status s = queue_->SetCall(job.run_id, job.token, *call_id); !s.ok()) {
      LogWarn("run: recording the run's call failed",
              {{"run_id", job.run_id}, {"call_id", *call_id}, {"error", s}});
    }
  }

  // Wait for the call to be scored (the heartbeat renews the lease meanwhile).
  const absl::Time give_up = absl::Now() + options_.scoring_timeout;
  while (true) {
    if (workers_.stopping()) return std::nullopt;
    if (held != nullptr && held->lost()) return std::nullopt;
    absl::StatusOr<v1::Call> call = deps.calls->Get(job.workspace_id, absl::StrCat(*job.call_id));
    if (!call.ok()) {
      if (call.status().code() == absl::StatusCode::kNotFound) {
        return Failed(absl::StrCat("the run's call is gone: ", call.status().message()));
      }
      // The calls role did not answer this time (a restart, a deadline): asked again below,
      // until the scoring timeout.
      if (absl::Now() >= give_up) return Failed("the run's call was not scored in time");
      absl::SleepFor(absl::Milliseconds(250));
      continue;
    }
    // A run resumed after its call was ingested learns the platform's version from the call.
    if (!job.platform_version && call->has_platform_version()) {
      job.platform_version = call->platform_version();
    }
    const std::string& status = call->analysis_status();
    if (status == "completed") {
      std::vector<int64_t> ids;
      for (const auto& r : call->metric_results()) ids.push_back(r.metric_id());
      absl::StatusOr<std::vector<v1::Metric>> definitions =
          ids.empty() ? std::vector<v1::Metric>() : deps.metric_definitions(job.workspace_id, ids);
      if (!definitions.ok()) {
        // Judged without its metrics' definitions, a run could pass that did not: the metrics
        // role is asked again, like the calls role above, until the scoring timeout.
        LogWarn("run: the metrics' definitions could not be read; asking again",
                {{"run_id", job.run_id}, {"call_id", *job.call_id}, {"error", definitions.status()}});
        if (absl::Now() >= give_up) return Failed("the run's metrics could not be read in time");
        absl::SleepFor(absl::Milliseconds(250));
        continue;
      }
      RunOutcome done{"completed", RunPassed(*call, *definitions), end_reason, ""};
      if (done.end_reason.empty()) {
        auto it = call->metadata().fields().find("end_reason");
        if (it != call->metadata().fields().end()) done.end_reason = it->second.string_value();
      }
      return done;
    }
    if (status == "failed" || status == "skipped") {
      return Failed(absl::StrCat("the run's call was ", status, ": ", call->failure_reason(),
                                 call->has_failure_message() ? ": " : "",
                                 call->failure_message()));
    }
    if (absl::Now() >= give_up) return Failed("the run's call was not scored in time");
    absl::SleepFor(absl::Milliseconds(50));
  }
}

bool RunWorkers::WorkOnce() {
  auto job = queue_->Lease(options_.lease, options_.max_attempts, options_.holder);
  if (!job.ok()) {
    LogWarn("runs: leasing a run failed", {{"error", job.status()}});
    return false;
  }
  if (!job->has_value()) return false;
  RunJob& leased = **job;
  // Renewed until reported.
  std::unique_ptr<LeaseHeartbeat::Held> held;
  if (heartbeat_) {
    const int64_t run_id = leased.run_id;
    const std::string token = leased.token;
    held = heartbeat_->Hold([this, run_id, token] {
      return queue_->Renew(run_id, token, options_.lease);
    });
  }
  std::optional<RunOutcome> outcome = Execute(leased, held.get());
  // The version the run spoke to is the agent's as read at its start (Execute), and the
  // platform's as the platform answered when the run's call was made.
  if (outcome) {
    outcome->agent_version = leased.agent_version;
    outcome->platform_version = leased.platform_version;
  }
  if (held && held->lost()) {
    // The lease expired and another worker took the run: its report would be refused.
    LogWarn("run: lease lost, outcome dropped", {{"run_id", leased.run_id}});
    return true;
  }
  absl::Status reported = outcome ? queue_->Finish(leased.run_id, leased.token, *outcome)
                                  : queue_->Release(leased.run_id, leased.token);
  if (!reported.ok()) {
    LogWarn("run: reporting the outcome failed", {{"run_id", leased.run_id}, {"error", reported}});
  }
  return true;
}

}  // namespace calleval::runs
