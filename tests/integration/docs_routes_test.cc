// docs/api.md lists every route the protos annotate, and nothing else: the reference cannot
// drift from what is served.

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "calleval/v1/accounts.grpc.pb.h"
#include "calleval/v1/agents.grpc.pb.h"
#include "calleval/v1/calls.grpc.pb.h"
#include "calleval/v1/metrics.grpc.pb.h"
#include "edge/route_table.h"

namespace calleval {
namespace {

TEST(DocsRoutesTest, ApiReferenceMatchesTheProtos) {
  // Through a message of each file, so the generated descriptors are linked in.
  auto table = edge::RouteTable::Build(
      {v1::Workspace::descriptor()->file()->FindServiceByName("Accounts"),
       v1::Agent::descriptor()->file()->FindServiceByName("Agents"),
       v1::Call::descriptor()->file()->FindServiceByName("Calls"),
       v1::UsableMetric::descriptor()->file()->FindServiceByName("Metrics")});
  ASSERT_TRUE(table.ok()) << table.status();
  std::set<std::string> served;
  for (const auto& route : table->routes()) {
    served.insert(absl::StrCat(std::string(edge::HttpMethodName(route->method)), " ",
                               route->path_template, " ",
                               route->method_descriptor->service()->full_name(), "/",
                               route->method_descriptor->name(), " ", route->success_status));
  }

  std::ifstream in(std::string(CALLEVAL_SOURCE_DIR) + "/docs/api.md");
  ASSERT_TRUE(in) << "docs/api.md not found";
  // Rows of the route table: | METHOD | /path | calleval.v1.Service/Method | status |
  std::set<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    for (absl::string_view cell : absl::StrSplit(line, '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    if (cells.size() != 6 || !cells[0].empty() || !absl::StartsWith(cells[3], "calleval.v1.")) {
      continue;
    }
    documented.insert(absl::StrCat(cells[1], " ", cells[2], " ", cells[3], " ", cells[4]));
  }
  for (const auto& r : served) EXPECT_TRUE(documented.count(r)) << "not in docs/api.md: " << r;
  for (const auto& r : documented) EXPECT_TRUE(served.count(r)) << "not served: " << r;
}

}  // namespace
}  // namespace calleval
