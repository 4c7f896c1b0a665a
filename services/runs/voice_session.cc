#include "services/runs/voice_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <future>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/crypto.h"
#include "common/status_macros.h"
#include "services/runs/mulaw.h"
#include "services/runs/twilio_media_streams.h"

namespace calleval::runs {
namespace {

constexpr absl::Duration kFrame = absl::Milliseconds(20);
// A played agent frame counts as speech above this RMS (about -45 dBFS).
constexpr double kSpeechRms = 180;

double Rms(const int16_t* samples, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(samples[i]) * samples[i];
  return n == 0 ? 0 : std::sqrt(sum / n);
}

std::string Pcm16Bytes(const int16_t* samples, size_t n) {
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = static_cast<char>(samples[i] & 0xFF);
    out[2 * i + 1] = static_cast<char>((samples[i] >> 8) & 0xFF);
  }
  return out;
}

void AppendLe16(absl::string_view bytes, std::deque<int16_t>* out) {
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    out->push_back(static_cast<int16_t>(static_cast<uint8_t>(bytes[i]) |
                                        (static_cast<uint8_t>(bytes[i + 1]) << 8)));
  }
}

}  // namespace

namespace {

// What the turn-taking loop needs of the media it ticks over: the websocket's dialects (Twilio
// Media Streams, pcm16, a carrier's) below, or a VoiceMediaLink.
class SessionLink {
 public:
  virtual ~SessionLink() = default;
  // Appends the agent's audio that arrived within `wait` to `playout` (`played` samples have
  // played so far); false once the agent's side ended the call.
  virtual absl::StatusOr<bool> Receive(absl::Duration wait, std::deque<int16_t>* playout,
                                       size_t played, VoiceRecording* rec) = 0;
  // After a frame of the agent played.
  virtual absl::Status Played(size_t played) { return absl::OkStatus(); }
  // One frame of the caller; `yielded` when the caller just cut its line short, `line_said`
  // when the frame ends line number `turns`. false once the agent's side ended the call.
  virtual absl::StatusOr<bool> Send(absl::Span<const int16_t> frame, int64_t tick, bool yielded,
                                    bool line_said, int turns) = 0;
  // The session ended `reason`; or it was cancelled or failed (Abort).
  virtual void Finish(const std::string& reason) = 0;
  virtual void Abort() = 0;
};

class WebSocketLink : public SessionLink {
 public:
  WebSocketLink(WebSocketConnection& ws, const VoiceSessionOptions& options, bool twilio,
                TwilioStreamWriter& writer, std::string stream_id,
                std::vector<WebSocketMessage> early)
      : ws_(ws),
        options_(options),
        dialect_(options.dialect),
        twilio_(twilio),
        writer_(writer),
        stream_id_(std::move(stream_id)),
        early_(std::move(early)) {}

