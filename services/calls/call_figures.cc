#include "services/calls/call_figures.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace calleval::calls {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int kFineBins = 100;   // 0-1000 ms, 10 ms each
constexpr int kMiddleBins = 80;  // 1000-5000 ms, 50 ms each
constexpr int kCoarseBins = 60;  // 5000-20000 ms, 250 ms each
constexpr int kOpenBin = kFineBins + kMiddleBins + kCoarseBins;

std::optional<double> Number(const Struct& s, const char* key) {
  auto it = s.fields().find(key);
  if (it == s.fields().end() || it->second.kind_case() != Value::kNumberValue) return std::nullopt;
  return it->second.number_value();
}

std::optional<int64_t> Count(const Struct& s, const char* key) {
  std::optional<double> n = Number(s, key);
  if (!n.has_value()) return std::nullopt;
  return static_cast<int64_t>(std::llround(*n));
}

std::string FormatNumber(double v) { return absl::StrFormat("%g", v); }

}  // namespace

int LatencyBin(double ms) {
  if (!(ms > 0)) return 0;  // also NaN
  if (ms < 1000) return static_cast<int>(ms / 10);
  if (ms < 5000) return kFineBins + static_cast<int>((ms - 1000) / 50);
  if (ms < 20000) return kFineBins + kMiddleBins + static_cast<int>((ms - 5000) / 250);
  return kOpenBin;
}

double LatencyBinLower(int bin) {
  if (bin < kFineBins) return bin * 10.0;
  if (bin < kFineBins + kMiddleBins) return 1000.0 + (bin - kFineBins) * 50.0;
  if (bin < kOpenBin) return 5000.0 + (bin - kFineBins - kMiddleBins) * 250.0;
  return 20000.0;
}

double LatencyBinUpper(int bin) {
  return bin >= kOpenBin ? LatencyBinLower(kOpenBin) : LatencyBinLower(bin + 1);
}

std::optional<double> HistogramPercentile(const LatencyHistogram& histogram, double p) {
  int64_t total = 0;
  for (const auto& [bin, turns] : histogram) total += std::max<int64_t>(turns, 0);
  if (total == 0) return std::nullopt;
  // The rank between order statistics, as for one call's turns; the i-th of a bin's k turns
  // sits at the middle of the i-th of k equal slices of the bin.
  const double rank = (total - 1) * p / 100.0;
  const auto value_at = [&](int64_t index) {
    int64_t before = 0;
    for (const auto& [bin, turns] : histogram) {
      if (turns <= 0) continue;
      if (index < before + turns) {
        const double lower = LatencyBinLower(bin);
        const double width = LatencyBinUpper(bin) - lower;
        return lower + width * (static_cast<double>(index - before) + 0.5) / turns;
      }
      before += turns;
    }
    return LatencyBinLower(histogram.rbegin()->first);
  };
  const auto floor_index = static_cast<int64_t>(std::floor(rank));
  const auto ceil_index = static_cast<int64_t>(std::ceil(rank));
  const double low = value_at(floor_index);
  return low + (value_at(ceil_index) - low) * (rank - static_cast<double>(floor_index));
}

bool CallFigures::Any() const {
  return latency_turns > 0 || latency_mean_ms.has_value() || ai_interruptions.has_value() ||
         user_interruptions.has_value() || silences.has_value() || talk_ratio.has_value() ||
         ai_wpm.has_value() || user_wpm.has_value();
}

CallFigures ExtractCallFigures(const std::vector<v1::StandardMetricResult>& results) {
  CallFigures f;
  for (const v1::StandardMetricResult& r : results) {
    if (r.status() != "completed") continue;
    const Struct& s = r.result();
    switch (r.metric_id()) {
      case 1: {  // latency
        f.latency_mean_ms = Number(s, "average_ms");
        f.latency_p50_ms = Number(s, "p50_ms");
        f.latency_p95_ms = Number(s, "p95_ms");
        f.latency_max_ms = Number(s, "max_ms");
        auto turns = s.fields().find("turns");
        if (turns != s.fields().end() && turns->second.has_list_value()) {
          for (const Value& turn : turns->second.list_value().values()) {
            if (!turn.has_struct_value()) continue;
            std::optional<double> ms = Number(turn.struct_value(), "latency_ms");
            if (!ms.has_value()) continue;
            ++f.latency_turns;
            ++f.latency_bins[LatencyBin(*ms)];
          }
        }
        break;
      }
      case 2:
        f.ai_interruptions = Count(s, "count");
        break;
      case 3:
        f.user_interruptions = Count(s, "count");
        break;
      case 5:
        f.silences = Count(s, "count");
        f.silence_total_ms = Number(s, "total_ms");
        break;
      case 6:
        f.ai_wpm = Number(s, "ai_wpm");
        f.user_wpm = Number(s, "user_wpm");
        break;
      case 10:
        f.talk_ratio = Number(s, "ai_ratio");
        break;
      default:
        break;
    }
  }
  return f;
}

MetricRow MetricRowOf(const v1::StandardMetricResult& result) {
  MetricRow row;
  row.metric_id = result.metric_id();
  row.status = result.status();
  if (result.has_score()) {
    row.score = result.score();
    row.value_number = result.score();
  }
  row.credits_used = result.credits_used();
  return row;
}

MetricRow MetricRowOf(const v1::MetricResult& result) {
  MetricRow row;
  row.metric_id = result.metric_id();
  row.status = result.status();
  row.credits_used = result.credits_used();
  const Value& v = result.value();
  std::optional<std::string> plain;
  switch (v.kind_case()) {
    case Value::kNumberValue:
      row.value_number = v.number_value();
      row.score = v.number_value();
      break;
    case Value::kBoolValue:
      row.value_number = v.bool_value() ? 1.0 : 0.0;
      plain = v.bool_value() ? "true" : "false";
      break;
    case Value::kStringValue:
      row.value_text = v.string_value();
      plain = v.string_value();
      break;
    default:
      break;
  }
  if (result.status() != "completed") {
    row.outcome = result.status();
  } else if (result.has_structured_output() &&
             result.structured_output().has_outcome_classification()) {
    row.outcome = result.structured_output().outcome_classification();
  } else if (plain.has_value()) {
    row.outcome = *plain;
  } else if (row.value_number.has_value() && result.result_type() == "rating") {
    row.outcome = FormatNumber(*row.value_number);
  } else {
    row.outcome = "completed";
  }
  return row;
}

}  // namespace calleval::calls
