#include "cmd/callevalctl/remote.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cmd/callevalctl/api_client.h"
#include "cmd/callevalctl/gate.h"
#include "nlohmann/json.hpp"

namespace calleval::ctl {
namespace {

using cli::Flag;
using cli::UsageError;
using nlohmann::json;

constexpr char kProgram[] = "callevalctl";
constexpr char kCallsPath[] = "/api/public/v1/calls";

template <typename T>
Flag<T> Required(Flag<T> flag) {
  flag.required = true;
  return flag;
}

int Fail(absl::string_view message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 1;
}

int Usage(absl::string_view message, absl::string_view command) {
  std::cerr << kProgram << ": " << message << " (" << kProgram << " " << command
            << " --help)\n";
  return 2;
}

// ---------------------------------------------------------------------------------------------
// Flags shared by the remote commands.

template <typename T>
void AddRemoteFlags(std::vector<Flag<T>>* flags, bool gate) {
  {
    Flag<T> flag = cli::StringFlag<T>("url", "URL", &T::url,
                                      "the server's base URL, e.g. http://127.0.0.1:8080 (else "
                                      "CALLEVAL_URL)");
    flags->push_back(std::move(flag));
  }
  {
    Flag<T> flag;
    flag.name = "key";
    flag.value_name = "KEY";
    flag.description = "the API key (else CALLEVAL_API_KEY); never printed";
    // The help shows no value, whatever the options hold.
    flag.get = [](const T&) { return std::string(); };
    flag.set = [](absl::string_view v, T* o) -> absl::Status {
      o->key = std::string(v);
      return absl::OkStatus();
    };
    flags->push_back(std::move(flag));
  }
  flags->push_back(cli::IntFlag<T, int64_t>("workspace", "ID", &T::workspace, 0,
                                   std::numeric_limits<int64_t>::max(),
                                   "the workspace (client_id) to act on; 0: the key's own"));
  if (!gate) return;
  flags->push_back(cli::SecondsFlag<T>("timeout", &T::timeout, 1,
                                       "how long --wait waits for every result"));
  {
    Flag<T> flag;
    flag.name = "assert";
    flag.value_name = "FIGURE OP VALUE";
    flag.description =
        "a condition on every result, e.g. latency.p95_ms<=1500 or run.passed==true "
        "(repeatable; needs --wait)";
    flag.get = [](const T& o) { return absl::StrJoin(o.assertions, " "); };
    flag.set = [](absl::string_view v, T* o) -> absl::Status {
      o->assertions.push_back(std::string(v));
      return absl::OkStatus();
    };
    flags->push_back(std::move(flag));
  }
  flags->push_back(cli::StringFlag<T>("junit", "FILE", &T::junit,
                                      "writes the results as JUnit XML (needs --wait)"));
  flags->push_back(cli::StringFlag<T>("summary", "FILE", &T::summary,
                                      "writes the results as a JSON summary (needs --wait)"));
}

// The server named by --url / CALLEVAL_URL and the key of --key / CALLEVAL_API_KEY.
absl::StatusOr<ApiClientOptions> Connection(const RemoteOptions& options) {
  ApiClientOptions connection;
  connection.base_url = options.url;
  if (connection.base_url.empty()) {
    if (const char* env = std::getenv("CALLEVAL_URL")) connection.base_url = env;
  }
  if (connection.base_url.empty()) return UsageError("--url URL (or CALLEVAL_URL) is required");
  if (!absl::StartsWith(connection.base_url, "http://") &&
      !absl::StartsWith(connection.base_url, "https://")) {
    return UsageError(
        absl::StrCat("--url: not an http:// or https:// URL: ", connection.base_url));
  }
  connection.api_key = options.key;
  if (connection.api_key.empty()) {
    if (const char* env = std::getenv("CALLEVAL_API_KEY")) connection.api_key = env;
  }
  if (connection.api_key.empty()) {
    return UsageError("--key KEY (or CALLEVAL_API_KEY) is required");
  }
  return connection;
}

// "&client_id=N" when a workspace was named.
std::string WorkspaceQuery(const RemoteOptions& options, absl::string_view separator) {
  if (options.workspace == 0) return "";
  return absl::StrCat(separator, "client_id=", options.workspace);
}

absl::StatusOr<std::vector<Assertion>> ParseAssertions(const RemoteOptions& options,
                                                       bool wait) {
  std::vector<Assertion> assertions;
  for (const std::string& text : options.assertions) {
    auto assertion = ParseAssertion(text);
    if (!assertion.ok()) {
      return UsageError(absl::StrCat("--assert ", text, ": ", assertion.status().message()));
    }
    assertions.push_back(*std::move(assertion));
  }
  if (!wait) {
    if (!options.assertions.empty()) return UsageError("--assert needs --wait");
    if (!options.junit.empty()) return UsageError("--junit needs --wait");
    if (!options.summary.empty()) return UsageError("--summary needs --wait");
  }
  return assertions;
}

// Runs work(i) for i in [0, count) on up to `concurrency` threads.
void ForEachConcurrently(size_t count, int64_t concurrency,
                         const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  const size_t threads = std::max<size_t>(1, std::min<size_t>(count, concurrency));
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) work(i);
    });
  }
  for (std::thread& thread : pool) thread.join();
}

