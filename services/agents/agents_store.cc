#include "services/agents/agents_store.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/errors.h"
#include "common/pagination.h"
#include "common/sent_fields.h"
#include "common/status_macros.h"
#include "common/crypto.h"
#include "services/agents/agent_rules.h"
#include "services/agents/web_channel.h"

namespace calleval::agents {
namespace {

// The rules of an agent's fields (agent_rules.h); this file keeps the SQL and the sealing.
using rules::AgentRecord;
using rules::ApplyFields;
using rules::CheckLength;
using rules::Deduplicate;
using rules::Issues;
using rules::IsExternal;
using rules::kAgentSpeaksFirst;
using rules::kInbound;
using rules::kOutbound;
using rules::kUserSpeaksFirst;
using rules::NormalizePhone;

constexpr absl::string_view kAgentColumns =
    "id, workspace_id, name, phone_number, telephony_carrier, agent_source, assistant_id, "
    "call_directions, language_id, instructions, opening_message, max_call_duration_seconds, "
    "disabled_metric_ids, silence_threshold_ms, model, voice, created_at, updated_at, "
    "web_channel, web_channel_credentials, version";

absl::StatusOr<bool> LanguageExists(db::Connection& c, int64_t id) {
  ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT 1 FROM languages WHERE id = ?"));
  stmt.Bind(1, id);
  return stmt.Step();
}

// Checks the merged agent against every rule and normalizes it (E.164 phone, carrier,
// duplicate-free lists, fields ignored for its source). Problems are added to `issues`; with
// `source_known` false the rules that depend on agent_source are skipped.
absl::Status Validate(db::Connection& c, const AgentsStore& store,
                      const UrlGuardOptions& url_guard, bool source_known, AgentRecord& r,
                      Issues& issues) {
  if (!r.name) {
    issues.Add("name", "is required");
  } else if (IsBlank(*r.name)) {
    issues.Add("name", "must not be empty");
  } else {
    CheckLength("name", r.name, kMaxNameLength, issues);
  }

  // The phone is required unless the agent can be reached over its web channel (docs/api.md §5).
  r.telephony_carrier.reset();
  if (!r.phone_number) {
    if (!r.web_channel) issues.Add("phone_number", "is required unless web_channel is given");
  } else if (auto normalized = NormalizePhone(*r.phone_number, issues)) {
    r.phone_number = std::move(normalized->first);
    r.telephony_carrier = store.CarrierFor(normalized->second);
  }

  const bool external = IsExternal(r.agent_source);
  if (!source_known) {
    CheckLength("assistant_id", r.assistant_id, kMaxNameLength, issues);
  } else if (external) {
    if (!r.assistant_id || IsBlank(*r.assistant_id)) {
      issues.Add("assistant_id", absl::StrCat("is required when agent_source is ", r.agent_source));
    } else {
      CheckLength("assistant_id", r.assistant_id, kMaxNameLength, issues);
    }
  } else {
    r.assistant_id.reset();  // ignored for internal agents
  }

  if (r.call_directions.empty()) {
    issues.Add("call_directions", "must not be empty (inbound, outbound)");
  }
  for (size_t i = 0; i < r.call_directions.size(); ++i) {
    if (r.call_directions[i] != kInbound && r.call_directions[i] != kOutbound) {
      issues.Add(absl::StrCat("call_directions[", i, "]"), "must be inbound or outbound");
    }
  }
  Deduplicate(r.call_directions);

  if (r.language_id) {
    ASSIGN_OR_RETURN(bool exists, LanguageExists(c, *r.language_id));
    if (!exists) {
      issues.Add("language_id",
                 absl::StrCat("no language ", *r.language_id, " (see GET /api/v1/languages)"));
    }
  } else if (source_known && !external) {
    issues.Add("language_id", "is required for internal agents");
  }

  if (source_known && !external && (!r.instructions || IsBlank(*r.instructions))) {
    issues.Add("instructions", "is required for internal agents");
  } else {
    CheckLength("instructions", r.instructions, kMaxInstructionsLength, issues);
  }

  if (r.opening_mode != kAgentSpeaksFirst && r.opening_mode != kUserSpeaksFirst) {
    issues.Add("opening_message.mode", "must be agent_speaks_first or user_speaks_first");
  }
  CheckLength("opening_message.text", r.opening_text, kMaxOpeningTextLength, issues);
  if (r.opening_delay_ms < 0 || r.opening_delay_ms > kMaxOpeningDelayMs) {
    issues.Add("opening_message.delay_ms",
               absl::StrCat("must be between 0 and ", kMaxOpeningDelayMs));
  }

  if (r.max_call_duration_seconds < 1 || r.max_call_duration_seconds > kMaxCallDurationSeconds) {
    issues.Add("max_call_duration_seconds",
               absl::StrCat("must be between 1 and ", kMaxCallDurationSeconds));
  }

  for (size_t i = 0; i < r.disabled_metric_ids.size(); ++i) {
    if (r.disabled_metric_ids[i] <= 0) {
      issues.Add(absl::StrCat("disabled_metric_ids[", i, "]"), "must be a positive metric id");
    }
  }
  Deduplicate(r.disabled_metric_ids);

  if (r.silence_threshold_ms && (*r.silence_threshold_ms < kMinSilenceThresholdMs ||
                                 *r.silence_threshold_ms > kMaxSilenceThresholdMs)) {
    issues.Add("silence_threshold_ms", absl::StrCat("must be between ", kMinSilenceThresholdMs,
                                                    " and ", kMaxSilenceThresholdMs));
  }
  CheckLength("model", r.model, kMaxNameLength, issues);
  CheckLength("version", r.version, kMaxNameLength, issues);
  CheckLength("voice", r.voice, kMaxNameLength, issues);
  if (r.web_channel) {
    std::vector<FieldIssue> found;
    ValidateWebChannel(&*r.web_channel, url_guard, &found);
    for (auto& i : found) issues.Add(*i.field, i.issue);
  }
  return absl::OkStatus();
}

std::string OpeningJson(const AgentRecord& r) {
  nlohmann::json j = {{"mode", r.opening_mode}, {"delay_ms", r.opening_delay_ms}};
  j["text"] = r.opening_text ? nlohmann::json(*r.opening_text) : nlohmann::json(nullptr);
  return j.dump();
}

absl::StatusOr<AgentRecord> RecordFromRow(const db::Statement& s) {
  AgentRecord r;
  r.id = s.Int64(0);
  r.workspace_id = s.Int64(1);
  r.name = s.Text(2);
  r.phone_number = s.OptionalText(3);
  r.telephony_carrier = s.OptionalText(4);
  r.agent_source = s.Text(5);
  r.assistant_id = s.OptionalText(6);
  const auto directions = nlohmann::json::parse(s.Text(7), nullptr, /*allow_exceptions=*/false);
  const auto opening = nlohmann::json::parse(s.OptionalText(10).value_or("{}"), nullptr, false);
  const auto disabled = nlohmann::json::parse(s.Text(12), nullptr, false);
  if (!directions.is_array() || !opening.is_object() || !disabled.is_array()) {
    return InternalError(absl::StrCat("agent ", r.id, " has a corrupt stored field"));
  }
  r.call_directions.clear();
  for (const auto& d : directions) {
    if (d.is_string()) r.call_directions.push_back(d.get<std::string>());
  }
  r.language_id = s.OptionalInt64(8);
  r.instructions = s.OptionalText(9);
  if (auto it = opening.find("mode"); it != opening.end() && it->is_string()) {
    r.opening_mode = it->get<std::string>();
  }
  if (auto it = opening.find("text"); it != opening.end() && it->is_string()) {
    r.opening_text = it->get<std::string>();
  }
  if (auto it = opening.find("delay_ms"); it != opening.end() && it->is_number_integer()) {
    r.opening_delay_ms = it->get<int64_t>();
  }
  r.max_call_duration_seconds = s.Int64(11);
  for (const auto& id : disabled) {
    if (id.is_number_integer()) r.disabled_metric_ids.push_back(id.get<int64_t>());
  }
  r.silence_threshold_ms = s.OptionalInt64(13);
  r.model = s.OptionalText(14);
  r.voice = s.OptionalText(15);
  r.created_at = s.Text(16);
  r.updated_at = s.Text(17);
  if (std::optional<std::string> stored = s.OptionalText(18)) {
    // {"fields": {...}, "credentials_set": [...]}
    nlohmann::json j = nlohmann::json::parse(*stored, nullptr, false);
    if (j.is_object() && j.contains("fields") && j["fields"].is_object()) {
      r.web_channel = WebChannel();
      r.web_channel->fields = j["fields"];
      for (const auto& name : j.value("credentials_set", nlohmann::json::array())) {
        if (name.is_string()) r.credentials_set.push_back(name.get<std::string>());
      }
    }
  }
  if (!s.IsNull(19)) r.sealed_credentials = s.Text(19);
  r.version = s.OptionalText(20);
  return r;
}

v1::Agent ToProto(const AgentRecord& r) {
  v1::Agent a;
  a.set_id(r.id);
  a.set_client_id(r.workspace_id);
  a.set_name(r.name.value_or(""));
  if (r.phone_number) a.set_phone_number(*r.phone_number);
  if (r.telephony_carrier) a.set_telephony_carrier(*r.telephony_carrier);
  a.set_agent_source(r.agent_source);
  if (r.assistant_id) a.set_assistant_id(*r.assistant_id);
  for (const auto& d : r.call_directions) a.add_call_directions(d);
  if (r.language_id) a.set_language_id(*r.language_id);
  if (r.instructions) a.set_instructions(*r.instructions);
  auto* om = a.mutable_opening_message();
  om->set_mode(r.opening_mode);
  if (r.opening_text) om->set_text(*r.opening_text);
  om->set_delay_ms(static_cast<int32_t>(r.opening_delay_ms));
  // Phone-only agents: transport and web_channel stay unset (null).
  if (r.web_channel) {
    WebChannel shown;
    shown.fields = r.web_channel->fields;
    for (const std::string& name : r.credentials_set) shown.credentials[name] = true;
    *a.mutable_web_channel() = WebChannelResponse(shown);
    a.set_transport(r.web_channel->fields.value("transport", ""));
  }
  a.set_max_call_duration_seconds(static_cast<int32_t>(r.max_call_duration_seconds));
  for (int64_t id : r.disabled_metric_ids) a.add_disabled_metric_ids(id);
  if (r.silence_threshold_ms)
    a.set_silence_threshold_ms(static_cast<int32_t>(*r.silence_threshold_ms));
  if (r.model) a.set_model(*r.model);
  if (r.voice) a.set_voice(*r.voice);
  if (r.version) a.set_version(*r.version);
  a.set_created_at(r.created_at);
  a.set_updated_at(r.updated_at);
  return a;
}

absl::StatusOr<AgentRecord> ReadAgent(db::Connection& c, int64_t workspace_id, int64_t id) {
  static const std::string sql =
      absl::StrCat("SELECT ", kAgentColumns, " FROM agents WHERE id = ? AND workspace_id = ?");
  ASSIGN_OR_RETURN(auto stmt, c.Prepare(sql));
  stmt.Bind(1, id).Bind(2, workspace_id);
  ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return NotFoundError(absl::StrCat("agent ", id));
  return RecordFromRow(stmt);
}

// Binds the writable columns, in the order both INSERT and UPDATE list them, from index 1.
void BindWritable(db::Statement& s, const AgentRecord& r) {
  s.Bind(1, r.name.value_or(""))
      .Bind(2, r.phone_number)
      .Bind(3, r.telephony_carrier)
      .Bind(4, r.agent_source)
      .Bind(5, r.assistant_id)
      .Bind(6, nlohmann::json(r.call_directions).dump())
      .Bind(7, r.language_id)
      .Bind(8, r.instructions)
      .Bind(9, OpeningJson(r))
      .Bind(10, r.max_call_duration_seconds)
      .Bind(11, nlohmann::json(r.disabled_metric_ids).dump())
      .Bind(12, r.silence_threshold_ms)
      .Bind(13, r.model)
      .Bind(14, r.voice)
      .Bind(15, r.updated_at);
  if (r.web_channel) {
    nlohmann::json stored = {{"fields", r.web_channel->fields},
                             {"credentials_set", r.credentials_set}};
    s.Bind(16, stored.dump());
  } else {
    s.BindNull(16);
  }
}

// What a sealed credentials blob is bound to: the agent's row.
std::string CredentialsContext(int64_t agent_id) { return absl::StrCat("agent ", agent_id); }

// Which credentials the record holds, for the stored `credentials_set`.
void NoteCredentials(AgentRecord& record) {
  record.credentials_set.clear();
  if (!record.web_channel) return;
  for (const auto& [name, value] : record.web_channel->credentials.items()) {
    record.credentials_set.push_back(name);
  }
}

// Opens the stored credentials into record.web_channel for a merge.
absl::Status UnsealCredentials(const std::string& key, AgentRecord& record) {
  if (!record.web_channel || record.sealed_credentials.empty()) return absl::OkStatus();
  if (key.empty()) {
    return InternalError("the agent's web channel credentials cannot be read: no credentials key");
  }
  ASSIGN_OR_RETURN(std::string plain, Unseal(key, record.sealed_credentials,
                                             CredentialsContext(record.id)));
  nlohmann::json credentials = nlohmann::json::parse(plain, nullptr, false);
  if (credentials.is_object()) record.web_channel->credentials = std::move(credentials);
  return absl::OkStatus();
}

// Seals the record's credentials onto its row (NULL when it has none).
absl::Status WriteCredentials(db::Connection& c, const std::string& key,
                              const AgentRecord& record) {
  ASSIGN_OR_RETURN(auto stmt,
                   c.Prepare("UPDATE agents SET web_channel_credentials = ? WHERE id = ?"));
  if (record.credentials_set.empty()) {
    stmt.BindNull(1);
  } else {
    if (key.size() != 32) {
      return InternalError("web channel credentials cannot be stored: no credentials key");
    }
    stmt.BindBlob(1, Seal(key, record.web_channel->credentials.dump(),
                          CredentialsContext(record.id)));
  }
  stmt.Bind(2, record.id);
  return stmt.Run();
}

}  // namespace

std::map<int, std::string> DefaultCarriers() {
  return {{1, "twilio"}, {44, "twilio"}, {91, "plivo"}};
}

AgentsStore::AgentsStore(db::Database* db, Options options)
    : db_(db), options_(std::move(options)) {}

absl::StatusOr<std::optional<WebChannel>> AgentsStore::GetWebChannel(int64_t workspace_id,
                                                                     int64_t agent_id) {
  return db::ReadResult<std::optional<WebChannel>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::optional<WebChannel>> {
        ASSIGN_OR_RETURN(AgentRecord record, ReadAgent(c, workspace_id, agent_id));
        RETURN_IF_ERROR(UnsealCredentials(options_.credentials_key, record));
        return record.web_channel;
      });
}

