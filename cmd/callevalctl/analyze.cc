#include "cmd/callevalctl/analyze.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "calleval/v1/calls.pb.h"
#include "common/errors.h"
#include "common/thread_pool.h"
#include "edge/json_codec.h"
#include "nlohmann/json.hpp"
#include "services/calls/call_rules.h"
#include "services/scoring/analysis.h"
#include "services/scoring/speech_to_text.h"
#include "services/scoring/transcription_accuracy.h"
#include "services/scoring/transcription_worker.h"

namespace calleval::ctl {
namespace {

using cli::Flag;
using cli::UsageError;

constexpr char kProgram[] = "callevalctl";
constexpr char kAutoTranscript[] = "auto";
constexpr int kMaxJobs = 256;

int Fail(absl::string_view message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 1;
}

// One line naming what is wrong; the help is one --help away.
int Usage(absl::string_view message) {
  std::cerr << kProgram << ": " << message << " (" << kProgram << " analyze --help)\n";
  return 2;
}

// Input the API would refuse: the same exit status as a usage error.
int InputError(absl::string_view message) {
  std::cerr << kProgram << ": " << message << "\n";
  return 2;
}

// A path flag that must not be given empty.
Flag<AnalyzeOptions> PathFlag(std::string name, std::string value_name,
                              std::string AnalyzeOptions::*field, std::string description) {
  Flag<AnalyzeOptions> flag = cli::StringFlag(std::move(name), std::move(value_name), field,
                                              std::move(description));
  flag.set = [field](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
    if (v.empty()) return UsageError("must not be empty");
    o->*field = std::string(v);
    return absl::OkStatus();
  };
  return flag;
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
  const v1::ErrorInfo info = ErrorInfoOf(status);
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
// what the API refuses is refused here with the same field and issue. Unreadable file:
// kNotFound; a transcript the API would refuse: kInvalidArgument.
absl::StatusOr<std::vector<v1::Turn>> ReadTranscript(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
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
  v1::IngestCallRequest request;
  absl::Status parsed = edge::ParseJsonBody("{\"transcript\": " + text + "\n}", &request);
  if (!parsed.ok()) return UsageError(absl::StrCat(path, ": ", OneLine(parsed)));
  // The fields a real ingest would carry besides the transcript; the recording is FILE.
  request.set_call_identifier("callevalctl-analyze");
  request.set_agent_id(1);
  absl::Status valid = calls::ValidateIngest(request, /*recorded=*/true);
  if (!valid.ok()) return UsageError(absl::StrCat(path, ": ", OneLine(valid)));
  return std::vector<v1::Turn>(request.transcript().begin(), request.transcript().end());
}

absl::StatusOr<scoring::ChannelMap> ChannelMapFlag(absl::string_view text) {
  auto map = scoring::ParseChannelMap(std::string(text));
  if (map.ok()) return map;
  const auto info = ErrorInfoOf(map.status());
  return UsageError(info.details_size() > 0 ? info.details(0).issue()
                                            : std::string(map.status().message()));
}

// One recording to analyse and what goes with it.
struct Input {
  std::string name;       // the case's name in the outputs
  std::string recording;  // the file's path
  std::string transcript;  // its transcript file's path; empty: none
  // The transcript when it was read before any work (a single --transcript T.json).
  std::shared_ptr<const std::vector<v1::Turn>> turns;
  scoring::ChannelMap channel_map;
};

bool IsGlob(absl::string_view argument) {
  return argument.find_first_of("*?[") != absl::string_view::npos;
}

// A FILE argument as the files it names: itself, or a glob's matches (sorted, directories left
// out). A glob is expanded here, not by a shell, so a CI config can pass it quoted; one matching
// nothing is a usage error (a mistyped directory would otherwise pass with nothing checked).
absl::Status ExpandArgument(const std::string& argument, std::vector<std::string>* files,
                            bool* globbed) {
  std::error_code error;
  if (!IsGlob(argument) || std::filesystem::exists(argument, error)) {
    files->push_back(argument);
    return absl::OkStatus();
  }
  *globbed = true;
  glob_t matches{};
  const int rc = glob(argument.c_str(), GLOB_MARK, nullptr, &matches);
  size_t added = 0;
  if (rc == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      std::string match = matches.gl_pathv[i];
      if (!match.empty() && match.back() == '/') continue;  // GLOB_MARK: a directory
      files->push_back(std::move(match));
      ++added;
    }
  }
  globfree(&matches);
  if (rc != 0 && rc != GLOB_NOMATCH) return UsageError(absl::StrCat("cannot expand ", argument));
  if (added == 0) return UsageError(absl::StrCat("no file matches ", argument));
  return absl::OkStatus();
}

// A manifest: one JSON object a line, {"recording": PATH, "transcript": PATH|null,
// "channel_map": "agent=0,user=1", "name": NAME}; relative paths are the manifest directory's.
// Blank lines are skipped; anything else malformed is a usage error naming the line.
absl::Status ReadManifest(const std::string& path, const scoring::ChannelMap& default_map,
                          std::vector<Input>* inputs) {
  std::ifstream in(path);
  if (!in) return UsageError(absl::StrCat("--manifest: cannot read ", path));
  const std::filesystem::path directory = std::filesystem::path(path).parent_path();
  auto resolve = [&](const std::string& file) {
    const std::filesystem::path p(file);
    return p.is_absolute() ? file : (directory / p).string();
  };
  std::string line;
  int number = 0;
  const size_t before = inputs->size();
  while (std::getline(in, line)) {
    ++number;
    auto malformed = [&](absl::string_view problem) {
      return UsageError(absl::StrCat(path, ":", number, ": ", problem));
    };
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json entry;
    try {
      entry = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return malformed(absl::StrCat("malformed JSON: ", PrintableParseError(e.what())));
    }
    if (!entry.is_object()) return malformed("not a JSON object");
    for (const auto& item : entry.items()) {
      const std::string& key = item.key();
      if (key != "recording" && key != "transcript" && key != "channel_map" && key != "name") {
        return malformed(absl::StrCat("unknown key \"", PrintableParseError(key),
                                      "\" (one of recording, transcript, channel_map, name)"));
      }
    }
    // A string that is not empty, or (when optional) absent or null.
    auto text = [&](const char* key, bool required,
                    std::string* out) -> absl::Status {
      auto it = entry.find(key);
      if (it == entry.end() || it->is_null()) {
        if (required) return malformed(absl::StrCat("\"", key, "\" is required"));
        return absl::OkStatus();
      }
      if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
        return malformed(absl::StrCat("\"", key, "\" must be a string that is not empty",
                                      required ? "" : ", or null"));
      }
      *out = it->get<std::string>();
      return absl::OkStatus();
    };
    std::string recording, transcript, channel_map, name;
    if (absl::Status s = text("recording", true, &recording); !s.ok()) return s;
    if (absl::Status s = text("transcript", false, &transcript); !s.ok()) return s;
    if (absl::Status s = text("channel_map", false, &channel_map); !s.ok()) return s;
    if (absl::Status s = text("name", false, &name); !s.ok()) return s;
    Input input;
    input.name = name.empty() ? recording : name;
    input.recording = resolve(recording);
    if (!transcript.empty()) input.transcript = resolve(transcript);
    input.channel_map = default_map;
    if (!channel_map.empty()) {
      auto map = ChannelMapFlag(channel_map);
      if (!map.ok()) return malformed(absl::StrCat("channel_map: ", map.status().message()));
      input.channel_map = *map;
    }
    inputs->push_back(std::move(input));
  }
  if (inputs->size() == before) return UsageError(absl::StrCat(path, ": names no recording"));
  return absl::OkStatus();
}

// The analysis of one input, as a call record carries it. Each worker thread keeps one: the
// recognizer (~140 MB, about a second to load) is loaded at its first transcript and reused, so
// memory grows with --jobs, not with the number of files.
class Analyzer {
 public:
  explicit Analyzer(bool speech_to_text) : speech_to_text_(speech_to_text) {}