bool IsTerminal(int fd) { return isatty(fd) == 1; }

std::string StringField(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_string()) return "";
  return object[key].get<std::string>();
}

int64_t IntField(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer()) return 0;
  return object[key].get<int64_t>();
}

// The gate report's files, and the failed outcomes on stderr.
int FinishReport(const GateReport& report, const RemoteOptions& options, absl::Time started) {
  for (const CaseReport& c : report.cases) {
    if (c.error.has_value()) {
      std::cerr << "ERROR " << c.name << ": " << *c.error << "\n";
      continue;
    }
    for (const Outcome& outcome : c.outcomes) {
      if (outcome.kind == Outcome::Kind::kFailed) {
        std::cerr << "FAIL " << c.name << ": " << outcome.message << "\n";
      }
    }
  }
  if (!options.junit.empty()) {
    if (absl::Status s = WriteFileAtomically(options.junit, JUnitXml(report, started)); !s.ok()) {
      return Fail(s.message());
    }
  }
  if (!options.summary.empty()) {
    if (absl::Status s = WriteFileAtomically(options.summary, SummaryJson(report).dump(2) + "\n");
        !s.ok()) {
      return Fail(s.message());
    }
  }
  return report.ExitCode();
}

// ---------------------------------------------------------------------------------------------
// calls push

struct ManifestEntry {
  int line = 0;
  std::string call_identifier;
  std::string body;
};

// One ingest body per line (blank lines skipped). Every line is checked before anything is sent:
// a push that stops half-way through a bad manifest would be hard to resume by hand.
absl::StatusOr<std::vector<ManifestEntry>> ReadManifest(const std::string& path,
                                                        const RemoteOptions& options,
                                                        int* exit_status) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *exit_status = 1;
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  *exit_status = 2;
  std::vector<ManifestEntry> entries;
  std::map<std::string, int> seen;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (absl::StripAsciiWhitespace(text).empty()) continue;
    const std::string where = absl::StrCat(path, ":", line);
    json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return UsageError(absl::StrCat(where, ": not JSON"));
    if (!body.is_object()) return UsageError(absl::StrCat(where, ": not a JSON object"));
    if (!body.contains("call_identifier") || !body["call_identifier"].is_string() ||
        body["call_identifier"].get<std::string>().empty()) {
      return UsageError(absl::StrCat(
          where, ": call_identifier (a non-empty string) is required: it is what makes a "
                 "push resumable"));
    }
    const std::string identifier = body["call_identifier"].get<std::string>();
    if (auto [it, inserted] = seen.emplace(identifier, line); !inserted) {
      return UsageError(absl::StrCat(where, ": call_identifier ", identifier,
                                     " is already on line ", it->second));
    }
    if (options.workspace != 0 && !body.contains("client_id")) {
      body["client_id"] = options.workspace;
    }
    entries.push_back({line, identifier, body.dump()});
  }
  if (in.bad()) {
    *exit_status = 1;
    return absl::DataLossError(absl::StrCat("cannot read ", path));
  }
  return entries;
}

// The id of the call a 409 duplicate_call_identifier names: "already submitted as call 42".
int64_t ExistingCallId(const ApiResponse& response) {
  const json parsed = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("error")) return 0;
  const json& error = parsed["error"];
  if (!error.is_object() || !error.contains("details") || !error["details"].is_array()) return 0;
  for (const json& detail : error["details"]) {
    const std::string issue = StringField(detail, "issue");
    size_t start = issue.size();
    while (start > 0 && absl::ascii_isdigit(static_cast<unsigned char>(issue[start - 1]))) {
      --start;
    }
    int64_t id = 0;
    if (start < issue.size() && absl::SimpleAtoi(issue.substr(start), &id)) return id;
  }
  return 0;
}

struct PushedCall {
  std::string status;  // created, existing, error
  int64_t id = 0;
  std::string error;
  int attempts = 0;
  absl::Time pushed_at;
  json record;  // the last call record read
  bool final = false;
};

void PushOne(const ApiClient& client, const ManifestEntry& entry, const RemoteOptions& options,
             std::atomic<int64_t>* retried, PushedCall* pushed) {
  pushed->pushed_at = absl::Now();
  auto response = client.Call("POST", kCallsPath, &entry.body, retried);
  if (!response.ok()) {
    pushed->status = "error";
    pushed->error = std::string(response.status().message());
    return;
  }
  pushed->attempts = response->attempts;
  if (response->status == 201) {
    const json record = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    pushed->id = IntField(record, "id");
    pushed->status = pushed->id > 0 ? "created" : "error";
    if (pushed->id == 0) pushed->error = "the ingest answer has no call id";
    pushed->record = record;
    return;
  }
  if (response->status == 409 && ApiErrorCode(*response) == "duplicate_call_identifier") {
    pushed->status = "existing";
    pushed->id = ExistingCallId(*response);
    if (pushed->id == 0) {
      // An older server's message without the id: the call is found by its identifier.
      auto call = client.GetJson(absl::StrCat(kCallsPath, "/", QueryEscape(entry.call_identifier),
                                              WorkspaceQuery(options, "?")));
      if (call.ok()) pushed->id = IntField(*call, "id");
    }
    if (pushed->id == 0) {
      pushed->status = "error";
      pushed->error = "already pushed, but the existing call's id cannot be read";
    }
    return;
  }
  pushed->status = "error";
  pushed->error = ApiErrorMessage(*response);
}

