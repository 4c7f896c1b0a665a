#include "services/agents/agent_rules.h"

#include <phonenumbers/phonenumber.pb.h>
#include <phonenumbers/phonenumberutil.h>

#include "absl/strings/ascii.h"
#include "common/sent_fields.h"

namespace calleval::agents::rules {
namespace {

using i18n::phonenumbers::PhoneNumber;
using i18n::phonenumbers::PhoneNumberUtil;

// Legacy integration_type / agent_kind values onto agent_source; nullopt for unknown ones.
std::optional<std::string> MapLegacySource(absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (v == "internal" || v == "custom" || v == "rubric" || v == "native") {
    return std::string(kInternal);
  }
  if (v == "vapi" || v == "external_vapi") return std::string(kExternalVapi);
  if (v == "retell" || v == "external_retell") return std::string(kExternalRetell);
  return std::nullopt;
}

constexpr absl::string_view kLegacyValues =
    "must be one of internal, custom, rubric, native, vapi, external_vapi, retell, "
    "external_retell";

// Resolves agent_source and the legacy fields of a request into `record`. Returns false when
// they are invalid, so the rules that depend on the source are not checked against a guess.
bool ApplySource(const v1::AgentFields& f, const SentKeys& sent, AgentRecord& record,
                 Issues& issues) {
  std::optional<std::string> source;  // what this request asks for
  std::string source_key;             // the key that asked for it
  bool source_invalid = false;
  if (sent.Set("agent_source", f.has_agent_source())) {
    const std::string& v = f.agent_source();
    if (v == kInternal || v == kExternalVapi || v == kExternalRetell) {
      source = v;
      source_key = "agent_source";
    } else {
      issues.Add("agent_source", "must be one of internal, external_vapi, external_retell");
      source_invalid = true;
    }
  }
  auto legacy = [&](absl::string_view key, bool has, const std::string& value) {
    if (!sent.Set(key, has)) return;
    std::optional<std::string> mapped = MapLegacySource(value);
    if (!mapped) {
      issues.Add(std::string(key), std::string(kLegacyValues));
      source_invalid = true;
    } else if (source && *source != *mapped) {
      issues.Add(std::string(key), absl::StrCat("maps to ", *mapped, ", which conflicts with ",
                                                source_key, " (", *source, ")"));
      source_invalid = true;
    } else if (!source) {
      source = *mapped;
      source_key = std::string(key);
    }
  };
  legacy("integration_type", f.has_integration_type(), f.integration_type());
  legacy("agent_kind", f.has_agent_kind(), f.agent_kind());
  if (source_invalid) return false;
  if (source) {
    record.agent_source = *source;
  } else if (sent.Null("agent_source")) {
    record.agent_source = std::string(kInternal);  // null restores the default
  }
  return true;
}

// Merges the opening message (and the legacy first_message) of a request into `record`.
void ApplyOpening(const v1::AgentFields& f, const SentKeys& sent, AgentRecord& record,
                  Issues& issues) {
  if (sent.Null("opening_message") || sent.Null("first_message")) {
    record.opening_mode = std::string(kAgentSpeaksFirst);
    record.opening_text.reset();
    record.opening_delay_ms = 0;
  }
  const bool has_opening = sent.Set("opening_message", f.has_opening_message());
  const bool has_first = sent.Set("first_message", f.has_first_message());
  if (has_opening && has_first) {
    // first_message is the old spelling of {mode: agent_speaks_first, text}; both may be sent
    // only when they say the same thing.
    const v1::OpeningMessage& om = f.opening_message();
    if ((om.has_text() && om.text() != f.first_message()) ||
        (om.has_mode() && om.mode() != kAgentSpeaksFirst)) {
      issues.Add("first_message", "conflicts with opening_message; send only opening_message");
      return;
    }
  }
  if (has_opening) {
    const v1::OpeningMessage& om = f.opening_message();
    // Keys inside opening_message merge into the stored one; the ones not sent are kept.
    if (om.has_mode()) record.opening_mode = om.mode();
    if (om.has_text()) record.opening_text = om.text();
    if (om.has_delay_ms()) record.opening_delay_ms = om.delay_ms();
  }
  if (has_first) {
    record.opening_mode = std::string(kAgentSpeaksFirst);
    record.opening_text = f.first_message();
  }
  if (record.opening_text && record.opening_text->empty()) record.opening_text.reset();
}

// Merges web_channel (key by key; null removes the channel) and the `transport` shorthand
// (seed: kept for backward compatibility; null removes the channel too) into `record`.
void ApplyWebChannel(const v1::AgentFields& f, const SentKeys& sent, AgentRecord& record,
                     Issues& issues) {
  if (sent.Null("web_channel") || sent.Null("transport")) record.web_channel.reset();
  if (sent.Set("web_channel", f.has_web_channel())) {
    if (!record.web_channel) record.web_channel = WebChannel();
    std::vector<FieldIssue> found;
    MergeWebChannel(f.web_channel(), &*record.web_channel, &found);
    for (auto& i : found) issues.Add(*i.field, i.issue);
  }
  if (sent.Set("transport", f.has_transport())) {
    auto sent_transport = f.web_channel().fields().find("transport");
    if (f.has_web_channel() && sent_transport != f.web_channel().fields().end() &&
        sent_transport->second.string_value() != f.transport()) {
      issues.Add("transport", "conflicts with web_channel.transport; send only web_channel");
      return;
    }
    if (!record.web_channel) record.web_channel = WebChannel();
    record.web_channel->fields["transport"] = f.transport();
  }
}

// E.164 input, possibly with spaces, dashes, dots or parentheses between digits.
bool HasOnlyPhoneCharacters(absl::string_view s) {
  if (s.empty() || s[0] != '+') return false;
  return std::all_of(s.begin() + 1, s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == ' ' || c == '-' || c == '.' ||
           c == '(' || c == ')';
  });
}

}  // namespace

