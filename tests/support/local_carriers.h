#pragma once

// The three local carriers a phone test runs against (the local Twilio, Telnyx and Plivo, each
// bridging its calls to the test agent), read through the one a parametrized test names: the
// numbers that select it, the workspace's integration settings for it, how its agent picks up,
// the calls it played, a forged hangup webhook. Shared by the in-process and the two-process
// phone tests and the phone benchmark.

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/support/fake_carriers.h"
#include "tests/support/fake_twilio_server.h"

namespace calleval {

class LocalCarriers {
 public:
  static constexpr char kTwilioAccountSid[] = "AC0123456789abcdef0123456789abcdef";
  static constexpr char kTwilioAuthToken[] = "twilio-auth-token";
  // The workspace's number: the caller number runs call from and agents call in to.
  static constexpr char kWorkspaceNumber[] = "+14155552671";

  // Every carrier's agent answers `agent_delay` after the caller stops speaking.
  explicit LocalCarriers(absl::Duration agent_delay);

  FakeTwilioServer& twilio() { return *twilio_; }
  FakeTelnyx& telnyx() { return telnyx_; }
  FakePlivo& plivo() { return plivo_; }

  // The carrier's REST API base (--<carrier>-api-url).
  std::string ApiUrl(const std::string& carrier) const;
  // A number that selects `carrier` (docs/api.md: +1 is Twilio's, +91 Plivo's, +33 Telnyx's).
  static std::string Number(const std::string& carrier, int n);
  // The workspace's integration settings for `carrier` (docs/api.md §5.8), calling from
  // kWorkspaceNumber.
  nlohmann::json Settings(const std::string& carrier) const;
  // Where each carrier posts an agent's call to the workspace's numbers.
  void SetIncomingUrl(const std::string& carrier, const std::string& url);

  // How the agent at `to` picks up.
  void SetLine(const std::string& carrier, const std::string& to, FakeLine line);
  // The calls `carrier` played, the same fields for each carrier.
  std::vector<PlayedCall> Calls(const std::string& carrier);
  // The call to `to`; empty when there was none.
  PlayedCall CallTo(const std::string& carrier, const std::string& to);
  // The agent's last call from `from` (earlier ones may have come before a run awaited them).
  PlayedCall CallFrom(const std::string& carrier, const std::string& from);
  bool WaitForEnd(const std::string& carrier, const std::string& to,
                  absl::Duration timeout = absl::Seconds(10));
  // A webhook saying the call to `to` was hung up, which the account did not sign: the HTTP
  // status the service answered (0 when it could not be reached).
  int PostForgedHangup(const std::string& carrier, const std::string& to);

 private:
  std::unique_ptr<FakeTwilioServer> twilio_;
  FakeTelnyx telnyx_;
  FakePlivo plivo_;
};

}  // namespace calleval