  absl::StatusOr<bool> Receive(absl::Duration wait, std::deque<int16_t>* playout, size_t played,
                               VoiceRecording* rec) override {
    absl::StatusOr<std::vector<WebSocketMessage>> got = ws_.Poll(wait);
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kCancelled) return false;
      return got.status();
    }
    if (!early_.empty()) {
      got->insert(got->begin(), std::make_move_iterator(early_.begin()),
                  std::make_move_iterator(early_.end()));
      early_.clear();
    }
    for (const WebSocketMessage& m : *got) {
      if (dialect_ != nullptr) {
        absl::StatusOr<MediaEvent> event = dialect_->Parse(m.data);
        if (!event.ok()) continue;
        if (event->kind == MediaEvent::kMedia) {
          for (int16_t s : MuLawDecode(event->mulaw)) playout->push_back(s);
        } else if (event->kind == MediaEvent::kMark) {
          ++rec->marks_played;
        } else if (event->kind == MediaEvent::kStop) {
          return false;  // the call ended: the agent hung up
        }
        continue;
      }
      if (!twilio_) {
        if (m.binary) AppendLe16(m.data, playout);
        continue;
      }
      absl::StatusOr<TwilioAgentEvent> event = ParseTwilioAgentEvent(m.data);
      if (!event.ok()) continue;  // not ours to judge: an agent may send other frames
      if (event->kind == TwilioAgentEvent::kMedia) {
        for (int16_t s : MuLawDecode(event->mulaw)) playout->push_back(s);
      } else if (event->kind == TwilioAgentEvent::kMark) {
        marks_.emplace_back(played + playout->size(), event->mark);
      } else if (event->kind == TwilioAgentEvent::kClear) {
        playout->clear();
        for (auto& mark : marks_) mark.first = played;  // cleared audio counts as played
      }
    }
    return true;
  }

  absl::Status Played(size_t played) override {
    while (!marks_.empty() && marks_.front().first <= played) {
      if (twilio_) RETURN_IF_ERROR(ws_.SendText(writer_.Mark(marks_.front().second)));
      marks_.pop_front();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Send(absl::Span<const int16_t> frame, int64_t tick, bool yielded,
                            bool line_said, int turns) override {
    if (dialect_ != nullptr) {
      absl::Status sent = yielded ? ws_.SendText(dialect_->Clear(stream_id_)) : absl::OkStatus();
      // A carrier ends the stream by closing the websocket when the call is over (Plivo sends
      // no stop event first): a write that finds it closed is the agent's side hanging up,
      // whether or not the read noticed first.
      if (sent.ok()) sent = ws_.SendText(dialect_->Media(stream_id_, MuLawEncode(frame)));
      // The carrier says when the line has played out on the call.
      if (sent.ok() && line_said) {
        sent = ws_.SendText(dialect_->Mark(stream_id_, absl::StrCat("line-", turns)));
      }
      return sent.ok();
    }
    if (twilio_) {
      RETURN_IF_ERROR(ws_.SendText(writer_.Media(MuLawEncode(frame), tick * 20)));
    } else {
      RETURN_IF_ERROR(ws_.SendBinary(Pcm16Bytes(frame.data(), frame.size())));
    }
    return true;
  }

  void Finish(const std::string& reason) override {
    if (twilio_) (void)ws_.SendText(writer_.Stop());
    if (!options_.hangup_message.empty() && reason != "agent_ended") {
      (void)ws_.SendText(options_.hangup_message);
    }
    ws_.Close();
  }
  void Abort() override { ws_.Close(); }

 private:
  WebSocketConnection& ws_;
  const VoiceSessionOptions& options_;
  MediaDialect* const dialect_;
  const bool twilio_;
  TwilioStreamWriter& writer_;
  const std::string stream_id_;
  std::vector<WebSocketMessage> early_;               // kept for the first tick
  std::deque<std::pair<size_t, std::string>> marks_;  // (playout position, name)
};

// A VoiceMediaLink as the loop's link.
class MediaLinkAdapter : public SessionLink {
 public:
  explicit MediaLinkAdapter(VoiceMediaLink& link) : link_(link) {}
  absl::StatusOr<bool> Receive(absl::Duration wait, std::deque<int16_t>* playout, size_t,
                               VoiceRecording*) override {
    absl::Status s = link_.Receive(wait, playout);
    if (s.code() == absl::StatusCode::kAborted) return false;
    RETURN_IF_ERROR(s);
    return true;
  }
  absl::StatusOr<bool> Send(absl::Span<const int16_t> frame, int64_t, bool, bool, int) override {
    absl::Status s = link_.Send(frame);
    if (s.code() == absl::StatusCode::kAborted) return false;
    RETURN_IF_ERROR(s);
    return true;
  }
  void Finish(const std::string& reason) override { link_.End(reason); }
  void Abort() override { link_.End("cancelled"); }

 private:
  VoiceMediaLink& link_;
};

// The turn-taking loop, from the clock's start until the conversation ends.
absl::StatusOr<VoiceRecording> RunTurns(SessionLink& link, SpeechSynthesizer& synthesizer,
                                        const VoiceSessionOptions& options, VoiceRecording rec,
                                        std::chrono::steady_clock::time_point start,
                                        bool barge_in) {
  const size_t frame = static_cast<size_t>(rec.sample_rate / 50);
  std::deque<int16_t> playout;                     // agent audio received, not yet played
  size_t played = 0;                               // agent samples played so far
  std::vector<int16_t> speaking;                   // the caller line being said
  size_t speaking_at = 0;
  size_t next_line = 0;
  int turns = 0;
  // Turn-taking state: the agent's last voiced frame, and whether it spoke since the caller did.
  int64_t tick = 0;
  int64_t last_agent_voice = -1;
  int64_t agent_voice_run = 0;  // ticks the agent's voice has been heard without a break
  bool agent_answered = false;
  int64_t waiting_since = 0;  // tick when the caller started waiting for the agent
  bool caller_turn_pending = !options.agent_speaks_first;
  // An LLM-played caller: its next line is prepared beside the clock (transcribe the agent's
  // turn, ask for the line, synthesize it); `ending` once the goal is reached.
  const bool scripted = !options.caller_lines.empty() || !options.next_line;
  struct Prepared {
    std::string agent_said;
    NextCallerLine line;
    std::vector<int16_t> speech;
  };
  std::future<absl::StatusOr<Prepared>> preparing;
  // A scripted caller's next line is synthesized beside the clock too, from the moment the line
  // before it starts (the first one now): the engine can take a while (eSpeak NG is one engine
  // behind a mutex, so many runs synthesizing at once wait for each other; a speech endpoint is a
  // network request), and the clock must not stop meanwhile, or the caller's audio would reach
  // the agent in bursts. A line not ready when its turn comes waits for it, in silence.
  std::future<absl::StatusOr<std::vector<int16_t>>> next_speech;
  auto synthesize_next = [&] {
    if (!scripted || next_line >= options.caller_lines.size()) return;
    next_speech =
        std::async(std::launch::async,
                   [&synthesizer, text = options.caller_lines[next_line], rate = rec.sample_rate] {
                     return synthesizer.Synthesize(text, rate);
                   });
  };
  synthesize_next();
  size_t agent_turn_start = 0;  // where the agent's current turn begins in rec.agent
  bool ending = false;
  const int64_t end_of_turn_ticks = options.end_of_agent_turn / kFrame;
  const int64_t answer_timeout_ticks = options.answer_timeout / kFrame;
  const int64_t max_ticks = options.max_duration / kFrame;
  // Barge-in is the phone channel's: the web channel's caller says its lines out.
  const int64_t barge_in_ticks = barge_in && options.barge_in_after > absl::ZeroDuration()
                                     ? std::max<int64_t>(1, options.barge_in_after / kFrame)
                                     : 0;

  auto finish = [&](const char* reason) -> absl::StatusOr<VoiceRecording> {
    rec.end_reason = reason;
    link.Finish(rec.end_reason);
    return std::move(rec);
  };

  for (;; ++tick) {
    if (options.cancel != nullptr && options.cancel->load()) {
      link.Abort();
      return absl::CancelledError("the voice session was cancelled: the service is stopping");
    }
    if (tick >= max_ticks) return finish("max_duration");
    if (options.line_ended) {
      const std::string ended = options.line_ended();
      if (!ended.empty()) return finish(ended.c_str());
    }
    // Receive until this tick's deadline.
    const auto deadline = start + std::chrono::milliseconds(20 * (tick + 1));
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      const absl::Duration wait =
          now >= deadline ? absl::ZeroDuration()
                          : absl::Microseconds(std::chrono::duration_cast<std::chrono::microseconds>(
                                                   deadline - now)
                                                   .count());
      ASSIGN_OR_RETURN(const bool going_on, link.Receive(wait, &playout, played, &rec));
      if (!going_on) return finish("agent_ended");
      if (std::chrono::steady_clock::now() >= deadline) break;
    }

    // Play one frame of the agent.
    int16_t agent_frame[320] = {0};
    const size_t n = std::min(frame, playout.size());
    for (size_t i = 0; i < n; ++i) {
      agent_frame[i] = playout.front();
      playout.pop_front();
    }
    played += frame;
    rec.agent.insert(rec.agent.end(), agent_frame, agent_frame + frame);
    RETURN_IF_ERROR(link.Played(played));
    if (Rms(agent_frame, frame) > kSpeechRms) {
      last_agent_voice = tick;
      agent_answered = true;
      ++agent_voice_run;
    } else {
      agent_voice_run = 0;
    }
    // The agent talks over the caller's line: the caller stops there, and the carrier drops
    // what it still holds of the line, so the agent hears silence from now on. The line counts
    // as said (the next waits for the agent's turn to end); the agent's turn began with its
    // voice, not after the line.
    bool yielded = false;
    if (barge_in_ticks > 0 && speaking_at > 0 && speaking_at < speaking.size() &&
        agent_voice_run >= barge_in_ticks) {
      speaking_at = speaking.size();
      waiting_since = tick;
      agent_turn_start = rec.agent.size() -
                         std::min(rec.agent.size(), static_cast<size_t>(agent_voice_run) * frame);
      ++rec.barge_ins;
      yielded = true;
    }

    // The caller: go on with the line being said, or decide whether to start the next.
    // A scripted line still being synthesized holds the caller's turn back a tick.
    const bool line_pending =
        next_speech.valid() &&
        next_speech.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    const bool caller_busy = speaking_at < speaking.size() || preparing.valid() || line_pending;
    if (!caller_busy) {
      const bool agent_done = agent_answered && tick - last_agent_voice >= end_of_turn_ticks;
      const bool agent_silent_too_long =
          !agent_answered && tick - waiting_since >= answer_timeout_ticks;
      if (caller_turn_pending || agent_done || agent_silent_too_long) {
        if (ending) return finish("goal_reached");
        if (scripted && next_line >= options.caller_lines.size()) return finish("script_finished");
        if (turns >= options.max_turns) return finish("max_turns");
        if (scripted) {
          ASSIGN_OR_RETURN(speaking, next_speech.get());
          ++next_line;
          speaking_at = 0;
          ++turns;
          synthesize_next();
        } else {
          std::vector<int16_t> agent_turn(rec.agent.begin() + agent_turn_start, rec.agent.end());
          const bool agent_spoke = agent_answered;
          preparing = std::async(
              std::launch::async,
              [&options, &synthesizer, agent_turn = std::move(agent_turn), agent_spoke,
               conversation = rec.conversation, rate = rec.sample_rate]() mutable
              -> absl::StatusOr<Prepared> {
                Prepared p;
                if (agent_spoke) {
                  ASSIGN_OR_RETURN(p.agent_said, options.transcribe(agent_turn, rate));
                  v1::Turn turn;
                  turn.set_role("AI Assistant");
                  turn.set_content(p.agent_said);
                  if (!p.agent_said.empty()) conversation.push_back(std::move(turn));
                }
                ASSIGN_OR_RETURN(p.line, options.next_line(conversation));
                ASSIGN_OR_RETURN(p.speech, synthesizer.Synthesize(p.line.text, rate));
                return p;
              });
        }
        caller_turn_pending = false;
        agent_answered = false;
      }
    }
    if (preparing.valid() &&
        preparing.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      absl::StatusOr<Prepared> prepared = preparing.get();
      if (!prepared.ok()) {
        link.Abort();
        return prepared.status();
      }
      if (!prepared->agent_said.empty()) {
        v1::Turn turn;
        turn.set_role("AI Assistant");
        turn.set_content(prepared->agent_said);
        rec.conversation.push_back(std::move(turn));
      }
      if (!prepared->line.text.empty()) {
        v1::Turn turn;
        turn.set_role("User");
        turn.set_content(prepared->line.text);
        rec.conversation.push_back(std::move(turn));
      }
      ending = prepared->line.last;
      if (prepared->speech.empty()) {
        if (ending) return finish("goal_reached");
      } else {
        speaking = std::move(prepared->speech);
        speaking_at = 0;
        ++turns;
      }
      agent_answered = false;
      waiting_since = tick;
    }
    int16_t caller_frame[320] = {0};
    bool line_said = false;
    if (speaking_at < speaking.size()) {
      const size_t m = std::min(frame, speaking.size() - speaking_at);
      std::copy(speaking.begin() + speaking_at, speaking.begin() + speaking_at + m, caller_frame);
      speaking_at += m;
      if (speaking_at >= speaking.size()) {
        waiting_since = tick;
        agent_turn_start = rec.agent.size();  // the agent's answer starts after this line
        line_said = true;
      }
    }
    rec.caller.insert(rec.caller.end(), caller_frame, caller_frame + frame);
    ASSIGN_OR_RETURN(const bool sent, link.Send(absl::MakeConstSpan(caller_frame, frame), tick,
                                                yielded, line_said, turns));
    if (!sent) return finish("agent_ended");
  }
}

}  // namespace