const std::string& AgentsStore::CarrierFor(int country_code) const {
  auto it = options_.carriers.find(country_code);
  return it == options_.carriers.end() ? options_.default_carrier : it->second;
}

absl::StatusOr<v1::Agent> AgentsStore::Create(int64_t workspace_id, const v1::AgentFields& fields) {
  return db::WriteResult<v1::Agent>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Agent> {
    AgentRecord record;
    record.workspace_id = workspace_id;
    Issues issues;
    const bool source_known = ApplyFields(fields, record, issues);
    RETURN_IF_ERROR(Validate(c, *this, options_.url_guard, source_known, record, issues));
    if (!issues.empty()) return std::move(issues).ToStatus();
    record.created_at = record.updated_at = NowTimestamp();
    NoteCredentials(record);
    ASSIGN_OR_RETURN(auto insert,
                     c.Prepare("INSERT INTO agents (name, phone_number, telephony_carrier, "
                               "agent_source, assistant_id, call_directions, language_id, "
                               "instructions, opening_message, max_call_duration_seconds, "
                               "disabled_metric_ids, silence_threshold_ms, model, voice, "
                               "updated_at, web_channel, workspace_id, created_at, version) VALUES "
                               "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                               "RETURNING id"));
    BindWritable(insert, record);
    insert.Bind(17, workspace_id).Bind(18, record.created_at).Bind(19, record.version);
    ASSIGN_OR_RETURN(record.id, insert.RunReturningId());
    RETURN_IF_ERROR(WriteCredentials(c, options_.credentials_key, record));
    return ToProto(record);
  });
}

absl::StatusOr<v1::CallAgent> AgentsStore::GetCallAgent(int64_t workspace_id, int64_t id) {
  // One statement of the four columns a call needs, not the whole row with its JSON fields:
  // every ingest asks it, so it is on the hot path.
  return db::ReadResult<v1::CallAgent>(
      *db_, db::kSingleStatementRead, [&](db::Connection& c) -> absl::StatusOr<v1::CallAgent> {
        ASSIGN_OR_RETURN(auto stmt,
                         c.Prepare("SELECT disabled_metric_ids, silence_threshold_ms, name, "
                                   "agent_source, version FROM agents WHERE id = ? AND "
                                   "workspace_id = ?"));
        stmt.Bind(1, id).Bind(2, workspace_id);
        ASSIGN_OR_RETURN(bool found, stmt.Step());
        if (!found) return NotFoundError(absl::StrCat("agent ", id));
        const auto disabled = nlohmann::json::parse(stmt.Text(0), nullptr, false);
        if (!disabled.is_array()) {
          return InternalError(absl::StrCat("agent ", id, " has a corrupt stored field"));
        }
        v1::CallAgent agent;
        for (const auto& metric : disabled) {
          if (metric.is_number_integer()) agent.add_disabled_metric_ids(metric.get<int64_t>());
        }
        if (std::optional<int64_t> threshold = stmt.OptionalInt64(1)) {
          agent.set_silence_threshold_ms(static_cast<int32_t>(*threshold));
        }
        agent.set_name(stmt.Text(2));
        agent.set_agent_source(stmt.Text(3));
        if (std::optional<std::string> version = stmt.OptionalText(4)) {
          agent.set_version(*version);
        }
        return agent;
      });
}

absl::StatusOr<v1::Agent> AgentsStore::Get(int64_t workspace_id, int64_t id) {
  // One statement: every ingest asks for its agent, so this read is on the hot path.
  return db::ReadResult<v1::Agent>(*db_, db::kSingleStatementRead,
                                   [&](db::Connection& c) -> absl::StatusOr<v1::Agent> {
                                     ASSIGN_OR_RETURN(AgentRecord record,
                                                      ReadAgent(c, workspace_id, id));
                                     return ToProto(record);
                                   });
}

absl::StatusOr<v1::Agent> AgentsStore::Update(int64_t workspace_id, int64_t id,
                                              const v1::AgentFields& patch) {
  return db::WriteResult<v1::Agent>(*db_, [&](db::Connection& c) -> absl::StatusOr<v1::Agent> {
    ASSIGN_OR_RETURN(AgentRecord record, ReadAgent(c, workspace_id, id));
    RETURN_IF_ERROR(UnsealCredentials(options_.credentials_key, record));
    Issues issues;
    const bool source_known = ApplyFields(patch, record, issues);
    RETURN_IF_ERROR(Validate(c, *this, options_.url_guard, source_known, record, issues));
    if (!issues.empty()) return std::move(issues).ToStatus();
    record.updated_at = NowTimestamp();
    NoteCredentials(record);
    ASSIGN_OR_RETURN(auto update,
                     c.Prepare("UPDATE agents SET name = ?, phone_number = ?, "
                               "telephony_carrier = ?, agent_source = ?, assistant_id = ?, "
                               "call_directions = ?, language_id = ?, instructions = ?, "
                               "opening_message = ?, max_call_duration_seconds = ?, "
                               "disabled_metric_ids = ?, silence_threshold_ms = ?, model = ?, "
                               "voice = ?, updated_at = ?, web_channel = ?, version = ? WHERE "
                               "id = ? AND workspace_id = ?"));
    BindWritable(update, record);
    update.Bind(17, record.version).Bind(18, id).Bind(19, workspace_id);
    RETURN_IF_ERROR(update.Run());
    RETURN_IF_ERROR(WriteCredentials(c, options_.credentials_key, record));
    return ToProto(record);
  });
}

absl::Status AgentsStore::Delete(int64_t workspace_id, int64_t id) {
  return db_->Write([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto del, c.Prepare("DELETE FROM agents WHERE id = ? AND workspace_id = ?"));
    del.Bind(1, id).Bind(2, workspace_id);
    RETURN_IF_ERROR(del.Run());
    if (c.Changes() == 0) return NotFoundError(absl::StrCat("agent ", id));
    return absl::OkStatus();
  });
}

