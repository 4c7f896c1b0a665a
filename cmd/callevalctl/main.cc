// callevalctl: administration of an installation's data dir (docs/operations.md §2). Works while
// the server runs: SQLite's WAL mode lets both write, each waiting briefly for the other.
//
// Each command declares its flags in one table (cmd/flags.h) that its parser and its --help are
// generated from. Usage errors (unknown command or flag, missing or malformed value, a transcript
// the API would refuse) exit 2 with one line on stderr; failures of the work itself exit 1.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "calleval/v1/calls.pb.h"
#include "cmd/callevalctl/remote.h"
#include "cmd/flags.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/database.h"
#include "edge/json_codec.h"
#include "nlohmann/json.hpp"
#include "services/accounts/accounts_store.h"
#include "services/calls/call_rules.h"
#include "services/scoring/analysis.h"
#include "services/scoring/transcription_accuracy.h"
#include "services/scoring/transcription_worker.h"

namespace {

using calleval::cli::Flag;
using calleval::cli::IntFlag;
using calleval::cli::StringFlag;
using calleval::cli::UsageError;

constexpr char kEnvPrefix[] = "CALLEVAL_";
constexpr char kProgram[] = "callevalctl";

int Fail(absl::string_view message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 1;
}

// One line naming what is wrong; the help is one --help away.
int Usage(absl::string_view message, absl::string_view help_command = "") {
  std::cerr << kProgram << ": " << message << " (" << kProgram
            << (help_command.empty() ? "" : " ") << help_command << " --help)\n";
  return 2;
}

// Input the API would refuse: the same exit status as a usage error.
int InputError(absl::string_view message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 2;
}

// The flags before the command.
struct GlobalOptions {
  std::string data_dir = "./data";
  std::string database_url;  // empty: <data_dir>/calleval.db
};

const std::vector<Flag<GlobalOptions>>& GlobalFlags() {
  static const auto* flags = new std::vector<Flag<GlobalOptions>>{
      StringFlag("data-dir", "DIR", &GlobalOptions::data_dir,
                 "the installation's data dir (the server's --data-dir)"),
      StringFlag("database-url", "URL", &GlobalOptions::database_url,
                 "the installation's database (the server's --database-url)",
                 "sqlite://<data-dir>/calleval.db"),
  };
  return *flags;
}

// A flag that must be given with a value that is not empty.
template <typename T>
Flag<T> RequiredStringFlag(std::string name, std::string value_name, std::string T::*field,
                           std::string description) {
  Flag<T> flag = StringFlag(std::move(name), std::move(value_name), field, std::move(description));
  flag.set = [field](absl::string_view v, T* o) -> absl::Status {
    if (v.empty()) return UsageError("must not be empty");
    o->*field = std::string(v);
    return absl::OkStatus();
  };
  flag.required = true;
  return flag;
}

template <typename T>
Flag<T> Required(Flag<T> flag) {
  flag.required = true;
  return flag;
}

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// ---------------------------------------------------------------------------------------------
// The accounts commands.

// The accounts store of the data dir, created on first use.
struct Accounts {
  std::unique_ptr<calleval::db::Database> database;
  std::unique_ptr<calleval::accounts::AccountsStore> store;
};

absl::StatusOr<Accounts> OpenAccounts(const GlobalOptions& global) {
  std::error_code ec;
  std::filesystem::create_directories(global.data_dir, ec);
  auto database = calleval::db::Database::Open(
      global.database_url.empty()
          ? (std::filesystem::path(global.data_dir) / "calleval.db").string()
          : global.database_url,
      calleval::SchemaMigrations());
  if (!database.ok()) return database.status();
  Accounts accounts;
  accounts.database = std::move(*database);
  accounts.store = std::make_unique<calleval::accounts::AccountsStore>(accounts.database.get());
  return accounts;
}

struct WorkspaceCreateOptions {
  std::string name;
  int64_t credits = 0;
};

const std::vector<Flag<WorkspaceCreateOptions>>& WorkspaceCreateFlags() {
  static const auto* flags = new std::vector<Flag<WorkspaceCreateOptions>>{
      RequiredStringFlag("name", "NAME", &WorkspaceCreateOptions::name, "the workspace's name"),
      IntFlag("credits", "N", &WorkspaceCreateOptions::credits, 0, kMaxInt64,
              "the workspace's starting credit balance"),
  };
  return *flags;
}

int WorkspaceCreate(const GlobalOptions& global, const std::vector<std::string>&,
                    const WorkspaceCreateOptions& options) {
  auto accounts = OpenAccounts(global);
  if (!accounts.ok()) return Fail(accounts.status().message());
  auto workspace = accounts->store->CreateWorkspace(options.name, options.credits);
  if (!workspace.ok()) return Fail(workspace.status().message());
  auto key = accounts->store->CreateKey(workspace->id, {});
  if (!key.ok()) return Fail(key.status().message());
  std::cout << nlohmann::json{{"id", workspace->id},
                              {"name", workspace->name},
                              {"credit_balance", workspace->credit_balance},
                              {"api_key", key->api_key}}
                   .dump()
            << "\n";
  return 0;
}

struct KeyCreateOptions {
  int64_t workspace = 0;
  std::vector<int64_t> grants;
};

const std::vector<Flag<KeyCreateOptions>>& KeyCreateFlags() {
  static const auto* flags = new std::vector<Flag<KeyCreateOptions>>{
      Required(IntFlag("workspace", "ID", &KeyCreateOptions::workspace, 1, kMaxInt64,
                       "the workspace the key belongs to")),
      [] {
        Flag<KeyCreateOptions> flag;
        flag.name = "grant";
        flag.value_name = "ID,...";
        flag.description = "further workspaces the key may act on (comma list of ids)";
        flag.get = [](const KeyCreateOptions& o) { return absl::StrJoin(o.grants, ","); };
        flag.set = [](absl::string_view v, KeyCreateOptions* o) -> absl::Status {
          o->grants.clear();
          for (absl::string_view g : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
            int64_t id = 0;
            if (!absl::SimpleAtoi(g, &id) || id < 1) {
              return UsageError(absl::StrCat("not a workspace id: ", g, " (takes ids: 2,3)"));
            }
            o->grants.push_back(id);
          }
          return absl::OkStatus();
        };
        return flag;
      }(),
  };
  return *flags;
}

int KeyCreate(const GlobalOptions& global, const std::vector<std::string>&,
              const KeyCreateOptions& options) {
  auto accounts = OpenAccounts(global);
  if (!accounts.ok()) return Fail(accounts.status().message());
  auto key = accounts->store->CreateKey(options.workspace, options.grants);
  if (!key.ok()) return Fail(key.status().message());
  std::cout << nlohmann::json{{"api_key", key->api_key},
                              {"workspace_id", key->workspace_id},
                              {"granted_workspace_ids", key->granted_workspace_ids}}
                   .dump()
            << "\n";
  return 0;
}

struct CreditsAddOptions {
  int64_t workspace = 0;
  int64_t amount = 0;
};

const std::vector<Flag<CreditsAddOptions>>& CreditsAddFlags() {
  static const auto* flags = new std::vector<Flag<CreditsAddOptions>>{
      Required(IntFlag("workspace", "ID", &CreditsAddOptions::workspace, 1, kMaxInt64,
                       "the workspace credited")),
      Required(IntFlag("amount", "N", &CreditsAddOptions::amount,
                       std::numeric_limits<int64_t>::min(), kMaxInt64,
                       "credits added; negative takes them away (never below 0)")),
  };
  return *flags;
}

int CreditsAdd(const GlobalOptions& global, const std::vector<std::string>&,
               const CreditsAddOptions& options) {
  auto accounts = OpenAccounts(global);
  if (!accounts.ok()) return Fail(accounts.status().message());
  auto balance = accounts->store->AddCredits(options.workspace, options.amount);
  if (!balance.ok()) return Fail(balance.status().message());
  std::cout << nlohmann::json{{"workspace_id", options.workspace}, {"credit_balance", *balance}}
                   .dump()
            << "\n";
  return 0;
}

// ---------------------------------------------------------------------------------------------
// analyze

struct AnalyzeOptions {
  std::string transcript;
  calleval::scoring::ChannelMap channel_map;
  std::string stt = "pocketsphinx";
};

const std::vector<Flag<AnalyzeOptions>>& AnalyzeFlags() {
  static const auto* flags = new std::vector<Flag<AnalyzeOptions>>{
      [] {
        Flag<AnalyzeOptions> flag =
            StringFlag("transcript", "T.json", &AnalyzeOptions::transcript,
                       "the call's transcript: the ingest format's transcript array, checked "
                       "as the API checks it (enables transcription_accuracy)");
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          if (v.empty()) return UsageError("must not be empty");
          o->transcript = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
      [] {
        Flag<AnalyzeOptions> flag;
        flag.name = "channel-map";
        flag.value_name = "agent=N,user=M";
        flag.description = "which channel of a stereo recording is the agent's and the user's";
        flag.get = [](const AnalyzeOptions& o) {
          return absl::StrCat("agent=", o.channel_map.agent, ",user=", o.channel_map.user);
        };
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          auto map = calleval::scoring::ParseChannelMap(std::string(v));
          if (!map.ok()) {
            const auto info = calleval::ErrorInfoOf(map.status());
            return UsageError(info.details_size() > 0 ? info.details(0).issue()
                                                      : std::string(map.status().message()));
          }
          o->channel_map = *map;
          return absl::OkStatus();
        };
        return flag;
      }(),
      [] {
        Flag<AnalyzeOptions> flag;
        flag.name = "stt";
        flag.value_name = "pocketsphinx|none";
        flag.description =
            "the recognizer transcription_accuracy compares --transcript with; none: off";
        flag.get = [](const AnalyzeOptions& o) { return o.stt; };
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          if (v != "pocketsphinx" && v != "none") {
            return UsageError(absl::StrCat("must be pocketsphinx or none, not ", v));
          }
          o->stt = std::string(v);
          return absl::OkStatus();
        };
        return flag;
      }(),
  };
  return *flags;
}