// docs/api.md §2.5 and §2.6: the statuses after which a call no longer changes.
bool IsFinalCall(const json& record) {
  const std::string analysis = StringField(record, "analysis_status");
  const std::string transcription = StringField(record, "transcription_status");
  const bool analysis_final =
      analysis == "completed" || analysis == "failed" || analysis == "skipped";
  const bool transcription_final = transcription == "completed" || transcription == "failed";
  return analysis_final && transcription_final;
}

// Polls every pushed call until it is final or the deadline passes; the interval grows from one
// second to ten, which keeps a long wait from hammering the server.
void WaitForCalls(const ApiClient& client, const PushOptions& options,
                  std::vector<PushedCall>* calls, const std::vector<ManifestEntry>& entries) {
  const absl::Time deadline = absl::Now() + options.timeout;
  size_t to_wait = 0;
  for (const PushedCall& call : *calls) to_wait += call.id > 0 ? 1 : 0;
  Progress progress(&std::cerr, to_wait, IsTerminal(2));
  absl::Duration interval = absl::Seconds(1);
  while (true) {
    std::vector<size_t> pending;
    for (size_t i = 0; i < calls->size(); ++i) {
      const PushedCall& call = (*calls)[i];
      if (call.id > 0 && !call.final && call.error.empty()) pending.push_back(i);
    }
    if (pending.empty()) break;
    ForEachConcurrently(pending.size(), options.concurrency, [&](size_t k) {
      PushedCall& call = (*calls)[pending[k]];
      auto record =
          client.GetJson(absl::StrCat(kCallsPath, "/", call.id, WorkspaceQuery(options, "?")));
      if (!record.ok()) {
        call.error = std::string(record.status().message());
        progress.Done(entries[pending[k]].call_identifier, false);
        return;
      }
      call.record = *std::move(record);
      if (IsFinalCall(call.record)) {
        call.final = true;
        progress.Done(entries[pending[k]].call_identifier,
                      StringField(call.record, "analysis_status") == "completed");
      }
    });
    bool any_left = false;
    for (size_t i : pending) any_left = any_left || (!(*calls)[i].final && (*calls)[i].error.empty());
    if (!any_left) break;
    if (absl::Now() + interval > deadline) {
      for (size_t i : pending) {
        PushedCall& call = (*calls)[i];
        if (call.final || !call.error.empty()) continue;
        call.error = absl::StrCat("not final after ", absl::FormatDuration(options.timeout),
                                  " (analysis_status ", StringField(call.record, "analysis_status"),
                                  ", transcription_status ",
                                  StringField(call.record, "transcription_status"), ")");
      }
      break;
    }
    absl::SleepFor(interval);
    interval = std::min(interval * 1.5, absl::Seconds(10));
  }
  progress.Finish();
}

json OutcomesJson(const GateReport& report, const CaseReport& c) {
  json outcomes = json::array();
  for (size_t i = 0; i < c.outcomes.size() && i < report.assertions.size(); ++i) {
    const Outcome& outcome = c.outcomes[i];
    const char* kind = outcome.kind == Outcome::Kind::kPassed   ? "passed"
                       : outcome.kind == Outcome::Kind::kFailed ? "failed"
                                                                : "skipped";
    outcomes.push_back({{"assertion", report.assertions[i].text},
                        {"outcome", kind},
                        {"message", outcome.message}});
  }
  return outcomes;
}

}  // namespace

const std::vector<Flag<PushOptions>>& PushFlags() {
  static const auto* flags = [] {
    auto* flags = new std::vector<Flag<PushOptions>>;
    AddRemoteFlags(flags, /*gate=*/true);
    flags->push_back(cli::IntFlag<PushOptions, int64_t>("concurrency", "N", &PushOptions::concurrency, 1,
                                               64, "ingest requests in flight at once"));
    flags->push_back(cli::SwitchFlag<PushOptions>(
        "wait", &PushOptions::wait,
        "waits until every call is final, then reports (and applies --assert) on the results"));
    return flags;
  }();
  return *flags;
}