  absl::StatusOr<v1::RecordingAnalysis> Analyze(const Input& input) {
    std::shared_ptr<const std::vector<v1::Turn>> transcript = input.turns;
    if (transcript == nullptr && !input.transcript.empty()) {
      auto read = ReadTranscript(input.transcript);
      if (!read.ok()) return read.status();
      transcript = std::make_shared<const std::vector<v1::Turn>>(std::move(*read));
    }
    scoring::AnalysisOptions options;
    options.channel_map = input.channel_map;
    auto result = scoring::AnalyzeRecording(input.recording, transcript.get(), options);
    if (!result.ok()) return result.status();
    // transcription_accuracy: the provided transcript against the embedded recognizer's.
    v1::StandardMetricResult accuracy;
    if (transcript == nullptr) {
      accuracy =
          scoring::TranscriptionAccuracyNotApplicable(scoring::kNoProvidedTranscript);
    } else if (!speech_to_text_) {
      accuracy = scoring::TranscriptionAccuracyNotApplicable("speech-to-text is off (--stt none)");
    } else {
      auto recognizer = Recognizer();
      if (!recognizer.ok()) return recognizer.status();
      auto generated = scoring::TranscribeRecording(input.recording, options.channel_map,
                                                    /*has_provided_transcript=*/true,
                                                    **recognizer);
      if (!generated.ok()) return generated.status();
      accuracy = scoring::TranscriptionAccuracy(*transcript, *generated);
    }
    result->standard_metrics.push_back(std::move(accuracy));
    std::stable_sort(result->standard_metrics.begin(), result->standard_metrics.end(),
                     [](const auto& a, const auto& b) { return a.metric_id() < b.metric_id(); });
    v1::RecordingAnalysis analysis;
    analysis.set_duration_seconds(result->duration_seconds);
    for (auto& m : result->standard_metrics) *analysis.add_standard_metrics() = std::move(m);
    return analysis;
  }