// nlohmann's messages start with "[json.exception...] " and quote the input, which may hold
// bytes that are not printable; the line printed must stay one short line.
std::string PrintableParseError(absl::string_view what) {
  if (size_t pos = what.find("] "); pos != absl::string_view::npos && what.front() == '[') {
    what.remove_prefix(pos + 2);
  }
  std::string out;
  for (char c : what.substr(0, 200)) {
    unsigned char u = static_cast<unsigned char>(c);
    out.push_back(u >= 0x20 && u < 0x7F ? c : '?');
  }
  return out;
}

// The API's error as one line: its details as "field: issue", else its message.
std::string OneLine(const absl::Status& status) {
  const calleval::v1::ErrorInfo info = calleval::ErrorInfoOf(status);
  std::vector<std::string> parts;
  for (const auto& detail : info.details()) {
    parts.push_back(detail.has_field() ? absl::StrCat(detail.field(), ": ", detail.issue())
                                       : detail.issue());
  }
  if (parts.empty()) return std::string(status.message());
  return absl::StrJoin(parts, "; ");
}

// Reads a transcript file exactly as the API's ingest takes its `transcript` field: the edge's
// JSON codec parses it and the calls service's rules check it (services/calls/call_rules.h), so
// what the API refuses is refused here with the same field and issue. Unreadable file: exit 1;
// a transcript the API would refuse: a usage error.
absl::StatusOr<std::vector<calleval::v1::Turn>> ReadTranscript(const std::string& path,
                                                               int* exit_status) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *exit_status = 1;
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  *exit_status = 2;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Syntax errors are reported here, where line and column are the file's own.
  if (!nlohmann::json::accept(text)) {
    try {
      const nlohmann::json document = nlohmann::json::parse(text);
      (void)document;
    } catch (const nlohmann::json::exception& e) {
      return UsageError(absl::StrCat(path, ": malformed JSON: ", PrintableParseError(e.what())));
    }
  }
  calleval::v1::IngestCallRequest request;
  absl::Status parsed = calleval::edge::ParseJsonBody("{\"transcript\": " + text + "\n}", &request);
  if (!parsed.ok()) return UsageError(absl::StrCat(path, ": ", OneLine(parsed)));
  // The fields a real ingest would carry besides the transcript; the recording is FILE.
  request.set_call_identifier("callevalctl-analyze");
  request.set_agent_id(1);
  absl::Status valid = calleval::calls::ValidateIngest(request, /*recorded=*/true);
  if (!valid.ok()) return UsageError(absl::StrCat(path, ": ", OneLine(valid)));
  return std::vector<calleval::v1::Turn>(request.transcript().begin(),
                                         request.transcript().end());
}