absl::StatusOr<v1::ListAgentsResponse> AgentsStore::List(int64_t workspace_id, int page,
                                                         int per_page) {
  Issues issues;
  if (page < 1) issues.Add("page", "must be at least 1");
  if (per_page < 1 || per_page > kMaxPerPage) {
    issues.Add("per_page", absl::StrCat("must be between 1 and ", kMaxPerPage));
  }
  if (!issues.empty()) return std::move(issues).ToStatus();
  return db::ReadResult<v1::ListAgentsResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListAgentsResponse> {
        v1::ListAgentsResponse response;
        ASSIGN_OR_RETURN(auto count,
                         c.Prepare("SELECT COUNT(*) FROM agents WHERE workspace_id = ?"));
        count.Bind(1, workspace_id);
        ASSIGN_OR_RETURN(bool row, count.Step());
        const int64_t total = row ? count.Int64(0) : 0;
        static const std::string sql =
            absl::StrCat("SELECT ", kAgentColumns,
                         " FROM agents WHERE workspace_id = ? ORDER BY id DESC LIMIT ? OFFSET ?");
        ASSIGN_OR_RETURN(auto select, c.Prepare(sql));
        select.Bind(1, workspace_id)
            .Bind(2, per_page)
            .Bind(3, static_cast<int64_t>(page - 1) * per_page);
        while (true) {
          ASSIGN_OR_RETURN(bool more, select.Step());
          if (!more) break;
          ASSIGN_OR_RETURN(AgentRecord record, RecordFromRow(select));
          *response.add_data() = ToProto(record);
        }
        SetPagination(response.mutable_pagination(), page, per_page, total);
        return response;
      });
}