 private:
  absl::StatusOr<scoring::PocketsphinxRecognizer*> Recognizer() {
    if (recognizer_ == nullptr) {
      auto created = scoring::PocketsphinxRecognizer::Create();
      if (!created.ok()) return created.status();
      recognizer_ = std::move(*created);
    }
    return recognizer_.get();
  }

  const bool speech_to_text_;
  std::unique_ptr<scoring::PocketsphinxRecognizer> recognizer_;
};

// A report file's directory must exist before the work starts, not be found missing after it.
absl::Status CheckReportPath(absl::string_view flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  std::filesystem::path directory = std::filesystem::path(path).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return UsageError(absl::StrCat("--", flag, ": no directory ", directory.string()));
  }
  return absl::OkStatus();
}

// Everything about one input once analysed.
struct Analysed {
  absl::StatusOr<v1::RecordingAnalysis> analysis = absl::UnknownError("not analysed");
  double seconds = 0;
};

// The batch output's line for an input: {"name", "duration_seconds", "standard_metrics"} or
// {"name", "error"}.
std::string BatchLine(const Input& input, const Analysed& analysed) {
  nlohmann::ordered_json line;
  line["name"] = input.name;
  if (!analysed.analysis.ok()) {
    line["error"] = OneLine(analysed.analysis.status());
  } else {
    const auto record = nlohmann::ordered_json::parse(edge::PrintJson(*analysed.analysis));
    for (const auto& [key, value] : record.items()) line[key] = value;
  }
  return line.dump();
}

}  // namespace