int CallsPush(const std::vector<std::string>& positional, const PushOptions& options) {
  constexpr char kCommand[] = "calls push";
  const absl::Time started = absl::Now();
  auto connection = Connection(options);
  if (!connection.ok()) return Usage(connection.status().message(), kCommand);
  auto assertions = ParseAssertions(options, options.wait);
  if (!assertions.ok()) return Usage(assertions.status().message(), kCommand);
  int exit_status = 0;
  auto entries = ReadManifest(positional[0], options, &exit_status);
  if (!entries.ok()) {
    if (exit_status == 2) {
      std::cerr << kProgram << ": " << entries.status().message() << "\n";
      return 2;
    }
    return Fail(entries.status().message());
  }
  const ApiClient client(*std::move(connection));
  std::vector<PushedCall> calls(entries->size());
  std::atomic<int64_t> retried{0};
  std::mutex out_mutex;
  {
    Progress progress(&std::cerr, entries->size(), IsTerminal(2));
    ForEachConcurrently(entries->size(), options.concurrency, [&](size_t i) {
      const ManifestEntry& entry = (*entries)[i];
      PushedCall& call = calls[i];
      PushOne(client, entry, options, &retried, &call);
      if (!options.wait) {
        // Printed as each call is settled, so a push killed half-way has said what it did.
        json line = {{"call_identifier", entry.call_identifier}, {"status", call.status}};
        line["id"] = call.id > 0 ? json(call.id) : json(nullptr);
        if (!call.error.empty()) line["error"] = call.error;
        std::lock_guard<std::mutex> lock(out_mutex);
        std::cout << line.dump() << std::endl;
      }
      progress.Done(entry.call_identifier, call.status != "error");
    });
    progress.Finish();
  }
  size_t errors = 0;
  for (const PushedCall& call : calls) errors += call.status == "error" ? 1 : 0;
  if (retried.load() > 0) {
    std::cerr << kProgram << ": " << retried.load()
              << " requests were retried (429, 503 or connection errors)\n";
  }
  if (!options.wait) {
    if (errors > 0) {
      std::cerr << kProgram << ": " << errors << " of " << calls.size()
                << " calls were not pushed\n";
      for (size_t i = 0; i < calls.size(); ++i) {
        if (calls[i].status == "error") {
          std::cerr << "ERROR " << (*entries)[i].call_identifier << " (line "
                    << (*entries)[i].line << "): " << calls[i].error << "\n";
        }
      }
    }
    return errors > 0 ? 1 : 0;
  }

  WaitForCalls(client, options, &calls, *entries);
  GateReport report;
  report.suite = "callevalctl calls push";
  report.assertions = *std::move(assertions);
  for (size_t i = 0; i < calls.size(); ++i) {
    const PushedCall& call = calls[i];
    CaseReport c;
    c.name = (*entries)[i].call_identifier;
    if (call.status == "error") {
      c.error = absl::StrCat("push failed: ", call.error);
    } else if (!call.error.empty()) {
      c.error = call.error;
    } else {
      const std::string analysis = StringField(call.record, "analysis_status");
      if (analysis == "failed" || analysis == "skipped") {
        // An unscored call cannot pass a gate: its figures are not there to judge.
        c.error = absl::StrCat("analysis ", analysis, ": ",
                               StringField(call.record, "failure_reason"), ": ",
                               StringField(call.record, "failure_message"));
      }
      c.figures = FiguresOfCall(call.record);
    }
    c.seconds = absl::ToDoubleSeconds(absl::Now() - call.pushed_at);
    if (call.final) {
      // From the push to the call's last update: how long the server took to score it.
      absl::Time updated;
      std::string error;
      if (absl::ParseTime(absl::RFC3339_full, StringField(call.record, "updated_at"), &updated,
                          &error)) {
        c.seconds = std::max(0.0, absl::ToDoubleSeconds(updated - call.pushed_at));
      }
    }
    report.cases.push_back(std::move(c));
  }
  report.EvaluateAll();
  for (size_t i = 0; i < calls.size(); ++i) {
    const PushedCall& call = calls[i];
    const CaseReport& c = report.cases[i];
    json line = {{"call_identifier", c.name}, {"status", call.status}};
    line["id"] = call.id > 0 ? json(call.id) : json(nullptr);
    line["analysis_status"] = call.record.is_object() && call.record.contains("analysis_status")
                                  ? call.record["analysis_status"]
                                  : json(nullptr);
    line["transcription_status"] =
        call.record.is_object() && call.record.contains("transcription_status")
            ? call.record["transcription_status"]
            : json(nullptr);
    if (c.error.has_value()) line["error"] = *c.error;
    line["outcomes"] = OutcomesJson(report, c);
    std::cout << line.dump() << "\n";
  }
  std::cout.flush();
  return FinishReport(report, options, started);
}

// ---------------------------------------------------------------------------------------------
// calls export

const char* const kExportFixedColumns[] = {
    "id",           "call_identifier",     "agent_id",         "call_timestamp",
    "observation_type", "analysis_status", "transcription_status", "duration_seconds",
    "tag",          "label",               "credits_used",     "failure_reason",
    nullptr};

std::string CsvField(const std::string& value) {
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string out = "\"";
  for (char ch : value) {
    if (ch == '"') out.push_back('"');
    out.push_back(ch);
  }
  out.push_back('"');
  return out;
}

namespace {

std::string CsvCell(const FigureValue& value) {
  if (std::holds_alternative<std::monostate>(value)) return "";
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const double* d = std::get_if<double>(&value)) return json(*d).dump();
  return std::get<std::string>(value);
}

std::string JsonCellText(const json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

// Figures already in a fixed column.
bool InFixedColumns(absl::string_view figure) {
  return figure == "duration_seconds" || figure == "call.analysis_status" ||
         figure == "call.transcription_status";
}

// RFC 3339 (any offset), or a date alone meaning its midnight UTC; printed as the API's UTC.
absl::StatusOr<std::string> ParseBound(absl::string_view flag, const std::string& text) {
  absl::Time time;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, text, &time, &error) ||
      absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &time, &error)) {
    return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", time, absl::UTCTimeZone());
  }
  return UsageError(absl::StrCat("--", flag, ": not an RFC 3339 date-time or a date: ", text));
}

}  // namespace

