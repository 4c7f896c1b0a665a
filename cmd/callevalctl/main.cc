// callevalctl: administration of an installation's data dir (docs/operations.md §2). Works while
// the server runs: SQLite's WAL mode lets both write, each waiting briefly for the other.
//
// Each command declares its flags in one table (cmd/flags.h) that its parser and its --help are
// generated from. Usage errors (unknown command or flag, missing or malformed value, a transcript
// the API would refuse) exit 2 with one line on stderr; failures of the work itself exit 1.

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cmd/callevalctl/analyze.h"
#include "cmd/callevalctl/remote.h"
#include "cmd/flags.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/database.h"
#include "nlohmann/json.hpp"
#include "services/accounts/accounts_store.h"

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
// analyze (cmd/callevalctl/analyze.cc)

int Analyze(const GlobalOptions&, const std::vector<std::string>& positional,
            const calleval::ctl::AnalyzeOptions& options) {
  return calleval::ctl::Analyze(positional, options);
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
    // "FILE": one, required; "[FILE...]": any number, none required (the command checks).
    parse_options.max_positional = described.positional.empty()                  ? 0
                                   : absl::StrContains(described.positional, "...") ? SIZE_MAX
                                                                                    : 1;
    auto parsed = calleval::cli::ParseFlags(flags(), args, parse_options, &options);
    if (parsed.ok() && parsed->help) {
      std::cout << CommandHelp(described);
      return 0;
    }
    if (!parsed.ok()) return Usage(parsed.status().message(), described.words);
    if (parsed->positional.empty() && !described.positional.empty() &&
        !absl::StartsWith(described.positional, "[")) {
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
      MakeCommand("analyze", "[FILE|GLOB...]",
                  "Runs the audio pass of the scoring service on recordings offline. One FILE: "
                  "prints {\"duration_seconds\", \"standard_metrics\"} as a call record carries "
                  "them. Several (files, quoted globs, --manifest): analysed --jobs at a time, "
                  "one JSON line each in input order ({\"name\", \"duration_seconds\", "
                  "\"standard_metrics\"} or {\"name\", \"error\"}), progress on stderr. "
                  "--assert checks every input's figures; exits 0 when every input was analysed "
                  "and every assertion holds, 1 otherwise.",
                  &calleval::ctl::AnalyzeFlags, &Analyze),
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
                  "every run and gates on them (--min-pass-rate, --assert); --baseline compares "
                  "the batch with an earlier one and --fail-on gates on the verdict (exit 3).",
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
