// callevalctl: administration of an installation's data dir (docs/operations.md §1). Works while
// the server runs: SQLite's WAL mode lets both write, each waiting briefly for the other.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "calleval/v1/calls.pb.h"
#include "common/schema.h"
#include "common/sqlite.h"
#include "edge/json_codec.h"
#include "nlohmann/json.hpp"
#include "services/accounts/accounts_store.h"
#include "services/scoring/analysis.h"
#include "services/scoring/transcription_accuracy.h"
#include "services/scoring/transcription_worker.h"

namespace {

constexpr char kUsage[] =
    "usage: callevalctl [--data-dir DIR] COMMAND\n"
    "  workspace create --name NAME [--credits N]\n"
    "  key create --workspace ID [--grant ID,...]\n"
    "  credits add --workspace ID --amount N\n"
    "  analyze FILE [--transcript T.json] [--channel-map agent=0,user=1]\n"
    "          [--stt pocketsphinx|none]   (transcription_accuracy: with --transcript)\n"
    "DIR defaults to $CALLEVAL_DATA_DIR, else ./data\n";

int Fail(const std::string& message) {
  std::cerr << "callevalctl: " << message << "\n";
  return 1;
}

int Usage(const std::string& message) {
  std::cerr << "callevalctl: " << message << "\n" << kUsage;
  return 2;
}

// "--name value" / "--name=value" pairs after the command words.
bool ParseFlags(const std::vector<std::string>& args, std::map<std::string, std::string>* flags,
                std::string* error) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument " + arg;
      return false;
    }
    arg = arg.substr(2);
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      (*flags)[arg.substr(0, eq)] = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      (*flags)[arg] = args[++i];
    } else {
      *error = "--" + arg + " needs a value";
      return false;
    }
  }
  return true;
}

bool Int64Flag(const std::map<std::string, std::string>& flags, const std::string& name,
               int64_t* out) {
  auto it = flags.find(name);
  return it != flags.end() && absl::SimpleAtoi(it->second, out);
}

}  // namespace