const std::vector<Flag<ExportOptions>>& ExportFlags() {
  static const auto* flags = [] {
    auto* flags = new std::vector<Flag<ExportOptions>>;
    AddRemoteFlags(flags, /*gate=*/false);
    flags->push_back(Required(cli::IntFlag<ExportOptions, int64_t>(
        "agent", "ID", &ExportOptions::agent, 1, std::numeric_limits<int64_t>::max(),
        "the agent whose calls are exported")));
    flags->push_back(cli::StringFlag<ExportOptions>(
        "since", "TIME", &ExportOptions::since,
        "only calls whose call_timestamp is at or after this RFC 3339 time (or date)"));
    flags->push_back(cli::StringFlag<ExportOptions>(
        "until", "TIME", &ExportOptions::until,
        "only calls whose call_timestamp is before this RFC 3339 time (or date)"));
    {
      Flag<ExportOptions> flag;
      flag.name = "format";
      flag.value_name = "csv|jsonl";
      flag.description =
          "jsonl: one call record a line; csv: one row a call, fixed columns then one per figure";
      flag.get = [](const ExportOptions& o) { return o.format; };
      flag.set = [](absl::string_view v, ExportOptions* o) -> absl::Status {
        if (v != "csv" && v != "jsonl") {
          return UsageError(absl::StrCat("must be csv or jsonl, not ", v));
        }
        o->format = std::string(v);
        return absl::OkStatus();
      };
      flag.required = true;
      flags->push_back(std::move(flag));
    }
    flags->push_back(cli::StringFlag<ExportOptions>(
        "output", "FILE", &ExportOptions::output,
        "writes there (atomically) instead of standard output", "standard output"));
    return flags;
  }();
  return *flags;
}

int CallsExport(const std::vector<std::string>&, const ExportOptions& options) {
  constexpr char kCommand[] = "calls export";
  auto connection = Connection(options);
  if (!connection.ok()) return Usage(connection.status().message(), kCommand);
  std::string query = absl::StrCat("agent_id=", options.agent, WorkspaceQuery(options, "&"));
  if (!options.since.empty()) {
    auto since = ParseBound("since", options.since);
    if (!since.ok()) return Usage(since.status().message(), kCommand);
    absl::StrAppend(&query, "&call_timestamp_from=", QueryEscape(*since));
  }
  if (!options.until.empty()) {
    auto until = ParseBound("until", options.until);
    if (!until.ok()) return Usage(until.status().message(), kCommand);
    absl::StrAppend(&query, "&call_timestamp_to=", QueryEscape(*until));
  }
  const ApiClient client(*std::move(connection));
  // Pages newest first. A call ingested meanwhile shifts the older ones onto later pages, so a
  // call can be met twice: it is kept once (by id). None is missed that way.
  std::vector<json> calls;
  std::set<int64_t> seen;
  for (int64_t page = 1;; ++page) {
    auto answer = client.GetJson(
        absl::StrCat(kCallsPath, "?", query, "&per_page=100&page=", page));
    if (!answer.ok()) return Fail(answer.status().message());
    if (!answer->contains("data") || !(*answer)["data"].is_array()) {
      return Fail("the list answer has no data");
    }
    const json& data = (*answer)["data"];
    if (data.empty()) break;
    for (const json& call : data) {
      if (seen.insert(IntField(call, "id")).second) calls.push_back(call);
    }
    const int64_t total_pages = IntField((*answer)["pagination"], "total_pages");
    if (page >= total_pages) break;
  }

  std::string out;
  if (options.format == "jsonl") {
    for (const json& call : calls) absl::StrAppend(&out, call.dump(), "\n");
  } else {
    std::vector<Figures> figures;
    std::set<std::string> figure_names;
    for (const json& call : calls) {
      figures.push_back(FiguresOfCall(call));
      for (const auto& [name, value] : figures.back()) {
        if (!InFixedColumns(name)) figure_names.insert(name);
      }
    }
    std::vector<std::string> header;
    for (const char* const* column = kExportFixedColumns; *column != nullptr; ++column) {
      header.push_back(*column);
    }
    for (const std::string& name : figure_names) header.push_back(CsvField(name));
    absl::StrAppend(&out, absl::StrJoin(header, ","), "\r\n");
    for (size_t i = 0; i < calls.size(); ++i) {
      std::vector<std::string> row;
      for (const char* const* column = kExportFixedColumns; *column != nullptr; ++column) {
        row.push_back(CsvField(
            calls[i].contains(*column) ? JsonCellText(calls[i][*column]) : std::string()));
      }
      for (const std::string& name : figure_names) {
        auto it = figures[i].find(name);
        row.push_back(CsvField(it == figures[i].end() ? "" : CsvCell(it->second)));
      }
      absl::StrAppend(&out, absl::StrJoin(row, ","), "\r\n");
    }
  }
  if (options.output.empty()) {
    std::cout << out;
    std::cout.flush();
    return std::cout ? 0 : Fail("cannot write standard output");
  }
  if (absl::Status s = WriteFileAtomically(options.output, out); !s.ok()) {
    return Fail(s.message());
  }
  std::cerr << kProgram << ": " << calls.size() << " calls written to " << options.output << "\n";
  return 0;
}

// ---------------------------------------------------------------------------------------------
// runs batch