bool IsExternal(absl::string_view source) {
  return source == kExternalVapi || source == kExternalRetell;
}

bool ApplyFields(const v1::AgentFields& f, AgentRecord& record, Issues& issues) {
  const SentKeys sent(f);
  auto string_field = [&](absl::string_view key, bool has, const std::string& value,
                          std::optional<std::string>& out) {
    if (sent.Set(key, has)) {
      out = value;
    } else if (sent.Null(key)) {
      out.reset();
    }
  };
  auto int_field = [&](absl::string_view key, bool has, int64_t value,
                       std::optional<int64_t>& out) {
    if (sent.Set(key, has)) {
      out = value;
    } else if (sent.Null(key)) {
      out.reset();
    }
  };

  string_field("name", f.has_name(), f.name(), record.name);
  string_field("phone_number", f.has_phone_number(), f.phone_number(), record.phone_number);
  const bool source_known = ApplySource(f, sent, record, issues);
  string_field("assistant_id", f.has_assistant_id(), f.assistant_id(), record.assistant_id);
  if (sent.Set("call_directions", f.call_directions_size() > 0)) {
    record.call_directions.assign(f.call_directions().begin(), f.call_directions().end());
  } else if (sent.Null("call_directions")) {
    record.call_directions = {std::string(kInbound)};
  }
  int_field("language_id", f.has_language_id(), f.language_id(), record.language_id);
  string_field("instructions", f.has_instructions(), f.instructions(), record.instructions);
  ApplyOpening(f, sent, record, issues);
  if (sent.Set("max_call_duration_seconds", f.has_max_call_duration_seconds())) {
    record.max_call_duration_seconds = f.max_call_duration_seconds();
  } else if (sent.Null("max_call_duration_seconds")) {
    record.max_call_duration_seconds = kDefaultMaxCallDurationSeconds;
  }
  if (sent.Set("disabled_metric_ids", f.disabled_metric_ids_size() > 0)) {
    record.disabled_metric_ids.assign(f.disabled_metric_ids().begin(),
                                      f.disabled_metric_ids().end());
  } else if (sent.Null("disabled_metric_ids")) {
    record.disabled_metric_ids.clear();
  }
  int_field("silence_threshold_ms", f.has_silence_threshold_ms(), f.silence_threshold_ms(),
            record.silence_threshold_ms);
  string_field("model", f.has_model(), f.model(), record.model);
  string_field("voice", f.has_voice(), f.voice(), record.voice);
  string_field("version", f.has_version(), f.version(), record.version);
  ApplyWebChannel(f, sent, record, issues);
  // Free-text settings sent empty mean "none".
  if (record.model && record.model->empty()) record.model.reset();
  if (record.voice && record.voice->empty()) record.voice.reset();
  if (record.version && record.version->empty()) record.version.reset();
  return source_known;
}

void CheckLength(absl::string_view field, const std::optional<std::string>& value, size_t max,
                 Issues& issues) {
  if (value && CharLength(*value) > max) {
    issues.Add(std::string(field), absl::StrCat("must be at most ", max, " characters"));
  }
}

std::optional<std::pair<std::string, int>> NormalizePhone(absl::string_view raw, Issues& issues,
                                                          absl::string_view field) {
  const absl::string_view input = absl::StripAsciiWhitespace(raw);
  if (!HasOnlyPhoneCharacters(input)) {
    issues.Add(std::string(field),
               "must be an E.164 number: + followed by the country calling code and the "
               "number, e.g. +14155552671");
    return std::nullopt;
  }
  const PhoneNumberUtil* util = PhoneNumberUtil::GetInstance();
  PhoneNumber number;
  // Region "ZZ" (unknown): only numbers in international form with '+' parse.
  switch (util->Parse(std::string(input), "ZZ", &number)) {
    case PhoneNumberUtil::NO_PARSING_ERROR:
      break;
    case PhoneNumberUtil::INVALID_COUNTRY_CODE_ERROR:
      issues.Add(std::string(field), "is not a valid phone number: unknown country calling code");
      return std::nullopt;
    case PhoneNumberUtil::TOO_LONG_NSN:
      issues.Add(std::string(field), "is not a valid phone number: too long");
      return std::nullopt;
    case PhoneNumberUtil::TOO_SHORT_NSN:
    case PhoneNumberUtil::TOO_SHORT_AFTER_IDD:
      issues.Add(std::string(field), "is not a valid phone number: too short");
      return std::nullopt;
    default:
      issues.Add(std::string(field), "is not a valid phone number");
      return std::nullopt;
  }
  if (!util->IsValidNumber(number)) {
    // Say why when the length alone rules it out; otherwise the digits match no number plan.
    std::string why = "no such number";
    switch (util->IsPossibleNumberWithReason(number)) {
      case PhoneNumberUtil::TOO_SHORT:
      case PhoneNumberUtil::IS_POSSIBLE_LOCAL_ONLY:
        why = "too short";
        break;
      case PhoneNumberUtil::TOO_LONG:
        why = "too long";
        break;
      default:
        break;
    }
    issues.Add(std::string(field), absl::StrCat("is not a valid phone number for country calling "
                                            "code +",
                                            number.country_code(), ": ", why));
    return std::nullopt;
  }
  std::string e164;
  util->Format(number, PhoneNumberUtil::E164, &e164);
  return std::make_pair(std::move(e164), static_cast<int>(number.country_code()));
}

}  // namespace calleval::agents::rules