// `analyze FILE ...`: the audio pass of the scoring service on one recording, offline; prints
// {"duration_seconds", "standard_metrics"} with the elements a call record carries.
int Analyze(const GlobalOptions&, const std::vector<std::string>& positional,
            const AnalyzeOptions& flags) {
  const std::string& file = positional[0];
  calleval::scoring::AnalysisOptions options;
  options.channel_map = flags.channel_map;
  const bool has_transcript = !flags.transcript.empty();
  std::vector<calleval::v1::Turn> transcript;
  if (has_transcript) {
    int exit_status = 0;
    auto read = ReadTranscript(flags.transcript, &exit_status);
    if (!read.ok()) {
      if (exit_status == 2) return InputError(read.status().message());
      return Fail(read.status().message());
    }
    transcript = std::move(*read);
  }
  auto result =
      calleval::scoring::AnalyzeRecording(file, has_transcript ? &transcript : nullptr, options);
  if (!result.ok()) return Fail(result.status().message());
  // transcription_accuracy: the provided transcript against the embedded recognizer's.
  calleval::v1::StandardMetricResult accuracy;
  if (!has_transcript) {
    accuracy = calleval::scoring::TranscriptionAccuracyNotApplicable(
        calleval::scoring::kNoProvidedTranscript);
  } else if (flags.stt == "none") {
    accuracy = calleval::scoring::TranscriptionAccuracyNotApplicable(
        "speech-to-text is off (--stt none)");
  } else {
    auto recognizer = calleval::scoring::PocketsphinxRecognizer::Create();
    if (!recognizer.ok()) return Fail(recognizer.status().message());
    auto generated = calleval::scoring::TranscribeRecording(
        file, options.channel_map, /*has_provided_transcript=*/true, **recognizer);
    if (!generated.ok()) return Fail(generated.status().message());
    accuracy = calleval::scoring::TranscriptionAccuracy(transcript, *generated);
  }
  result->standard_metrics.push_back(std::move(accuracy));
  std::stable_sort(result->standard_metrics.begin(), result->standard_metrics.end(),
                   [](const auto& a, const auto& b) { return a.metric_id() < b.metric_id(); });
  calleval::v1::RecordingAnalysis analysis;
  analysis.set_duration_seconds(result->duration_seconds);
  for (auto& m : result->standard_metrics) *analysis.add_standard_metrics() = std::move(m);
  std::cout << calleval::edge::PrintJson(analysis) << "\n";
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The command table.

// A command of cmd/callevalctl/remote.h: it talks to a server, not to the data dir.
template <typename Options, int (*body)(const std::vector<std::string>&, const Options&)>
int Remote(const GlobalOptions&, const std::vector<std::string>& positional,
           const Options& options) {
  return body(positional, options);
}

struct Command {
  std::string words;       // "workspace create"
  std::string positional;  // what follows the words besides flags: "FILE"
  std::string summary;
  std::function<std::string()> flags_help;
  // Parses the arguments after the words and runs the command; returns the exit status.
  std::function<int(const GlobalOptions&, const std::vector<std::string>& args)> run;
};

std::string GlobalFlagsHelp() { return calleval::cli::FlagsHelp(GlobalFlags(), kEnvPrefix); }

std::string CommandHelp(const Command& command) {
  return absl::StrCat("usage: callevalctl [--data-dir DIR] ", command.words,
                      command.positional.empty() ? "" : " ", command.positional, " [flags]\n\n",
                      command.summary, "\n\nflags:\n", command.flags_help(), "\nglobal flags:\n",
                      GlobalFlagsHelp());
}

template <typename Options>
Command MakeCommand(std::string words, std::string positional, std::string summary,
                    const std::vector<Flag<Options>>& (*flags)(),
                    int (*body)(const GlobalOptions&, const std::vector<std::string>&,
                                const Options&)) {
  Command command;
  command.words = std::move(words);
  command.positional = std::move(positional);
  command.summary = std::move(summary);
  command.flags_help = [flags] { return calleval::cli::FlagsHelp(flags()); };
  // What the command's --help describes (a copy made before `run` is set).
  Command described = command;
  command.run = [described, flags, body](const GlobalOptions& global,
                                         const std::vector<std::string>& args) {
    Options options;
    calleval::cli::ParseOptions parse_options;
    parse_options.max_positional = described.positional.empty() ? 0 : 1;
    auto parsed = calleval::cli::ParseFlags(flags(), args, parse_options, &options);
    if (parsed.ok() && parsed->help) {
      std::cout << CommandHelp(described);
      return 0;
    }
    if (!parsed.ok()) return Usage(parsed.status().message(), described.words);
    if (parsed->positional.size() < parse_options.max_positional) {
      return Usage(absl::StrCat(described.words, " needs a ", described.positional),
                   described.words);
    }
    return body(global, parsed->positional, options);
  };
  return command;
}

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      MakeCommand("workspace create", "",
                  "Creates a workspace and an API key for it; prints {\"id\", \"name\", "
                  "\"credit_balance\", \"api_key\"}.",
                  &WorkspaceCreateFlags, &WorkspaceCreate),
      MakeCommand("key create", "",
                  "Creates an API key; prints {\"api_key\", \"workspace_id\", "
                  "\"granted_workspace_ids\"}.",
                  &KeyCreateFlags, &KeyCreate),
      MakeCommand("credits add", "",
                  "Adds credits to a workspace; prints {\"workspace_id\", \"credit_balance\"}.",
                  &CreditsAddFlags, &CreditsAdd),
      MakeCommand("analyze", "FILE",
                  "Runs the audio pass of the scoring service on a recording offline; prints "
                  "{\"duration_seconds\", \"standard_metrics\"} as a call record carries them.",
                  &AnalyzeFlags, &Analyze),
      MakeCommand("calls push", "MANIFEST.jsonl",
                  "Ingests the calls of a manifest (one ingest body a line, each with a "
                  "call_identifier) into a server, resumably; --wait gates on their results.",
                  &calleval::ctl::PushFlags,
                  &Remote<calleval::ctl::PushOptions, &calleval::ctl::CallsPush>),
      MakeCommand("calls export", "",
                  "Prints every call of an agent from a server as CSV or JSON lines.",
                  &calleval::ctl::ExportFlags,
                  &Remote<calleval::ctl::ExportOptions, &calleval::ctl::CallsExport>),
      MakeCommand("runs batch", "",
                  "Runs scenarios against an agent on a server as one batch; --wait reports on "
                  "every run and gates on them (--min-pass-rate, --assert).",
                  &calleval::ctl::BatchFlags,
                  &Remote<calleval::ctl::BatchOptions, &calleval::ctl::RunsBatch>),
  };
  return *commands;
}