absl::StatusOr<VoiceRecording> RunVoiceSession(WebSocketConnection& ws,
                                               SpeechSynthesizer& synthesizer,
                                               const VoiceSessionOptions& options) {
  MediaDialect* const dialect = options.dialect;
  const bool twilio = dialect == nullptr && options.protocol != "pcm16";
  VoiceRecording rec;
  rec.sample_rate = twilio || dialect != nullptr ? kTwilioSampleRate : 16000;
  TwilioStreamWriter writer(absl::StrCat("MZ", HexEncode(RandomBytes(16))),
                            absl::StrCat("CA", HexEncode(RandomBytes(16))),
                            absl::StrCat("AC", HexEncode(RandomBytes(16))));
  if (twilio) {
    RETURN_IF_ERROR(ws.SendText(writer.Connected()));
    std::vector<std::pair<std::string, std::string>> parameters;
    if (!options.auth_token.empty()) parameters.emplace_back("auth_token", options.auth_token);
    RETURN_IF_ERROR(ws.SendText(writer.Start(parameters)));
  }
  // The carrier's stream: the session's clock starts with it. The carrier plays the call in
  // real time and sends the agent's audio as it plays, 20 ms at a time; the clock is set so
  // that each frame arrives in the middle of the tick that plays it (the first one half a
  // frame after the clock starts), so none waits a tick behind another and the recording keeps
  // the agent where the call had it. Messages after `start` are kept for the first tick.
  std::string stream_id;
  std::vector<WebSocketMessage> early;
  std::optional<std::chrono::steady_clock::time_point> first_media;
  if (dialect != nullptr) {
    const absl::Time give_up = absl::Now() + options.answer_timeout;
    // Until `start`, then until its first media (a carrier may send none while the agent is
    // silent: the clock then starts a little later, without harm).
    std::optional<absl::Time> media_give_up;
    while (stream_id.empty() || !first_media) {
      if (options.cancel != nullptr && options.cancel->load()) {
        ws.Close();
        return absl::CancelledError("the voice session was cancelled: the service is stopping");
      }
      if (stream_id.empty() && absl::Now() >= give_up) {
        ws.Close();
        return absl::DeadlineExceededError("the carrier's media stream never started");
      }
      if (media_give_up && absl::Now() >= *media_give_up) break;
      // Poll() returns at the first message, so the arrival times hold; the wait only bounds
      // how late a cancellation or the give-up time is noticed.
      ASSIGN_OR_RETURN(std::vector<WebSocketMessage> got, ws.Poll(absl::Milliseconds(20)));
      for (WebSocketMessage& m : got) {
        absl::StatusOr<MediaEvent> event = dialect->Parse(m.data);
        if (!stream_id.empty()) {
          if (!first_media && event.ok() && event->kind == MediaEvent::kMedia) {
            first_media = std::chrono::steady_clock::now();
          }
          early.push_back(std::move(m));
          continue;
        }
        if (event.ok() && event->kind == MediaEvent::kStart) {
          stream_id = event->stream_id;
          rec.call_id = event->call_id;
          media_give_up = absl::Now() + absl::Milliseconds(200);
        }
      }
    }
  }

  const auto start =
      first_media ? *first_media - std::chrono::milliseconds(10) : std::chrono::steady_clock::now();
  WebSocketLink link(ws, options, twilio, writer, std::move(stream_id), std::move(early));
  return RunTurns(link, synthesizer, options, std::move(rec), start, dialect != nullptr);
}