const std::vector<Flag<BatchOptions>>& BatchFlags() {
  static const auto* flags = [] {
    auto* flags = new std::vector<Flag<BatchOptions>>;
    AddRemoteFlags(flags, /*gate=*/true);
    flags->push_back(Required(cli::IntFlag<BatchOptions, int64_t>(
        "agent", "ID", &BatchOptions::agent, 1, std::numeric_limits<int64_t>::max(),
        "the agent the scenarios are run against")));
    {
      Flag<BatchOptions> flag;
      flag.name = "scenarios";
      flag.value_name = "ID,...";
      flag.description = "the scenarios to run (comma list of ids, 1-500)";
      flag.get = [](const BatchOptions& o) { return absl::StrJoin(o.scenarios, ","); };
      flag.set = [](absl::string_view v, BatchOptions* o) -> absl::Status {
        o->scenarios.clear();
        for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
          int64_t id = 0;
          if (!absl::SimpleAtoi(s, &id) || id < 1) {
            return UsageError(absl::StrCat("not a scenario id: ", s, " (takes ids: 4,5)"));
          }
          o->scenarios.push_back(id);
        }
        if (o->scenarios.empty()) return UsageError("names no scenario");
        return absl::OkStatus();
      };
      flag.required = true;
      flags->push_back(std::move(flag));
    }
    {
      Flag<BatchOptions> flag;
      flag.name = "channel";
      flag.value_name = "text|web|phone";
      flag.description = "the runs' channel (docs/runs.md)";
      flag.empty_default = "phone when the agent has a number, else web";
      flag.get = [](const BatchOptions& o) { return o.channel; };
      flag.set = [](absl::string_view v, BatchOptions* o) -> absl::Status {
        if (v != "text" && v != "web" && v != "phone") {
          return UsageError(absl::StrCat("must be text, web or phone, not ", v));
        }
        o->channel = std::string(v);
        return absl::OkStatus();
      };
      flags->push_back(std::move(flag));
    }
    {
      Flag<BatchOptions> flag = cli::IntFlag<BatchOptions, int64_t>(
          "concurrency", "N", &BatchOptions::concurrency, 1, 32,
          "runs of the batch in progress at once (the server's default: 4)");
      flag.get = [](const BatchOptions& o) {
        return o.concurrency == 0 ? std::string() : absl::StrCat(o.concurrency);
      };
      flag.empty_default = "4";
      flags->push_back(std::move(flag));
    }
    flags->push_back(cli::SwitchFlag<BatchOptions>(
        "wait", &BatchOptions::wait,
        "waits until every run has ended, then reports (and applies the gates) on them"));
    {
      Flag<BatchOptions> flag = cli::IntFlag<BatchOptions, int64_t>(
          "repeat", "N", &BatchOptions::repeat, 1, 50,
          "runs each scenario N times (scenarios x N at most 1000)");
      flag.get = [](const BatchOptions& o) {
        return o.repeat == 0 ? std::string() : absl::StrCat(o.repeat);
      };
      flag.empty_default = "1";
      flags->push_back(std::move(flag));
    }
    {
      Flag<BatchOptions> flag = cli::IntFlag<BatchOptions, int64_t>(
          "baseline", "ID", &BatchOptions::baseline, 1, std::numeric_limits<int64_t>::max(),
          "the batch run this one is compared with; with --wait the comparison is printed "
          "once every run has ended");
      flag.get = [](const BatchOptions& o) {
        return o.baseline == 0 ? std::string() : absl::StrCat(o.baseline);
      };
      flags->push_back(std::move(flag));
    }
    {
      Flag<BatchOptions> flag;
      flag.name = "fail-on";
      flag.value_name = "VERDICT,...";
      flag.description = absl::StrCat(
          "exit ", kComparisonGateExit,
          " when the comparison's verdict is one of these (regressed, inconclusive, improved, "
          "unchanged); needs --baseline, implies --wait");
      flag.get = [](const BatchOptions& o) { return absl::StrJoin(o.fail_on, ","); };
      flag.set = [](absl::string_view v, BatchOptions* o) -> absl::Status {
        o->fail_on.clear();
        for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
          s = absl::StripAsciiWhitespace(s);
          if (s != "regressed" && s != "inconclusive" && s != "improved" && s != "unchanged") {
            return UsageError(absl::StrCat(
                "not a verdict: ", s, " (takes regressed, inconclusive, improved, unchanged)"));
          }
          o->fail_on.emplace_back(s);
        }
        if (o->fail_on.empty()) return UsageError("names no verdict");
        return absl::OkStatus();
      };
      flags->push_back(std::move(flag));
    }
    {
      Flag<BatchOptions> flag;
      flag.name = "min-pass-rate";
      flag.value_name = "FRACTION";
      flag.description =
          "exit 1 when fewer than this fraction (0-1) of the runs passed; a failed run counts "
          "as not passed (needs --wait)";
      flag.get = [](const BatchOptions& o) {
        return o.min_pass_rate < 0 ? std::string() : absl::StrCat(o.min_pass_rate);
      };
      flag.set = [](absl::string_view v, BatchOptions* o) -> absl::Status {
        double rate = 0;
        if (!absl::SimpleAtod(v, &rate) || !(rate >= 0 && rate <= 1)) {
          return UsageError(absl::StrCat("not a fraction from 0 to 1: ", v));
        }
        o->min_pass_rate = rate;
        return absl::OkStatus();
      };
      flags->push_back(std::move(flag));
    }
    return flags;
  }();
  return *flags;
}

