#pragma once

// The agents side's stores and the in-process directories the other stores are built with, as
// cmd/calleval/server.cc builds them when the roles share a process (docs/architecture.md,
// "Who owns which table"), for store suites that need runs or scenarios.

#include "common/database.h"
#include "services/agents/agents_store.h"
#include "services/agents/in_process_scenario_directory.h"
#include "services/agents/scenarios_store.h"
#include "services/metrics/in_process_metric_directory.h"

namespace calleval::testing {

struct InProcessDirectories {
  explicit InProcessDirectories(db::Database* db)
      : agents(db),
        metric_directory(db),
        scenarios(db, &metric_directory),
        scenario_directory(&agents, &scenarios) {}

  agents::AgentsStore agents;
  metrics::InProcessMetricDirectory metric_directory;  // for `scenarios`
  agents::ScenariosStore scenarios;
  agents::InProcessScenarioDirectory scenario_directory;  // for a runs::RunsStore
};

}  // namespace calleval::testing
