#include "services/runs/phone_lines.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/crypto.h"
#include "services/runs/line_route.h"

namespace calleval::runs {

struct PhoneLine::State {
  std::string carrier;
  std::string token;
  std::string base_url;
  WebhookReader read;
  absl::Time expires;
  // Inbound lines (set at opening; `taken` guarded by the registry's mu_).
  bool inbound = false;
  std::string from, to;  // the agent's number, the workspace's number awaited
  uint64_t sequence = 0;
  bool taken = false;  // the incoming call came
  // Guarded by mu.
  std::mutex mu;
  std::string answer_document;
  std::condition_variable arrived;
  std::vector<CarrierEvent> events;
  std::optional<MediaHandoff> media;
  bool media_claimed = false;
  bool closed = false;
};

PhoneLine::PhoneLine(PhoneLines* lines, std::shared_ptr<State> state)
    : lines_(lines), state_(std::move(state)) {}

PhoneLine::~PhoneLine() {
  lines_->Close(state_->token);
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->closed = true;
  if (state_->media) ::close(state_->media->fd);  // handed over, never taken
  state_->media.reset();
}

const std::string& PhoneLine::token() const { return state_->token; }

std::string PhoneLine::media_url() const {
  std::string base = state_->base_url;
  if (absl::StartsWith(base, "https://")) {
    base = absl::StrCat("wss://", base.substr(8));
  } else if (absl::StartsWith(base, "http://")) {
    base = absl::StrCat("ws://", base.substr(7));
  }
  return absl::StrCat(base, "/media/", state_->carrier, "/", state_->token);
}

std::string PhoneLine::events_url() const {
  return absl::StrCat(state_->base_url, "/media/", state_->carrier, "/", state_->token, "/events");
}

std::string PhoneLine::answer_url() const {
  return absl::StrCat(state_->base_url, "/media/", state_->carrier, "/", state_->token, "/answer");
}

const std::string& PhoneLine::awaited_number() const { return state_->to; }

PhoneLine::Arrived PhoneLine::Wait(absl::Duration wait) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->arrived.wait_for(lock, absl::ToChronoMicroseconds(wait),
                           [this] { return !state_->events.empty() || state_->media.has_value(); });
  Arrived out;
  out.events.swap(state_->events);
  out.media = std::move(state_->media);
  state_->media.reset();
  return out;
}

void PhoneLine::set_answer_document(std::string document) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->answer_document = std::move(document);
}

PhoneLines::PhoneLines(std::string public_base_url)
    : public_base_url_(std::move(public_base_url)) {}

PhoneLines::PhoneLines(std::string public_base_url, std::string holder_address,
                       std::string credential)
    : public_base_url_(std::move(public_base_url)),
      holder_address_(std::move(holder_address)),
      credential_(std::move(credential)) {}

std::unique_ptr<PhoneLine> PhoneLines::Open(std::string carrier, WebhookReader read,
                                            absl::Duration ttl) {
  auto state = std::make_shared<PhoneLine::State>();
  state->carrier = std::move(carrier);
  state->token = Base64Url(RandomBytes(32));
  if (!holder_address_.empty()) {
    state->token = RoutedLineToken(state->token, holder_address_, credential_);
  }
  state->base_url = public_base_url_;
  state->read = std::move(read);
  state->expires = absl::Now() + ttl;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lines_[state->token] = state;
  }
  return std::unique_ptr<PhoneLine>(new PhoneLine(this, std::move(state)));
}

namespace {

// A number as its digits: carriers write the same number as +14155552671 (Twilio, Telnyx) or
// 14155552671 (Plivo).
std::string Digits(absl::string_view number) {
  std::string out;
  for (char c : number) {
    if (c >= '0' && c <= '9') out += c;
  }
  return out;
}

}  // namespace

std::unique_ptr<PhoneLine> PhoneLines::OpenInbound(std::string carrier, WebhookReader read,
                                                   absl::Duration ttl, const std::string& from,
                                                   const std::vector<std::string>& numbers) {
  std::unique_ptr<PhoneLine> line = Open(std::move(carrier), std::move(read), ttl);
  PhoneLine::State& state = *line->state_;
  std::lock_guard<std::mutex> lock(mu_);
  std::string chosen = numbers.empty() ? std::string() : numbers.front();
  for (const std::string& number : numbers) {
    bool used = false;
    for (const auto& [token, other] : lines_) {
      used = used || (other->inbound && !other->taken && other->carrier == state.carrier &&
                      Digits(other->from) == Digits(from) && Digits(other->to) == Digits(number));
    }
    if (!used) {
      chosen = number;
      break;
    }
  }
  state.from = from;
  state.to = chosen;
  state.sequence = ++sequence_;
  state.inbound = true;
  return line;
}

