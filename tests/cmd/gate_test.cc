#include "cmd/callevalctl/gate.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/civil_time.h"
#include "calleval/v1/calls.pb.h"
#include "edge/json_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/scoring/analysis.h"
#include "services/scoring/transcription_accuracy.h"

namespace calleval::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Assertion MustParse(absl::string_view text) {
  auto parsed = ParseAssertion(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status();
  return parsed.ok() ? *parsed : Assertion{};
}

std::string ParseError(absl::string_view text) {
  auto parsed = ParseAssertion(text);
  EXPECT_FALSE(parsed.ok()) << text;
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(ParseAssertion, TakesEveryComparisonAndValueKind) {
  Assertion a = MustParse(" latency.p95_ms <= 1500 ");
  EXPECT_EQ(a.text, "latency.p95_ms <= 1500");
  EXPECT_EQ(a.figure, "latency.p95_ms");
  EXPECT_EQ(a.comparison, Comparison::kLessEqual);
  EXPECT_EQ(a.expected, FigureValue{1500.0});
  EXPECT_EQ(MustParse("a.b<1").comparison, Comparison::kLess);
  EXPECT_EQ(MustParse("a.b>-1.5").expected, FigureValue{-1.5});
  EXPECT_EQ(MustParse("a.b>=1e3").expected, FigureValue{1000.0});
  EXPECT_EQ(MustParse("a.b!=null").expected, FigureValue{});
  EXPECT_EQ(MustParse("a.b==true").expected, FigureValue{true});
  EXPECT_EQ(MustParse("a.b==false").expected, FigureValue{false});
  EXPECT_EQ(MustParse("latency.status==completed").expected, FigureValue{std::string("completed")});
  EXPECT_EQ(MustParse(R"(user_sentiment.value == "very \"good\"")").expected,
            FigureValue{std::string("very \"good\"")});
}

TEST(ParseAssertion, SaysWhatIsWrong) {
  EXPECT_THAT(ParseError(""), HasSubstr("empty"));
  EXPECT_THAT(ParseError("latency.p95_ms"), HasSubstr("no comparison"));
  EXPECT_THAT(ParseError("latency.p95_ms=1500"), HasSubstr("compare with =="));
  EXPECT_THAT(ParseError("latency.p95_ms=<1500"), HasSubstr("compare with =="));
  EXPECT_THAT(ParseError("latency.p95_ms<=>1500"), HasSubstr("OP is one of"));
  EXPECT_THAT(ParseError("<=1500"), HasSubstr("no figure"));
  EXPECT_THAT(ParseError("latency p95<=1"), HasSubstr("letters, digits"));
  EXPECT_THAT(ParseError("latency..p95<=1"), HasSubstr("METRIC.KEY"));
  EXPECT_THAT(ParseError("latency.p95_ms<="), HasSubstr("no value"));
  EXPECT_THAT(ParseError("latency.p95_ms<=fast"), HasSubstr("compares numbers"));
  EXPECT_THAT(ParseError("latency.status==\"open"), HasSubstr("not closed"));
  EXPECT_THAT(ParseError("latency.status==\"a\"b"), HasSubstr("after the closing quote"));
  EXPECT_THAT(ParseError("latency.status==a b"), HasSubstr("quoted"));
  EXPECT_THAT(ParseError("latency.p95_ms<inf"), HasSubstr("finite"));
}

TEST(CheckStandardFigure, KnowsTheStandardMetricsAndTheirKeys) {
  EXPECT_TRUE(CheckStandardFigure(MustParse("latency.p95_ms<=1500")).ok());
  EXPECT_TRUE(CheckStandardFigure(MustParse("ai_interruptions.count==0")).ok());
  EXPECT_TRUE(CheckStandardFigure(MustParse("talk_ratio.status==completed")).ok());
  EXPECT_TRUE(CheckStandardFigure(MustParse("voice_tone_clarity.score>=4")).ok());
  EXPECT_TRUE(CheckStandardFigure(MustParse("duration_seconds<600")).ok());
  const absl::Status unknown = CheckStandardFigure(MustParse("latncy.p95_ms<=1500"));
  EXPECT_THAT(unknown.message(), HasSubstr("unknown metric 'latncy'"));
  EXPECT_THAT(unknown.message(), HasSubstr("one of latency, ai_interruptions"));
  const absl::Status key = CheckStandardFigure(MustParse("latency.p96_ms<=1500"));
  EXPECT_THAT(key.message(), HasSubstr("latency has no figure 'p96_ms'"));
  EXPECT_THAT(key.message(), HasSubstr("p95_ms"));
  EXPECT_THAT(CheckStandardFigure(MustParse("latency<=1")).message(), HasSubstr("needs a figure"));
  EXPECT_THAT(CheckStandardFigure(MustParse("duration_seconds.x<1")).message(),
              HasSubstr("no figure 'x'"));
  EXPECT_TRUE(IsStandardFigure("latency.p95_ms"));
  EXPECT_FALSE(IsStandardFigure("resolved.value"));
}

nlohmann::json CallRecord() {
  return nlohmann::json::parse(R"({
    "id": 7, "call_identifier": "crm-1", "duration_seconds": 42,
    "analysis_status": "completed", "transcription_status": "completed",
    "standard_metrics": [
      {"metric_id": 1, "standard_metric_key": "latency", "status": "completed",
       "result": {"p95_ms": 1612.4, "count": 5, "turns": [{"latency_ms": 3}]}, "score": 900.5},
      {"metric_id": 4, "standard_metric_key": "stop_time_after_interruption",
       "status": "not_applicable", "result": {"average_ms": null}, "score": null},
      {"metric_id": 8, "standard_metric_key": "voice_tone_clarity", "status": "completed",
       "result": {"score": 4, "snr_db": 31.5}, "score": 4.0}
    ],
    "metric_results": [
      {"metric_id": 101, "name": "Resolved issue?", "status": "completed", "value": true},
      {"metric_id": 102, "name": "Tone", "status": "completed", "value": "polite"},
      {"metric_id": 103, "name": "tone", "status": "completed", "value": "rude"},
      {"metric_id": 104, "name": "Latency", "status": "completed", "value": 3},
      {"metric_id": 105, "name": "Trigger", "status": "not_applicable", "value": null}
    ]})");
}

TEST(FiguresOfCall, NamesStandardCustomAndCallFigures) {
  const Figures figures = FiguresOfCall(CallRecord());
  EXPECT_EQ(figures.at("duration_seconds"), FigureValue{42.0});
  EXPECT_EQ(figures.at("call.analysis_status"), FigureValue{std::string("completed")});
  EXPECT_EQ(figures.at("latency.p95_ms"), FigureValue{1612.4});
  EXPECT_EQ(figures.at("latency.count"), FigureValue{5.0});
  EXPECT_EQ(figures.at("latency.score"), FigureValue{900.5});
  EXPECT_EQ(figures.at("latency.status"), FigureValue{std::string("completed")});
  EXPECT_EQ(figures.count("latency.turns"), 0u);  // arrays are not figures
  EXPECT_EQ(figures.at("stop_time_after_interruption.average_ms"), FigureValue{});
  EXPECT_EQ(figures.at("voice_tone_clarity.score"), FigureValue{4.0});
  EXPECT_EQ(figures.at("resolved_issue.value"), FigureValue{true});
  EXPECT_EQ(figures.at("metric_101.value"), FigureValue{true});
  // Two metrics slugged alike, and one slugged like a standard metric, go by id only.
  EXPECT_EQ(figures.count("tone.value"), 0u);
  EXPECT_EQ(figures.at("metric_102.value"), FigureValue{std::string("polite")});
  EXPECT_EQ(figures.at("metric_103.value"), FigureValue{std::string("rude")});
  EXPECT_EQ(figures.at("metric_104.value"), FigureValue{3.0});
  EXPECT_EQ(figures.count("latency.value"), 0u);
}

TEST(MetricSlug, LowercasesAndJoinsWords) {
  EXPECT_EQ(MetricSlug("Resolved issue?"), "resolved_issue");
  EXPECT_EQ(MetricSlug("  CSAT -- 2025 "), "csat_2025");
  EXPECT_EQ(MetricSlug("!!"), "");
}

TEST(Evaluate, PassesFailsAndSkips) {
  const Figures figures = FiguresOfCall(CallRecord());
  auto run = [&](absl::string_view text) { return Evaluate(MustParse(text), figures); };
  EXPECT_EQ(run("latency.p95_ms<=1700").kind, Outcome::Kind::kPassed);
  const Outcome over = run("latency.p95_ms<=1500");
  EXPECT_EQ(over.kind, Outcome::Kind::kFailed);
  EXPECT_EQ(over.message, "latency.p95_ms is 1612.4, wanted <= 1500");
  EXPECT_EQ(over.actual, FigureValue{1612.4});
  EXPECT_EQ(run("latency.count==5").kind, Outcome::Kind::kPassed);
  EXPECT_EQ(run("latency.count!=5").kind, Outcome::Kind::kFailed);
  EXPECT_EQ(run("latency.status==completed").kind, Outcome::Kind::kPassed);
  EXPECT_EQ(run("resolved_issue.value==true").kind, Outcome::Kind::kPassed);
  EXPECT_EQ(run("resolved_issue.value==false").kind, Outcome::Kind::kFailed);
  EXPECT_EQ(run("metric_102.value==polite").kind, Outcome::Kind::kPassed);
  // A type that does not fit fails rather than comparing.
  EXPECT_EQ(run("resolved_issue.value>0").kind, Outcome::Kind::kFailed);
  // A metric that did not apply is skipped, unless its status is what is asserted.
  const Outcome skipped = run("stop_time_after_interruption.average_ms<=500");
  EXPECT_EQ(skipped.kind, Outcome::Kind::kSkipped);
  EXPECT_THAT(skipped.message, HasSubstr("not_applicable"));
  EXPECT_EQ(run("stop_time_after_interruption.status==completed").kind, Outcome::Kind::kFailed);
  EXPECT_EQ(run("trigger.value==true").kind, Outcome::Kind::kSkipped);
  // Absent figures and metrics fail, saying which.
  EXPECT_THAT(run("talk_ratio.ai_ratio<1").message, HasSubstr("no metric talk_ratio"));
  EXPECT_THAT(run("latency.p42_ms<1").message, HasSubstr("no figure latency.p42_ms"));
  EXPECT_EQ(run("latency.p42_ms==null").kind, Outcome::Kind::kPassed);
  EXPECT_EQ(run("latency.p95_ms!=null").kind, Outcome::Kind::kPassed);
  EXPECT_EQ(run("latency.p42_ms!=null").kind, Outcome::Kind::kFailed);
}

TEST(AddRunFigures, AddsOutcomeToTheCallFigures) {
  Figures figures = FiguresOfCall(CallRecord());
  AddRunFigures(nlohmann::json::parse(
                    R"({"id": 3, "status": "completed", "passed": false, "end_reason": "max_turns"})"),
                &figures);
  EXPECT_EQ(figures.at("run.passed"), FigureValue{false});
  EXPECT_EQ(figures.at("run.end_reason"), FigureValue{std::string("max_turns")});
  EXPECT_EQ(Evaluate(MustParse("run.passed==true"), figures).kind, Outcome::Kind::kFailed);
  Figures queued;
  AddRunFigures(nlohmann::json::parse(R"({"status": "failed", "error": "x"})"), &queued);
  EXPECT_EQ(queued.at("run.passed"), FigureValue{});
}

GateReport SampleReport() {
  GateReport report;
  report.suite = "callevalctl analyze";
  report.assertions = {MustParse("latency.p95_ms<=1500"), MustParse("latency.count==5"),
                       MustParse("stop_time_after_interruption.average_ms<500")};
  CaseReport slow;
  slow.name = "calls/slow <1>.wav";
  slow.seconds = 3.0;
  slow.figures = FiguresOfCall(CallRecord());
  CaseReport broken;
  broken.name = "calls/broken.wav";
  broken.error = "cannot decode \"x\"";
  broken.seconds = 0.5;
  report.cases = {slow, broken};
  report.EvaluateAll();
  return report;
}

TEST(GateReport, TotalsAndExitCode) {
  GateReport report = SampleReport();
  const GateTotals totals = report.Totals();
  EXPECT_EQ(totals.cases, 2u);
  EXPECT_EQ(totals.errors, 1u);
  EXPECT_EQ(totals.assertions, 3u);
  EXPECT_EQ(totals.passed, 1u);
  EXPECT_EQ(totals.failed, 1u);
  EXPECT_EQ(totals.skipped, 1u);
  EXPECT_EQ(report.ExitCode(), 1);
  report.cases.pop_back();  // no error, one failure
  EXPECT_EQ(report.ExitCode(), 1);
  report.assertions.erase(report.assertions.begin());  // nothing fails
  report.EvaluateAll();
  EXPECT_EQ(report.ExitCode(), 0);
}

TEST(JUnitXml, OneTestcasePerCaseAndAssertion) {
  const std::string xml =
      JUnitXml(SampleReport(), absl::FromCivil(absl::CivilSecond(2026, 11, 28, 3, 4, 5),
                                               absl::UTCTimeZone()));
  EXPECT_THAT(xml, HasSubstr("<testsuites name=\"callevalctl analyze\" tests=\"6\" "
                             "failures=\"1\" errors=\"3\" time=\"3.500\">"));
  EXPECT_THAT(xml, HasSubstr("skipped=\"1\" time=\"3.500\" timestamp=\"2026-11-28T03:04:05\""));
  EXPECT_THAT(xml, HasSubstr("<testcase classname=\"calls/slow &lt;1&gt;.wav\" "
                             "name=\"latency.p95_ms&lt;=1500\" time=\"1.000\">\n"
                             "      <failure type=\"assertion\" message=\"latency.p95_ms is "
                             "1612.4, wanted &lt;= 1500\">"));
  EXPECT_THAT(xml, HasSubstr("name=\"latency.count==5\" time=\"1.000\"/>"));
  EXPECT_THAT(xml, HasSubstr("<skipped message=\"stop_time_after_interruption is "
                             "not_applicable for this call\"/>"));
  EXPECT_THAT(xml, HasSubstr("<error type=\"error\" message=\"cannot decode &quot;x&quot;\">"));
  GateReport bare;
  bare.suite = "s";
  bare.cases.emplace_back().name = "a.wav";
  EXPECT_THAT(JUnitXml(bare, absl::UnixEpoch()),
              HasSubstr("<testcase classname=\"a.wav\" name=\"completed\" time=\"0.000\"/>"));
}

TEST(SummaryJson, HasEveryFigureOutcomeAndTotal) {
  const nlohmann::json summary = SummaryJson(SampleReport());
  EXPECT_EQ(summary["exit_code"], 1);
  EXPECT_EQ(summary["totals"]["failed"], 1);
  EXPECT_EQ(summary["totals"]["errors"], 1);
  EXPECT_EQ(summary["assertions"][0], "latency.p95_ms<=1500");
  const nlohmann::json& slow = summary["cases"][0];
  EXPECT_EQ(slow["name"], "calls/slow <1>.wav");
  EXPECT_EQ(slow["figures"]["latency.p95_ms"], 1612.4);
  EXPECT_EQ(slow["outcomes"][0]["outcome"], "failed");
  EXPECT_EQ(slow["outcomes"][0]["actual"], 1612.4);
  EXPECT_EQ(slow["outcomes"][2]["outcome"], "skipped");
  EXPECT_EQ(summary["cases"][1]["error"], "cannot decode \"x\"");
  EXPECT_TRUE(summary["cases"][1]["outcomes"].empty());
}

TEST(WriteFileAtomically, ReplacesTheFileWhole) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "gate_report.xml");
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second");
  EXPECT_FALSE(WriteFileAtomically("/nonexistent-dir/x.xml", "x").ok());
}