std::string Help() {
  std::string out =
      "usage: callevalctl [--data-dir DIR] COMMAND [flags]\n\n"
      "Administers an installation's data dir, also while the server runs.\n\n"
      "global flags:\n";
  absl::StrAppend(&out, GlobalFlagsHelp(), "\ncommands (callevalctl COMMAND --help for one):\n");
  for (const Command& command : Commands()) {
    absl::StrAppend(&out, "\n", command.words, command.positional.empty() ? "" : " ",
                    command.positional, "\n  ", command.summary, "\n", command.flags_help());
  }
  return out;
}

// The command named by the first words of `args`, or null.
const Command* FindCommand(const std::vector<std::string>& args, size_t* words) {
  for (const Command& command : Commands()) {
    std::vector<std::string> parts = absl::StrSplit(command.words, ' ');
    if (parts.size() <= args.size() && std::equal(parts.begin(), parts.end(), args.begin())) {
      *words = parts.size();
      return &command;
    }
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  GlobalOptions global;
  calleval::cli::ParseOptions parse_options;
  parse_options.env_prefix = kEnvPrefix;
  parse_options.stop_at_positional = true;
  auto parsed = calleval::cli::ParseFlags(GlobalFlags(), args, parse_options, &global);
  if (parsed.ok() && (parsed->help || (!parsed->positional.empty() &&
                                       parsed->positional[0] == "help"))) {
    std::cout << Help();
    return 0;
  }
  if (!parsed.ok()) return Usage(parsed.status().message());
  const std::vector<std::string>& rest = parsed->positional;
  if (rest.empty()) return Usage("missing command");
  size_t words = 0;
  const Command* command = FindCommand(rest, &words);
  if (command == nullptr) {
    // "workspace --help": the command is not complete, the whole help answers.
    for (const std::string& arg : rest) {
      if (arg == "--help" || arg == "-h") {
        std::cout << Help();
        return 0;
      }
    }
    // Name the words that could have been a command: one, or two when the first starts one.
    std::string named = rest[0];
    for (const Command& c : Commands()) {
      if (absl::StartsWith(c.words, rest[0] + " ") && rest.size() > 1) {
        named = absl::StrCat(rest[0], " ", rest[1]);
        break;
      }
    }
    return Usage(absl::StrCat("unknown command ", named));
  }
  return command->run(global, {rest.begin() + words, rest.end()});
}
