#pragma once

// `callevalctl analyze`: the audio pass of the scoring service on recordings, offline. One FILE
// prints the call record's {"duration_seconds", "standard_metrics"}; many (arguments, globs, a
// JSONL manifest) are analysed in parallel and checked against assertions, for CI
// (docs/operations.md §2).

#include <string>
#include <vector>

#include "cmd/callevalctl/gate.h"
#include "cmd/flags.h"
#include "services/scoring/timeline.h"

namespace calleval::ctl {

struct AnalyzeOptions {
  // A transcript file, "auto" (<name>.transcript.json beside each <name>.<ext>), or empty.
  std::string transcript;
  scoring::ChannelMap channel_map;
  std::string stt = "pocketsphinx";
  std::string manifest;  // JSONL: one input per line
  int jobs = 0;          // 0: one per core
  std::vector<Assertion> assertions;
  std::string junit;    // JUnit XML report path
  std::string summary;  // JSON summary path
};

const std::vector<cli::Flag<AnalyzeOptions>>& AnalyzeFlags();

// Runs the command on its positional arguments (files and globs); returns the exit status:
// 0 when every input was analysed and every assertion holds, 1 otherwise, 2 for usage errors.
int Analyze(const std::vector<std::string>& positional, const AnalyzeOptions& options);

}  // namespace calleval::ctl