absl::StatusOr<v1::ListLanguagesResponse> AgentsStore::ListLanguages() {
  return db::ReadResult<v1::ListLanguagesResponse>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<v1::ListLanguagesResponse> {
        v1::ListLanguagesResponse response;
        ASSIGN_OR_RETURN(auto select,
                         c.Prepare("SELECT id, code, name FROM languages ORDER BY id"));
        while (true) {
          ASSIGN_OR_RETURN(bool more, select.Step());
          if (!more) break;
          auto* language = response.add_data();
          language->set_id(select.Int64(0));
          language->set_code(select.Text(1));
          language->set_name(select.Text(2));
        }
        return response;
      });
}

absl::Status AgentsStore::CheckAgentInWorkspace(int64_t workspace_id, int64_t agent_id) {
  return db_->Read([&](db::Connection& c) -> absl::Status {
    ASSIGN_OR_RETURN(auto stmt,
                     c.Prepare("SELECT 1 FROM agents WHERE id = ? AND workspace_id = ?"));
    stmt.Bind(1, agent_id).Bind(2, workspace_id);
    ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (found) return absl::OkStatus();
    return ValidationError(
        "agent_not_found",
        absl::StrCat("agent ", agent_id, " not found in workspace ", workspace_id),
        {{"agent_id", absl::StrCat("no agent ", agent_id, " in workspace ", workspace_id)}});
  });
}

