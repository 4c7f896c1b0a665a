#pragma once

// The `context` a code judge sees (docs/api.md §6), built from a call record, its transcript, the
// standard metrics' results and the LLM metrics that ran before it. Pure functions.

#include <vector>

#include "calleval/v1/calls.pb.h"
#include "google/protobuf/struct.pb.h"
#include "nlohmann/json.hpp"

namespace calleval::judges {

// {call, transcript, transcript_text, silence, latency, interruptions: {ai, user},
//  words_per_minute, standard_metrics: {key: result}, metric_results: {name: {value,
//  explanation}}, agent: {id, name, agent_source}}.
// `call` gives the scalar fields and metadata (its lists are not read); `standard` the
// standard results available (a result whose status is failed or pending counts as absent).
// On text calls silence, latency, interruptions and words_per_minute are null.
nlohmann::json BuildCodeContext(const v1::Call& call, const std::vector<v1::Turn>& transcript,
                                const std::vector<v1::StandardMetricResult>& standard,
                                const std::vector<v1::MetricResult>& metric_results,
                                const v1::JobAgent& agent);

// Protobuf Struct values as JSON and back. Integral numbers print as integers (a count is 3,
// not 3.0, in the code's eyes).
nlohmann::json ToJson(const google::protobuf::Value& value);
nlohmann::json ToJson(const google::protobuf::Struct& value);
google::protobuf::Value FromJson(const nlohmann::json& json);

}  // namespace calleval::judges
