#include "services/scoring/scoring_worker.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/errors.h"
#include "common/standard_metrics.h"
#include "services/scoring/analysis.h"

namespace calleval::scoring {
namespace {

// metadata.channel_map = {"agent": 0|1, "user": 0|1} (SPEC §3); anything else: the default.
ChannelMap ChannelMapOf(const google::protobuf::Struct& metadata) {
  ChannelMap map;
  auto it = metadata.fields().find("channel_map");
  if (it == metadata.fields().end() || !it->second.has_struct_value()) return map;
  const auto& fields = it->second.struct_value().fields();
  auto channel = [&](const char* key, int fallback) {
    auto f = fields.find(key);
    if (f == fields.end() || !f->second.has_number_value()) return fallback;
    double v = f->second.number_value();
    return v == 0 || v == 1 ? static_cast<int>(v) : fallback;
  };
  ChannelMap parsed{channel("agent", 0), channel("user", 1)};
  return parsed.agent != parsed.user ? parsed : map;
}

v1::StandardMetricResult LlmUnavailable(int64_t id) {
  const StandardMetricInfo* info = FindStandardMetric(id);
  v1::StandardMetricResult r;
  r.set_metric_id(id);
  r.set_standard_metric_key(std::string(info->key));
  r.set_name(std::string(info->name));
  r.set_status("failed");
  r.mutable_result();
  r.set_error("llm_unavailable");
  return r;
}

bool Planned(const calls::AnalysisJob& job, int64_t id) {
  for (int64_t p : job.planned_metric_ids) {
    if (p == id) return true;
  }
  return false;
}

}  // namespace

JobOutcome ScoreJob(const calls::AnalysisJob& job) {
  JobOutcome out;
  if (job.observation_type == "voice") {
    AnalysisOptions options;
    options.channel_map = ChannelMapOf(job.metadata);
    options.silence_threshold_ms = job.silence_threshold_ms;
    absl::StatusOr<AnalysisResult> analysis = AnalyzeRecording(
        job.recording_path, job.transcript.empty() ? nullptr : &job.transcript, options);
    if (!analysis.ok()) {
      out.status = analysis.status();
      const std::string code = ErrorInfoOf(analysis.status()).code();
      out.failure_reason = code == "unsupported_audio" ? code : "analysis_failed";
      return out;
    }
    out.duration_s = analysis->duration_seconds;
    for (auto& m : analysis->standard_metrics) {
      if (Planned(job, m.metric_id())) out.results.push_back(std::move(m));
    }
  }
  // The transcript-judged standard metrics need the LLM provider (the LLM work).
  for (const StandardMetricInfo& m : kStandardMetrics) {
    if (!m.requires_audio && Planned(job, m.id)) out.results.push_back(LlmUnavailable(m.id));
  }
  return out;
}

void ScoringWorkers::Start() {
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { Loop(); });
}

void ScoringWorkers::Notify() {
  absl::MutexLock lock(&mu_);
  ++wakeups_;
}

void ScoringWorkers::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ScoringWorkers::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    auto job = queue_->Lease();
    if (!job.ok()) {
      std::cerr << "scoring: lease failed: " << job.status() << "\n";
    } else if (job->has_value()) {
      const calls::AnalysisJob& leased = **job;
      JobOutcome outcome = ScoreJob(leased);
      absl::Status reported =
          outcome.status.ok()
              ? queue_->Record(leased, outcome.duration_s, outcome.results)
              : queue_->Fail(leased, outcome.failure_reason, outcome.status.message());
      if (!reported.ok()) {
        std::cerr << "scoring: call " << leased.call_id << ": " << reported << "\n";
      }
      continue;
    }
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || wakeups_ > 0; };
    mu_.AwaitWithTimeout(absl::Condition(&woken), options_.poll_interval);
    if (wakeups_ > 0) --wakeups_;
  }
}

}  // namespace calleval::scoring