absl::StatusOr<absl::flat_hash_set<int64_t>> AgentsStore::Existing(int64_t workspace_id,
                                                                   absl::Span<const int64_t> ids) {
  absl::flat_hash_set<int64_t> found;
  if (ids.empty()) return found;
  RETURN_IF_ERROR(db_->Read([&](db::Connection& c) -> absl::Status {
    for (int64_t id : ids) {
      if (found.contains(id)) continue;
      ASSIGN_OR_RETURN(auto stmt,
                       c.Prepare("SELECT 1 FROM agents WHERE id = ? AND workspace_id = ?"));
      stmt.Bind(1, id).Bind(2, workspace_id);
      ASSIGN_OR_RETURN(bool exists, stmt.Step());
      if (exists) found.insert(id);
    }
    return absl::OkStatus();
  }));
  return found;
}

absl::StatusOr<bool> AgentsStore::HasPhoneNumber(int64_t workspace_id, int64_t agent_id) {
  return db::ReadResult<bool>(*db_, [&](db::Connection& c) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(auto stmt, c.Prepare("SELECT phone_number IS NOT NULL FROM agents WHERE "
                                          "id = ? AND workspace_id = ?"));
    stmt.Bind(1, agent_id).Bind(2, workspace_id);
    ASSIGN_OR_RETURN(bool found, stmt.Step());
    if (!found) return NotFoundError(absl::StrCat("agent ", agent_id));
    return stmt.Int64(0) != 0;
  });
}