absl::StatusOr<VoiceRecording> RunVoiceSession(VoiceMediaLink& media,
                                               SpeechSynthesizer& synthesizer,
                                               const VoiceSessionOptions& options) {
  VoiceRecording rec;
  rec.sample_rate = media.sample_rate();
  if (rec.sample_rate != 8000 && rec.sample_rate != 16000) {
    media.End("error");
    return absl::InvalidArgumentError("a voice session's media runs at 8 or 16 kHz");
  }
  MediaLinkAdapter link(media);
  return RunTurns(link, synthesizer, options, std::move(rec), std::chrono::steady_clock::now(),
                  false);
}

std::string EncodeStereoWav(const VoiceRecording& recording) {
  const size_t frames = std::min(recording.agent.size(), recording.caller.size());
  auto u32 = [](uint32_t v) {
    return std::string{static_cast<char>(v & 0xFF), static_cast<char>((v >> 8) & 0xFF),
                       static_cast<char>((v >> 16) & 0xFF), static_cast<char>((v >> 24) & 0xFF)};
  };
  auto u16 = [](uint16_t v) {
    return std::string{static_cast<char>(v & 0xFF), static_cast<char>((v >> 8) & 0xFF)};
  };
  const uint32_t data_bytes = static_cast<uint32_t>(frames * 4);
  const uint32_t rate = static_cast<uint32_t>(recording.sample_rate);
  std::string out = "RIFF" + u32(36 + data_bytes) + "WAVEfmt " + u32(16) + u16(1) + u16(2) +
                    u32(rate) + u32(rate * 4) + u16(4) + u16(16) + "data" + u32(data_bytes);
  out.reserve(out.size() + data_bytes);
  for (size_t i = 0; i < frames; ++i) {
    out += u16(static_cast<uint16_t>(recording.agent[i]));
    out += u16(static_cast<uint16_t>(recording.caller[i]));
  }
  return out;
}

}  // namespace calleval::runs
