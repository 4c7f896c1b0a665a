#pragma once

// The CI gate of callevalctl (docs/operations.md §2): the figures of a scored call, assertions over them,
// and the reports a CI server reads (JUnit XML, a JSON summary, an exit status). Pure functions
// over the JSON the API and `callevalctl analyze` print, so the offline and the server commands
// judge a call the same way.

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace calleval::ctl {

// null (absent or JSON null), a boolean, a number, or a string.
using FigureValue = std::variant<std::monostate, bool, double, std::string>;

// The figures of one call by name: "latency.p95_ms" -> 1070.8, "latency.status" -> "completed".
using Figures = std::map<std::string, FigureValue, std::less<>>;

// "1070.8", "true", "null", "\"completed\"": how reports print a value.
std::string FigureText(const FigureValue& value);
nlohmann::json FigureJson(const FigureValue& value);

// A custom metric's name as a figure prefix: lowercased, every run of characters other than
// [a-z0-9] one '_', trimmed of '_' ("Greets caller!" -> "greets_caller").
std::string MetricSlug(absl::string_view name);

// The figures of a JSON object holding `standard_metrics` (what `callevalctl analyze` prints,
// or a call record of the API) and, in call records, `metric_results`:
// - standard metrics: "<standard_metric_key>.<k>" for every scalar k of `result`, and
//   "<key>.status", "<key>.score";
// - custom metrics: "<slug>.value" and "<slug>.status", and the same under "metric_<id>"; a
//   slug that is a standard key, or that two metrics share, is left to the "metric_<id>" names;
// - "duration_seconds", and in call records "call.analysis_status",
//   "call.transcription_status".
Figures FiguresOfCall(const nlohmann::json& call);

// A run of the API (GET /api/v1/runs/{id}): "run.status", "run.passed" (null until the run has
// an outcome), "run.end_reason", added to `figures` (those of the run's call, when it has one).
void AddRunFigures(const nlohmann::json& run, Figures* figures);

enum class Comparison { kLess, kLessEqual, kGreater, kGreaterEqual, kEqual, kNotEqual };

struct Assertion {
  std::string text;    // as written, spaces trimmed: "latency.p95_ms<=1500"
  std::string figure;  // "latency.p95_ms"
  Comparison comparison = Comparison::kEqual;
  FigureValue expected;  // 1500.0, true, "completed", null
};

// "FIGURE OP VALUE" with optional spaces: OP one of <= >= < > == !=; VALUE a number, true,
// false, null, or a string (a bare word, or "quoted" with \" and \\ escapes). <, <=, > and >=
// need a number. An error is InvalidArgument with one line saying what is wrong.
absl::StatusOr<Assertion> ParseAssertion(absl::string_view text);

// For recordings analysed offline, where only the standard metrics exist: the figure must be
// duration_seconds or a standard metric's status, score or scalar result key (docs/api.md §3.1).
// InvalidArgument "unknown metric 'latncy' (one of latency, ...)" or "latency has no figure
// 'p96_ms' (one of average_ms, ...)".
absl::Status CheckStandardFigure(const Assertion& assertion);

// Whether the figure names a standard metric (by its key), so it can be checked before any
// work; other metric names are custom metrics, known only once a server answers.
bool IsStandardFigure(absl::string_view figure);

struct Outcome {
  enum class Kind { kPassed, kFailed, kSkipped };
  Kind kind = Kind::kFailed;
  std::string message;  // "latency.p95_ms is 1612.4, wanted <= 1500"; skipped: why
  FigureValue actual;
};

// Skipped when the figure's metric ended not_applicable or skipped (unless the figure is that
// metric's status, which an assertion may test); failed when the figure is absent or null, its
// type does not fit the comparison, or the comparison does not hold.
Outcome Evaluate(const Assertion& assertion, const Figures& figures);

// One input of a gate: a file analysed, a call pushed, a run.
struct CaseReport {
  std::string name;                  // the file's path, the call_identifier, "run 12"
  std::optional<std::string> error;  // the work itself failed: each assertion is an error
  double seconds = 0;
  Figures figures;
  std::vector<Outcome> outcomes;  // one per assertion, in order; empty while not evaluated
};

struct GateTotals {
  size_t cases = 0, errors = 0;                             // inputs, inputs that failed
  size_t assertions = 0, passed = 0, failed = 0, skipped = 0;  // outcomes
};

struct GateReport {
  std::string suite;  // "callevalctl analyze"
  std::vector<Assertion> assertions;
  std::vector<CaseReport> cases;

  // Evaluates every assertion on every case that has no error.
  void EvaluateAll();
  GateTotals Totals() const;
  // 0 when no case has an error and no assertion failed; else 1.
  int ExitCode() const;
};

// JUnit XML: one <testsuite> named after the suite; one <testcase> per case and assertion
// (classname the case's name, name the assertion) with <failure>, <error> or <skipped>; a case
// without assertions is one <testcase name="completed"> (an <error> when its work failed). The
// shape GitLab, GitHub's reporters and Jenkins read; tests validate it against the schema in
// tests/fixtures/junit-ci.xsd (the rules those readers share) and read it back with junitparser.
// `timestamp` is the run's start.
std::string JUnitXml(const GateReport& report, absl::Time timestamp);

// {"suite", "exit_code", "totals": {...}, "assertions": [text...], "cases": [{"name",
// "seconds", "error", "figures": {...}, "outcomes": [{"assertion", "outcome", "message"}]}]}
nlohmann::json SummaryJson(const GateReport& report);

// Writes a whole file through a temporary beside it and a rename, so a reader never sees half.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// Progress of a batch on stderr: on a terminal one line redrawn in place
// ("[=======>     ] 12/40  1 failed  0:42 left"), else a plain line per finished input
// ("12/40 ok name"). Safe to call from worker threads.
class Progress {
 public:
  Progress(std::ostream* out, size_t total, bool terminal);
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Done(absl::string_view name, bool ok);
  // Ends the redrawn line (a terminal's next output starts on a line of its own).
  void Finish();

 private:
  void Draw();  // with mu_ held

  std::ostream* out_;
  const size_t total_;
  const bool terminal_;
  const absl::Time start_ = absl::Now();
  std::mutex mu_;
  size_t done_ = 0, failed_ = 0;
  bool finished_ = false;
};

}  // namespace calleval::ctl