absl::StatusOr<PhoneLines::IncomingAnswer> PhoneLines::Incoming(absl::string_view path,
                                                                CarrierWebhook hook) {
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, "/media/") || !absl::ConsumeSuffix(&rest, "/incoming") ||
      rest.empty() || absl::StrContains(rest, '/')) {
    return absl::NotFoundError("no phone line is waiting at this address");
  }
  const std::string carrier(rest);
  hook.url = absl::StrCat(public_base_url_, path);
  IncomingAnswer answer;
  absl::StatusOr<IncomingCall> call = ReadIncomingCall(carrier, hook);
  if (!call.ok() && call.status().code() == absl::StatusCode::kNotFound) {
    return answer;  // another event of the number's calls: nothing to do
  }
  if (!call.ok()) return call.status();
  // The oldest waiting line for these numbers (unverified: they only pick the line whose
  // account checks the signature).
  auto find = [&]() -> std::shared_ptr<PhoneLine::State> {
    std::shared_ptr<PhoneLine::State> oldest;
    const absl::Time now = absl::Now();
    for (const auto& [token, line] : lines_) {
      if (!line->inbound || line->taken || line->carrier != carrier || now >= line->expires ||
          Digits(line->from) != Digits(call->from) || Digits(line->to) != Digits(call->to)) {
        continue;
      }
      if (!oldest || line->sequence < oldest->sequence) oldest = line;
    }
    return oldest;
  };
  std::shared_ptr<PhoneLine::State> line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    line = find();
  }
  if (!line) {
    answer.document = IncomingCallRejection(carrier);
    return answer;
  }
  absl::StatusOr<std::vector<CarrierEvent>> verified = line->read(hook);
  if (!verified.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the webhook's signature was refused: ", verified.status().message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A second delivery of the same call may have been verified meanwhile: one line per call.
    if (line->taken || lines_.find(line->token) == lines_.end()) {
      answer.document = IncomingCallRejection(carrier);
      return answer;
    }
    line->taken = true;
  }
  CarrierEvent taken;
  taken.progress = CarrierEvent::kAnswered;
  taken.call_id = call->call_id;
  taken.detail = absl::StrCat("the agent called ", call->to, " from ", call->from);
  std::lock_guard<std::mutex> lock(line->mu);
  line->events.push_back(std::move(taken));
  line->arrived.notify_all();
  answer.matched = true;
  answer.document = line->answer_document;
  return answer;
}

void PhoneLines::Close(const std::string& token) {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.erase(token);
}

size_t PhoneLines::open_lines() {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_.size();
}

std::optional<PhoneLines::Target> PhoneLines::ParsePath(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/media/")) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty() || parts[1].empty()) {
    return std::nullopt;
  }
  Target target{parts[0], parts[1], parts.size() == 3 ? parts[2] : ""};
  if (parts.size() == 3 && target.rest != "events" && target.rest != "answer") return std::nullopt;
  return target;
}

absl::StatusOr<std::shared_ptr<PhoneLine::State>> PhoneLines::Find(const Target& target) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lines_.find(target.token);
  // The same answer for an unknown token, an expired one and another carrier's: a token is
  // never confirmed to whoever guesses at it.
  if (it == lines_.end() || it->second->carrier != target.carrier ||
      absl::Now() >= it->second->expires) {
    return absl::NotFoundError("no phone line is waiting at this address");
  }
  return it->second;
}

absl::Status PhoneLines::Webhook(absl::string_view path, CarrierWebhook hook) {
  std::optional<Target> target = ParsePath(path);
  if (!target || target->rest != "events") {
    return absl::NotFoundError("no phone line is waiting at this address");
  }
  absl::StatusOr<std::shared_ptr<PhoneLine::State>> line = Find(*target);
  if (!line.ok()) return line.status();
  hook.url = absl::StrCat(public_base_url_, path);
  absl::StatusOr<std::vector<CarrierEvent>> events = (*line)->read(hook);
  if (!events.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the webhook's signature was refused: ", events.status().message()));
  }
  std::lock_guard<std::mutex> lock((*line)->mu);
  for (CarrierEvent& event : *events) (*line)->events.push_back(std::move(event));
  (*line)->arrived.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::function<void(MediaHandoff)>> PhoneLines::ClaimMedia(absl::string_view path) {
  std::optional<Target> target = ParsePath(path);
  if (!target || !target->rest.empty()) {
    return absl::NotFoundError("no phone line is waiting at this address");
  }
  absl::StatusOr<std::shared_ptr<PhoneLine::State>> line = Find(*target);
  if (!line.ok()) return line.status();
  std::shared_ptr<PhoneLine::State> state = *std::move(line);
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->media_claimed) {
      return absl::AlreadyExistsError("this phone line's media token was used already");
    }
    state->media_claimed = true;
  }
  return [state](MediaHandoff handoff) {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->closed) {
      ::close(handoff.fd);
      return;
    }
    state->media = std::move(handoff);
    state->arrived.notify_all();
  };
}

absl::StatusOr<std::string> PhoneLines::Answer(absl::string_view path,
                                               std::optional<CarrierWebhook> fetch) {
  std::optional<Target> target = ParsePath(path);
  if (!target || target->rest != "answer") {
    return absl::NotFoundError("no phone line is waiting at this address");
  }
  absl::StatusOr<std::shared_ptr<PhoneLine::State>> line = Find(*target);
  if (!line.ok()) return line.status();
  std::vector<CarrierEvent> events;
  if (fetch && !fetch->body.empty()) {
    fetch->url = absl::StrCat(public_base_url_, path);
    absl::StatusOr<std::vector<CarrierEvent>> read = (*line)->read(*fetch);
    if (read.ok()) events = *std::move(read);
  }
  std::lock_guard<std::mutex> lock((*line)->mu);
  if (!events.empty()) {
    for (CarrierEvent& event : events) (*line)->events.push_back(std::move(event));
    (*line)->arrived.notify_all();
  }
  return (*line)->answer_document;
}

}  // namespace calleval::runs