const std::vector<Flag<AnalyzeOptions>>& AnalyzeFlags() {
  static const auto* flags = new std::vector<Flag<AnalyzeOptions>>{
      PathFlag("transcript", "T.json|auto", &AnalyzeOptions::transcript,
               "the call's transcript: the ingest format's transcript array, checked as the API "
               "checks it (enables transcription_accuracy); auto: <name>.transcript.json beside "
               "each FILE <name>.<ext>, where there is one"),
      [] {
        Flag<AnalyzeOptions> flag;
        flag.name = "channel-map";
        flag.value_name = "agent=N,user=M";
        flag.description =
            "which channel of a stereo recording is the agent's and the user's (a manifest "
            "line's channel_map wins)";
        flag.get = [](const AnalyzeOptions& o) {
          return absl::StrCat("agent=", o.channel_map.agent, ",user=", o.channel_map.user);
        };
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          auto map = ChannelMapFlag(v);
          if (!map.ok()) return map.status();
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
            "the recognizer transcription_accuracy compares the transcript with; none: off";
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
      PathFlag("manifest", "M.jsonl", &AnalyzeOptions::manifest,
               "more inputs, one JSON object a line: {\"recording\", \"transcript\" (or null), "
               "\"channel_map\", \"name\"}; relative paths are the manifest directory's"),
      [] {
        Flag<AnalyzeOptions> flag;
        flag.name = "jobs";
        flag.value_name = "N";
        flag.description =
            "inputs analysed at once (each job with a transcript holds a ~140 MB recognizer)";
        flag.get = [](const AnalyzeOptions& o) {
          return o.jobs == 0 ? std::string() : absl::StrCat(o.jobs);
        };
        flag.empty_default = "one per core";
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          int jobs = 0;
          if (!absl::SimpleAtoi(v, &jobs)) return UsageError(absl::StrCat("not an integer: ", v));
          if (jobs < 1 || jobs > kMaxJobs) {
            return UsageError(absl::StrCat(v, " is out of range: 1..", kMaxJobs));
          }
          o->jobs = jobs;
          return absl::OkStatus();
        };
        return flag;
      }(),
      [] {
        Flag<AnalyzeOptions> flag;
        flag.name = "assert";
        flag.value_name = "FIGURE<OP>VALUE";
        flag.description =
            "repeatable: a check on every input's figures, e.g. 'latency.p95_ms<=1500', "
            "'ai_interruptions.count==0' (OP one of <= >= < > == !=); any failing exits 1";
        flag.get = [](const AnalyzeOptions& o) {
          std::vector<std::string> texts;
          for (const Assertion& a : o.assertions) texts.push_back(a.text);
          return absl::StrJoin(texts, " ");
        };
        flag.set = [](absl::string_view v, AnalyzeOptions* o) -> absl::Status {
          // Checked as given, before any file is opened: a typo must not cost a batch's time.
          auto assertion = ParseAssertion(v);
          if (!assertion.ok()) return UsageError(assertion.status().message());
          if (absl::Status known = CheckStandardFigure(*assertion); !known.ok()) {
            return UsageError(known.message());
          }
          o->assertions.push_back(*std::move(assertion));
          return absl::OkStatus();
        };
        return flag;
      }(),
      PathFlag("junit", "FILE", &AnalyzeOptions::junit,
               "writes a JUnit XML report: a test case per input and assertion"),
      PathFlag("summary", "FILE", &AnalyzeOptions::summary,
               "writes a JSON summary: every figure, every assertion's outcome, totals"),
  };
  return *flags;
}