TEST(Progress, PlainLinesOffATerminal) {
  std::ostringstream out;
  Progress progress(&out, 2, /*terminal=*/false);
  progress.Done("a.wav", true);
  progress.Done("b.wav", false);
  progress.Finish();
  EXPECT_EQ(out.str(), "1/2 ok a.wav\n2/2 FAILED b.wav\n");
}

TEST(Progress, OneRedrawnLineOnATerminal) {
  std::ostringstream out;
  Progress progress(&out, 4, /*terminal=*/true);
  progress.Done("a.wav", false);
  progress.Finish();
  EXPECT_THAT(out.str(), HasSubstr("\r[=======>                      ] 1/4  1 failed"));
  EXPECT_EQ(out.str().back(), '\n');
  const std::string printed = out.str();
  EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 1);
}

// The table of standard figures against the analyser: every scalar key a real analysis gives
// can be asserted on, and every key the table accepts is one the analysis gives.
TEST(StandardFigures, MatchWhatTheAnalyserReports) {
  const std::string dir = CALLEVAL_CORPUS_DIR;
  std::ifstream transcript_file(dir + "/interruptions.transcript.json");
  ASSERT_TRUE(transcript_file) << dir;
  const std::string transcript_json(std::istreambuf_iterator<char>(transcript_file), {});
  v1::IngestCallRequest request;
  ASSERT_TRUE(edge::ParseJsonBody("{\"transcript\": " + transcript_json + "}", &request).ok());
  const std::vector<v1::Turn> turns(request.transcript().begin(), request.transcript().end());
  auto analysis = scoring::AnalyzeRecording(dir + "/interruptions.wav", &turns, {});
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  v1::RecordingAnalysis printed;
  for (const auto& m : analysis->standard_metrics) *printed.add_standard_metrics() = m;
  *printed.add_standard_metrics() = scoring::TranscriptionAccuracy(turns, turns);
  const nlohmann::json record = nlohmann::json::parse(edge::PrintJson(printed));

  std::set<std::string> reported;
  for (const nlohmann::json& metric : record["standard_metrics"]) {
    ASSERT_EQ(metric["status"], "completed") << metric.dump();
    for (const auto& [key, value] : metric["result"].items()) {
      if (!value.is_array() && !value.is_object()) {
        reported.insert(metric["standard_metric_key"].get<std::string>() + "." + key);
      }
    }
  }
  ASSERT_EQ(reported.size() > 30, true);
  for (const std::string& figure : reported) {
    EXPECT_TRUE(CheckStandardFigure(MustParse(figure + "==1")).ok()) << figure;
  }
  const Figures figures = FiguresOfCall(record);
  for (const std::string& figure : reported) EXPECT_EQ(figures.count(figure), 1u) << figure;
  // And the other way round, for the metrics the analyser measures (11-12 are judged by an LLM).
  for (const auto& [name, value] : figures) {
    (void)value;
    EXPECT_TRUE(CheckStandardFigure(MustParse(name + "==1")).ok()) << name;
  }
  int table_keys = 0;
  for (absl::string_view metric :
       {"latency", "ai_interruptions", "user_interruptions", "stop_time_after_interruption",
        "silence_detection", "words_per_minute", "transcription_accuracy", "voice_tone_clarity",
        "voice_change_detection", "talk_ratio"}) {
    const absl::Status status =
        CheckStandardFigure(MustParse(absl::StrCat(metric, ".no_such_key==1")));
    // The message lists the table's keys for the metric; each must be reported.
    const std::string message(status.message());
    const std::string keys = message.substr(message.find("(one of ") + 8);
    for (absl::string_view key : absl::StrSplit(absl::StripSuffix(keys, ")"), ", ")) {
      ++table_keys;
      EXPECT_EQ(figures.count(absl::StrCat(metric, ".", key)), 1u) << metric << "." << key;
    }
  }
  EXPECT_GT(table_keys, 30);
}

}  // namespace
}  // namespace calleval::ctl