namespace {

std::string Fixed(const json& value, int decimals) {
  if (!value.is_number()) return "-";
  return absl::StrFormat("%.*f", decimals, value.get<double>());
}

std::string Signed(const json& value, int decimals) {
  if (!value.is_number()) return "-";
  return absl::StrFormat("%+.*f", decimals, value.get<double>());
}

std::string PValue(const json& value) {
  if (value.is_number() && value.get<double>() < 0.0001) return "<0.0001";
  return Fixed(value, 4);
}

}  // namespace

std::string ComparisonTable(const json& comparison) {
  std::string out = absl::StrCat(
      "batch run ", IntField(comparison, "batch_run_id"), " against baseline ",
      IntField(comparison, "baseline_batch_run_id"), ": ", StringField(comparison, "verdict"),
      comparison.value("complete", false) ? "" : " (not every run has ended)", "\n");
  std::vector<std::vector<std::string>> rows = {
      {"scenario", "metric", "baseline -> current", "difference [95% ci]", "p", "runs", "verdict"}};
  if (comparison.contains("scenarios") && comparison["scenarios"].is_array()) {
    for (const json& scenario : comparison["scenarios"]) {
      if (!scenario.contains("metrics") || !scenario["metrics"].is_array()) continue;
      for (const json& figure : scenario["metrics"]) {
        // Means in their own unit (ms, a rating): one decimal; pass rates: three.
        const int decimals = StringField(figure, "kind") == "mean" ? 1 : 3;
        rows.push_back(
            {absl::StrCat(IntField(scenario, "scenario_id")), StringField(figure, "metric"),
             absl::StrCat(Fixed(figure.value("baseline", json()), decimals), " -> ",
                          Fixed(figure.value("current", json()), decimals)),
             absl::StrCat(Signed(figure.value("difference", json()), decimals), " [",
                          Signed(figure.value("ci_low", json()), decimals), ", ",
                          Signed(figure.value("ci_high", json()), decimals), "]"),
             PValue(figure.value("p_value", json())),
             absl::StrCat(IntField(figure, "baseline_runs"), "/", IntField(figure, "current_runs")),
             StringField(figure, "verdict")});
      }
    }
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, i == 0 ? "" : "  ", row[i],
                      i + 1 == row.size() ? "" : std::string(widths[i] - row[i].size(), ' '));
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

int RunsBatch(const std::vector<std::string>&, const BatchOptions& given) {
  constexpr char kCommand[] = "runs batch";
  BatchOptions options = given;
  if (!options.fail_on.empty()) {
    if (options.baseline == 0) return Usage("--fail-on needs --baseline", kCommand);
    options.wait = true;  // the verdict needs every run ended
  }
  auto connection = Connection(options);
  if (!connection.ok()) return Usage(connection.status().message(), kCommand);
  auto assertions = ParseAssertions(options, options.wait);
  if (!assertions.ok()) return Usage(assertions.status().message(), kCommand);
  if (options.min_pass_rate >= 0 && !options.wait) {
    return Usage("--min-pass-rate needs --wait", kCommand);
  }
  const ApiClient client(*std::move(connection));
  json body = {{"agent_id", options.agent}, {"scenario_ids", options.scenarios}};
  if (!options.channel.empty()) body["channel"] = options.channel;
  if (options.concurrency > 0) body["concurrency"] = options.concurrency;
  if (options.repeat > 0) body["repeat"] = options.repeat;
  if (options.baseline > 0) body["baseline_batch_run_id"] = options.baseline;
  if (options.workspace != 0) body["client_id"] = options.workspace;
  auto batch = client.PostJson("/api/v1/batch_runs", body);
  if (!batch.ok()) return Fail(batch.status().message());
  const int64_t batch_id = IntField(*batch, "id");
  std::vector<int64_t> run_ids;
  if (batch->contains("run_ids") && (*batch)["run_ids"].is_array()) {
    for (const json& id : (*batch)["run_ids"]) {
      if (id.is_number_integer()) run_ids.push_back(id.get<int64_t>());
    }
  }
  if (!options.wait) {
    std::cout << batch->dump() << "\n";
    return 0;
  }
  std::cerr << kProgram << ": batch run " << batch_id << ": " << run_ids.size() << " runs\n";

  // Polls the runs that have not ended; the interval grows from one second to ten.
  std::vector<json> runs(run_ids.size());
  std::vector<bool> ended(run_ids.size(), false);
  std::vector<std::string> errors(run_ids.size());
  const absl::Time started = absl::Now();
  const absl::Time deadline = started + options.timeout;
  {
    Progress progress(&std::cerr, run_ids.size(), IsTerminal(2));
    absl::Duration interval = absl::Seconds(1);
    while (true) {
      std::vector<size_t> pending;
      for (size_t i = 0; i < run_ids.size(); ++i) {
        if (!ended[i] && errors[i].empty()) pending.push_back(i);
      }
      if (pending.empty()) break;
      ForEachConcurrently(pending.size(), 4, [&](size_t k) {
        const size_t i = pending[k];
        auto run = client.GetJson(
            absl::StrCat("/api/v1/runs/", run_ids[i], WorkspaceQuery(options, "?")));
        if (!run.ok()) {
          errors[i] = std::string(run.status().message());
          progress.Done(absl::StrCat("run ", run_ids[i]), false);
          return;
        }
        runs[i] = *std::move(run);
        const std::string status = StringField(runs[i], "status");
        if (status == "completed" || status == "failed" || status == "cancelled") {
          ended[i] = true;
          progress.Done(absl::StrCat("run ", run_ids[i]),
                        runs[i].contains("passed") && runs[i]["passed"] == true);
        }
      });
      bool any_left = false;
      for (size_t i : pending) any_left = any_left || (!ended[i] && errors[i].empty());
      if (!any_left) break;
      if (absl::Now() + interval > deadline) {
        for (size_t i : pending) {
          if (ended[i] || !errors[i].empty()) continue;
          errors[i] = absl::StrCat("not ended after ", absl::FormatDuration(options.timeout),
                                   " (status ", StringField(runs[i], "status"), ")");
        }
        break;
      }
      absl::SleepFor(interval);
      interval = std::min(interval * 1.5, absl::Seconds(10));
    }
    progress.Finish();
  }

  GateReport report;
  report.suite = "callevalctl runs batch";
  report.assertions = *std::move(assertions);
  int64_t passed = 0, completed = 0, failed = 0;
  for (size_t i = 0; i < run_ids.size(); ++i) {
    CaseReport c;
    c.name = absl::StrCat("run ", run_ids[i]);
    const json& run = runs[i];
    if (!errors[i].empty()) {
      c.error = errors[i];
    } else {
      // The run's call carries the metrics; a failed run may have none.
      const int64_t call_id = IntField(run, "call_id");
      if (call_id > 0) {
        auto call = client.GetJson(
            absl::StrCat(kCallsPath, "/", call_id, WorkspaceQuery(options, "?")));
        if (call.ok()) {
          c.figures = FiguresOfCall(*call);
        } else {
          c.error = std::string(call.status().message());
        }
      }
      AddRunFigures(run, &c.figures);
    }
    absl::Time start, end;
    std::string error;
    if (absl::ParseTime(absl::RFC3339_full, StringField(run, "started_at"), &start, &error) &&
        absl::ParseTime(absl::RFC3339_full, StringField(run, "ended_at"), &end, &error)) {
      c.seconds = std::max(0.0, absl::ToDoubleSeconds(end - start));
    }
    const std::string status = StringField(run, "status");
    completed += status == "completed" ? 1 : 0;
    failed += status == "failed" ? 1 : 0;
    passed += run.is_object() && run.contains("passed") && run["passed"] == true ? 1 : 0;
    report.cases.push_back(std::move(c));
  }
  report.EvaluateAll();
  for (size_t i = 0; i < run_ids.size(); ++i) {
    const json& run = runs[i];
    const CaseReport& c = report.cases[i];
    json line = {{"run_id", run_ids[i]}};
    for (const char* key :
         {"scenario_id", "status", "passed", "end_reason", "call_id", "error"}) {
      line[key] = run.is_object() && run.contains(key) ? run[key] : json(nullptr);
    }
    if (c.error.has_value()) line["error"] = *c.error;
    line["outcomes"] = OutcomesJson(report, c);
    std::cout << line.dump() << "\n";
  }
  const double pass_rate =
      run_ids.empty() ? 0.0 : static_cast<double>(passed) / static_cast<double>(run_ids.size());
  json totals = {{"batch_run_id", batch_id},     {"total", run_ids.size()},
                 {"completed", completed},       {"failed", failed},
                 {"passed", passed},             {"pass_rate", pass_rate}};
  totals["min_pass_rate"] = options.min_pass_rate < 0 ? json(nullptr) : json(options.min_pass_rate);
  std::cout << totals.dump() << "\n";
  // The comparison with the baseline, once every run has ended (or the wait gave up).
  std::string verdict;
  bool compared = false;
  if (options.baseline > 0) {
    auto comparison = client.GetJson(
        absl::StrCat("/api/v1/batch_runs/", batch_id, "/comparison", WorkspaceQuery(options, "?")));
    if (comparison.ok()) {
      compared = true;
      verdict = StringField(*comparison, "verdict");
      std::cout << ComparisonTable(*comparison);
    } else {
      std::cerr << kProgram << ": the comparison with batch run " << options.baseline
                << " failed: " << comparison.status().message() << "\n";
    }
  }
  std::cout.flush();
  int exit_status = FinishReport(report, options, started);
  if (options.min_pass_rate >= 0 && pass_rate < options.min_pass_rate) {
    std::cerr << kProgram << ": pass rate " << pass_rate << " (" << passed << " of "
              << run_ids.size() << " runs) is below --min-pass-rate " << options.min_pass_rate
              << "\n";
    exit_status = std::max(exit_status, 1);
  }
  if (!options.fail_on.empty()) {
    if (!compared) {
      exit_status = std::max(exit_status, 1);
    } else if (std::find(options.fail_on.begin(), options.fail_on.end(), verdict) !=
               options.fail_on.end()) {
      std::cerr << kProgram << ": the comparison with batch run " << options.baseline << " is "
                << verdict << " (--fail-on " << absl::StrJoin(options.fail_on, ",") << ")\n";
      exit_status = kComparisonGateExit;
    }
  }
  return exit_status;
}

}  // namespace calleval::ctl