int Analyze(const std::vector<std::string>& positional, const AnalyzeOptions& options) {
  // The inputs, all of them known (and the usage errors found) before any work.
  if (positional.empty() && options.manifest.empty()) {
    return Usage("analyze needs a FILE, a glob or --manifest");
  }
  std::vector<std::string> files;
  bool globbed = false;
  for (const std::string& argument : positional) {
    if (absl::Status s = ExpandArgument(argument, &files, &globbed); !s.ok()) {
      return Usage(s.message());
    }
  }
  const bool auto_transcript = options.transcript == kAutoTranscript;
  const bool one_transcript = !options.transcript.empty() && !auto_transcript;
  if (one_transcript && (files.size() != 1 || !options.manifest.empty())) {
    return Usage(
        "--transcript T.json is one call's transcript: with several inputs use --transcript "
        "auto or a manifest");
  }
  std::shared_ptr<const std::vector<v1::Turn>> shared_turns;
  if (one_transcript) {
    auto read = ReadTranscript(options.transcript);
    if (!read.ok()) {
      if (absl::IsNotFound(read.status())) return Fail(read.status().message());
      return InputError(read.status().message());
    }
    shared_turns = std::make_shared<const std::vector<v1::Turn>>(std::move(*read));
  }
  std::vector<Input> inputs;
  for (const std::string& file : files) {
    Input input;
    input.name = file;
    input.recording = file;
    input.channel_map = options.channel_map;
    input.turns = shared_turns;
    if (auto_transcript) {
      const std::string beside =
          std::filesystem::path(file).replace_extension(".transcript.json").string();
      std::error_code error;
      if (std::filesystem::exists(beside, error)) input.transcript = beside;
    }
    inputs.push_back(std::move(input));
  }
  if (!options.manifest.empty()) {
    if (absl::Status s = ReadManifest(options.manifest, options.channel_map, &inputs); !s.ok()) {
      return Usage(s.message());
    }
  }
  if (absl::Status s = CheckReportPath("junit", options.junit); !s.ok()) return Usage(s.message());
  if (absl::Status s = CheckReportPath("summary", options.summary); !s.ok()) {
    return Usage(s.message());
  }
  // One FILE named as such prints the call record's document, as it always has; any other
  // way of naming inputs prints one JSON line per input, in input order.
  const bool batch = files.size() != 1 || globbed || !options.manifest.empty();

  int jobs = options.jobs > 0 ? options.jobs
                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, static_cast<int>(inputs.size()));
  std::optional<Progress> progress;
  if (batch) progress.emplace(&std::cerr, inputs.size(), isatty(STDERR_FILENO) == 1);

  const absl::Time started = absl::Now();
  std::vector<Analysed> analysed(inputs.size());
  absl::Mutex mu;
  std::vector<bool> done(inputs.size(), false);
  size_t printed = 0;  // the batch lines go out in input order, as soon as their turn comes
  std::atomic<size_t> next{0};
  {
    ThreadPool pool(jobs);
    for (int worker = 0; worker < jobs; ++worker) {
      pool.Schedule([&] {
        Analyzer analyzer(options.stt == "pocketsphinx");
        for (size_t i = next++; i < inputs.size(); i = next++) {
          const auto start = std::chrono::steady_clock::now();
          Analysed result;
          result.analysis = analyzer.Analyze(inputs[i]);
          result.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          bool ok = result.analysis.ok();
          if (ok) {
            const Figures figures =
                FiguresOfCall(nlohmann::json::parse(edge::PrintJson(*result.analysis)));
            for (const Assertion& assertion : options.assertions) {
              ok = ok && Evaluate(assertion, figures).kind != Outcome::Kind::kFailed;
            }
          }
          absl::MutexLock lock(&mu);
          analysed[i] = std::move(result);
          done[i] = true;
          if (progress) progress->Done(inputs[i].name, ok);
          while (batch && printed < inputs.size() && done[printed]) {
            std::cout << BatchLine(inputs[printed], analysed[printed]) << "\n" << std::flush;
            ++printed;
          }
        }
      });
    }
  }  // the pool's destructor waits for the workers
  if (progress) progress->Finish();

  GateReport report;
  report.suite = "callevalctl analyze";
  report.assertions = options.assertions;
  for (size_t i = 0; i < inputs.size(); ++i) {
    CaseReport c;
    c.name = inputs[i].name;
    c.seconds = analysed[i].seconds;
    if (analysed[i].analysis.ok()) {
      c.figures = FiguresOfCall(nlohmann::json::parse(edge::PrintJson(*analysed[i].analysis)));
    } else {
      c.error = OneLine(analysed[i].analysis.status());
    }
    report.cases.push_back(std::move(c));
  }
  report.EvaluateAll();

  if (!batch) {
    if (analysed[0].analysis.ok()) {
      std::cout << edge::PrintJson(*analysed[0].analysis) << "\n";
    } else {
      Fail(analysed[0].analysis.status().message());
    }
  }
  // What failed, one line each, where a CI log shows it.
  for (const CaseReport& c : report.cases) {
    if (c.error && batch) Fail(absl::StrCat(c.name, ": ", *c.error));
    for (const Outcome& outcome : c.outcomes) {
      if (outcome.kind == Outcome::Kind::kFailed) {
        Fail(absl::StrCat(c.name, ": ", outcome.message));
      }
    }
  }
  if (batch) {
    const GateTotals totals = report.Totals();
    std::cerr << kProgram << ": " << totals.cases << " inputs (" << totals.errors
              << " not analysed), " << totals.assertions << " checks: " << totals.passed
              << " passed, " << totals.failed << " failed, " << totals.skipped << " skipped\n";
  }
  int exit_status = report.ExitCode();
  if (!options.junit.empty()) {
    if (absl::Status s = WriteFileAtomically(options.junit, JUnitXml(report, started));
        !s.ok()) {
      exit_status = Fail(absl::StrCat("--junit: ", s.message()));
    }
  }
  if (!options.summary.empty()) {
    if (absl::Status s = WriteFileAtomically(options.summary, SummaryJson(report).dump(2) + "\n");
        !s.ok()) {
      exit_status = Fail(absl::StrCat("--summary: ", s.message()));
    }
  }
  return exit_status;
}

}  // namespace calleval::ctl
