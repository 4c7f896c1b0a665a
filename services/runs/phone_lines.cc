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
