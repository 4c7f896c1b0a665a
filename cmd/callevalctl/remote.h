#pragma once

// callevalctl's commands against a running server (docs/operations.md, "Against a server"):
//   calls push MANIFEST.jsonl   ingest many calls, resumably; --wait gates on their results
//   calls export                every call of an agent as CSV or JSON lines
//   runs batch                  a batch of simulated calls as a CI gate
// Exit statuses as for every callevalctl command: 0 success, 1 the work failed or a gate did
// not hold, 2 a usage error (a malformed flag, assertion or manifest line).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cmd/flags.h"
#include "nlohmann/json.hpp"

namespace calleval::ctl {

// The server and the gate flags every remote command shares.
struct RemoteOptions {
  std::string url;  // else CALLEVAL_URL
  std::string key;  // else CALLEVAL_API_KEY
  int64_t workspace = 0;  // client_id; 0: the key's own
  absl::Duration timeout = absl::Minutes(30);  // of --wait
  std::vector<std::string> assertions;
  std::string junit;
  std::string summary;
};

struct PushOptions : RemoteOptions {
  int64_t concurrency = 4;
  bool wait = false;
};

struct ExportOptions : RemoteOptions {
  int64_t agent = 0;
  std::string since;
  std::string until;
  std::string format;
  std::string output;
};

struct BatchOptions : RemoteOptions {
  int64_t agent = 0;
  std::vector<int64_t> scenarios;
  std::string channel;
  int64_t concurrency = 0;  // 0: the server's default
  bool wait = false;
  double min_pass_rate = -1;  // < 0: no gate
  int64_t repeat = 0;         // 0: the server's default (1)
  int64_t baseline = 0;       // 0: none
  // Verdicts of the comparison with the baseline that fail the command (exit 3); implies
  // waiting.
  std::vector<std::string> fail_on;
};

// The exit status of `runs batch` when the comparison's verdict is one of --fail-on.
inline constexpr int kComparisonGateExit = 3;

// The comparison of a batch run with its baseline (GET /api/v1/batch_runs/{id}/comparison) as
// `runs batch` prints it: a line with the verdict, then a table of every figure. Exposed for its
// test.
std::string ComparisonTable(const nlohmann::json& comparison);

const std::vector<cli::Flag<PushOptions>>& PushFlags();
const std::vector<cli::Flag<ExportOptions>>& ExportFlags();
const std::vector<cli::Flag<BatchOptions>>& BatchFlags();

int CallsPush(const std::vector<std::string>& positional, const PushOptions& options);
int CallsExport(const std::vector<std::string>& positional, const ExportOptions& options);
int RunsBatch(const std::vector<std::string>& positional, const BatchOptions& options);

// The CSV columns of `calls export` for calls with these figure names: the fixed columns
// (kExportFixedColumns), then the figures in name order. Exposed for its documentation test.
extern const char* const kExportFixedColumns[];
// A field quoted per RFC 4180 when it holds a comma, a quote, CR or LF (quotes doubled).
std::string CsvField(const std::string& value);

}  // namespace calleval::ctl