absl::StatusOr<std::vector<AgentsStore::AssistantAgent>> AgentsStore::FindByAssistant(
    absl::string_view source, absl::string_view assistant_id, int limit) {
  return db::ReadResult<std::vector<AssistantAgent>>(
      *db_, db::kSingleStatementRead,
      [&](db::Connection& c) -> absl::StatusOr<std::vector<AssistantAgent>> {
        // agents_by_assistant (schema 21) finds them without reading every workspace's agents.
        ASSIGN_OR_RETURN(auto stmt,
                         c.Prepare("SELECT workspace_id, MIN(id) FROM agents WHERE assistant_id = ? "
                                   "AND agent_source = ? GROUP BY workspace_id "
                                   "ORDER BY workspace_id LIMIT ?"));
        stmt.Bind(1, assistant_id).Bind(2, source).Bind(3, limit);
        std::vector<AssistantAgent> agents;
        while (true) {
          ASSIGN_OR_RETURN(bool row, stmt.Step());
          if (!row) break;
          agents.push_back({stmt.Int64(0), stmt.Int64(1)});
        }
        return agents;
      });
}

absl::StatusOr<std::vector<int64_t>> AgentsStore::ReplaceDisabledMetrics(
    int64_t workspace_id, int64_t agent_id, const std::function<bool(int64_t)>& replaced,
    const std::vector<int64_t>& ids, const std::function<absl::Status(db::Connection&)>& check) {
  return db::WriteResult<std::vector<int64_t>>(
      *db_, [&](db::Connection& c) -> absl::StatusOr<std::vector<int64_t>> {
        ASSIGN_OR_RETURN(AgentRecord record, ReadAgent(c, workspace_id, agent_id));
        if (check) RETURN_IF_ERROR(check(c));
        std::set<int64_t> next;
        for (int64_t id : record.disabled_metric_ids) {
          if (!replaced(id)) next.insert(id);
        }
        next.insert(ids.begin(), ids.end());
        std::vector<int64_t> list(next.begin(), next.end());
        ASSIGN_OR_RETURN(auto update,
                         c.Prepare("UPDATE agents SET disabled_metric_ids = ?, updated_at = ? "
                                   "WHERE id = ? AND workspace_id = ?"));
        update.Bind(1, nlohmann::json(list).dump())
            .Bind(2, NowTimestamp())
            .Bind(3, agent_id)
            .Bind(4, workspace_id);
        RETURN_IF_ERROR(update.Run());
        return list;
      });
}

}  // namespace calleval::agents