// `analyze FILE ...`: the audio pass of the scoring service on one recording, offline; prints
// {"duration_seconds", "standard_metrics"} with the elements a call record carries.
int Analyze(const std::vector<std::string>& args) {
  // FILE is the first argument that is not a flag or a flag's value.
  std::vector<std::string> flag_args;
  std::string file;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) == 0) {
      flag_args.push_back(args[i]);
      if (args[i].find('=') == std::string::npos && i + 1 < args.size()) {
        flag_args.push_back(args[++i]);
      }
    } else if (file.empty()) {
      file = args[i];
    } else {
      return Usage("unexpected argument " + args[i]);
    }
  }
  if (file.empty()) return Usage("analyze needs a FILE");
  std::map<std::string, std::string> flags;
  std::string error;
  if (!ParseFlags(flag_args, &flags, &error)) return Usage(error);
  const std::string stt = flags.count("stt") ? flags["stt"] : "pocketsphinx";
  if (stt != "pocketsphinx" && stt != "none") return Usage("--stt is pocketsphinx or none");
  calleval::scoring::AnalysisOptions options;
  if (flags.count("channel-map")) {
    auto map = calleval::scoring::ParseChannelMap(flags["channel-map"]);
    if (!map.ok()) return Usage(std::string(map.status().message()));
    options.channel_map = *map;
  }
  std::vector<calleval::v1::Turn> transcript;
  if (flags.count("transcript")) {
    std::ifstream in(flags["transcript"]);
    if (!in) return Fail("cannot read " + flags["transcript"]);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The file is the ingest format's transcript array: parse it as that field of an ingest.
    calleval::v1::IngestCallRequest request;
    absl::Status parsed = calleval::edge::ParseJsonBody("{\"transcript\": " + text + "}", &request);
    if (!parsed.ok()) return Fail(flags["transcript"] + ": " + std::string(parsed.message()));
    transcript.assign(request.transcript().begin(), request.transcript().end());
  }
  auto result = calleval::scoring::AnalyzeRecording(
      file, flags.count("transcript") ? &transcript : nullptr, options);
  if (!result.ok()) return Fail(std::string(result.status().message()));
  // transcription_accuracy: the provided transcript against the embedded recognizer's.
  calleval::v1::StandardMetricResult accuracy;
  if (!flags.count("transcript")) {
    accuracy = calleval::scoring::TranscriptionAccuracyNotApplicable(
        calleval::scoring::kNoProvidedTranscript);
  } else if (stt == "none") {
    accuracy = calleval::scoring::TranscriptionAccuracyNotApplicable(
        "speech-to-text is off (--stt none)");
  } else {
    auto recognizer = calleval::scoring::PocketsphinxRecognizer::Create();
    if (!recognizer.ok()) return Fail(std::string(recognizer.status().message()));
    auto generated = calleval::scoring::TranscribeRecording(
        file, options.channel_map, /*has_provided_transcript=*/true, **recognizer);
    if (!generated.ok()) return Fail(std::string(generated.status().message()));
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

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string data_dir =
      std::getenv("CALLEVAL_DATA_DIR") ? std::getenv("CALLEVAL_DATA_DIR") : "./data";
  while (!args.empty() && args[0].rfind("--data-dir", 0) == 0) {
    if (args[0] == "--data-dir") {
      if (args.size() < 2) return Usage("--data-dir needs a value");
      data_dir = args[1];
      args.erase(args.begin(), args.begin() + 2);
    } else {
      data_dir = args[0].substr(std::string("--data-dir=").size());
      args.erase(args.begin());
    }
  }
  if (!args.empty() && args[0] == "analyze") return Analyze({args.begin() + 1, args.end()});
  if (args.size() < 2) return Usage("missing command");
  const std::string command = args[0] + " " + args[1];
  std::map<std::string, std::string> flags;
  std::string error;
  if (!ParseFlags({args.begin() + 2, args.end()}, &flags, &error)) return Usage(error);

  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  auto database = calleval::db::Database::Open(
      (std::filesystem::path(data_dir) / "calleval.db").string(), calleval::SchemaMigrations());
  if (!database.ok()) return Fail(std::string(database.status().message()));
  calleval::accounts::AccountsStore store(database->get());

  if (command == "workspace create") {
    int64_t credits = 0;
    if (flags.count("credits") && !Int64Flag(flags, "credits", &credits)) {
      return Usage("--credits must be an integer");
    }
    if (!flags.count("name")) return Usage("--name is required");
    auto workspace = store.CreateWorkspace(flags["name"], credits);
    if (!workspace.ok()) return Fail(std::string(workspace.status().message()));
    auto key = store.CreateKey(workspace->id, {});
    if (!key.ok()) return Fail(std::string(key.status().message()));
    std::cout << nlohmann::json{{"id", workspace->id},
                                {"name", workspace->name},
                                {"credit_balance", workspace->credit_balance},
                                {"api_key", key->api_key}}
                     .dump()
              << "\n";
    return 0;
  }
  if (command == "key create") {
    int64_t workspace = 0;
    if (!Int64Flag(flags, "workspace", &workspace)) return Usage("--workspace ID is required");
    std::vector<int64_t> grants;
    for (absl::string_view g : absl::StrSplit(flags["grant"], ',', absl::SkipWhitespace())) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(g, &id)) return Usage("--grant takes workspace ids: 2,3");
      grants.push_back(id);
    }
    auto key = store.CreateKey(workspace, grants);
    if (!key.ok()) return Fail(std::string(key.status().message()));
    std::cout << nlohmann::json{{"api_key", key->api_key},
                                {"workspace_id", key->workspace_id},
                                {"granted_workspace_ids", key->granted_workspace_ids}}
                     .dump()
              << "\n";
    return 0;
  }
  if (command == "credits add") {
    int64_t workspace = 0, amount = 0;
    if (!Int64Flag(flags, "workspace", &workspace)) return Usage("--workspace ID is required");
    if (!Int64Flag(flags, "amount", &amount)) return Usage("--amount N is required");
    auto balance = store.AddCredits(workspace, amount);
    if (!balance.ok()) return Fail(std::string(balance.status().message()));
    std::cout << nlohmann::json{{"workspace_id", workspace}, {"credit_balance", *balance}}.dump()
              << "\n";
    return 0;
  }
  return Usage("unknown command " + command);
}
