#include "services/metrics/metrics_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/database.h"
#include "common/errors.h"
#include "common/schema.h"
#include "common/standard_metrics.h"
#include "services/accounts/accounts_store.h"
#include "services/agents/agents_store.h"
#include "services/agents/in_process_agent_directory.h"
#include "services/agents/scenarios_store.h"
#include "services/metrics/in_process_metric_directory.h"
#include "tests/support/test_database.h"

namespace calleval::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

std::vector<std::string> ErrorFields(const absl::Status& status) {
  const v1::ErrorInfo info = ErrorInfoOf(status);
  std::vector<std::string> fields;
  for (const auto& d : info.details()) fields.push_back(d.field());
  return fields;
}

std::string ErrorCode(const absl::Status& status) { return ErrorInfoOf(status).code(); }

v1::StructuredOutputRule Rule(std::string condition, std::string expected, std::string outcome) {
  v1::StructuredOutputRule r;
  r.set_condition(condition);
  r.set_set_metrics_name("Outcome");
  r.set_as_metrics_expected_value(expected);
  r.set_outcome_classification(outcome);
  return r;
}

v1::EvaluationTrigger Trigger(std::string type) {
  v1::EvaluationTrigger t;
  t.set_type(type);
  return t;
}

// A request body as the edge's JSON codec builds it: every key with a value is in set_fields.
class Body {
 public:
  Body& Name(std::string v) {
    return Set("name", [&] { f_.set_name(v); });
  }
  Body& Description(std::string v) {
    return Set("description", [&] { f_.set_description(v); });
  }
  Body& Type(std::string v) {
    return Set("metrics_type", [&] { f_.set_metrics_type(v); });
  }
  Body& Result(std::string v) {
    return Set("result_type", [&] { f_.set_result_type(v); });
  }
  Body& Enum(std::vector<std::string> v) {
    return Set("enum_values", [&] {
      f_.clear_enum_values();
      for (auto& s : v) f_.add_enum_values(s);
    });
  }
  Body& Instructions(std::string v) {
    return Set("llm_instructions", [&] { f_.set_llm_instructions(v); });
  }
  Body& Code(std::string v) {
    return Set("code_snippet", [&] { f_.set_code_snippet(v); });
  }
  Body& Phrases(std::vector<std::string> v) {
    return Set("phrases", [&] {
      f_.clear_phrases();
      for (auto& s : v) f_.add_phrases(s);
    });
  }
  Body& Match(std::string v) {
    return Set("match", [&] { f_.set_match(v); });
  }
  Body& Speaker(std::string v) {
    return Set("speaker", [&] { f_.set_speaker(v); });
  }
  Body& CaseSensitive(bool v) {
    return Set("case_sensitive", [&] { f_.set_case_sensitive(v); });
  }
  Body& Permitted(std::vector<std::string> v) {
    return Set("permitted_options", [&] {
      f_.clear_permitted_options();
      for (auto& s : v) f_.add_permitted_options(s);
    });
  }
  Body& Forbidden(std::vector<std::string> v) {
    return Set("forbidden_options", [&] {
      f_.clear_forbidden_options();
      for (auto& s : v) f_.add_forbidden_options(s);
    });
  }
  Body& Global(bool v) {
    return Set("mark_as_global", [&] { f_.set_mark_as_global(v); });
  }
  Body& Agents(std::vector<int64_t> v) {
    return Set("agent_ids", [&] {
      f_.clear_agent_ids();
      for (int64_t id : v) f_.add_agent_ids(id);
    });
  }
  Body& Scenarios(std::vector<int64_t> v) {
    return Set("scenario_ids", [&] {
      f_.clear_scenario_ids();
      for (int64_t id : v) f_.add_scenario_ids(id);
    });
  }
  Body& WithTrigger(v1::EvaluationTrigger t) {
    return Set("evaluation_trigger", [&] { *f_.mutable_evaluation_trigger() = t; });
  }
  Body& Rules(std::vector<v1::StructuredOutputRule> rules) {
    return Set("structured_output", [&] {
      f_.clear_structured_output();
      for (auto& r : rules) *f_.add_structured_output() = r;
    });
  }
  Body& Cost(int64_t v) {
    return Set("credit_cost", [&] { f_.set_credit_cost(v); });
  }
  Body& Null(std::string key) {
    f_.add_null_fields(key);
    return *this;
  }
  v1::MetricFields& raw() { return f_; }

  const v1::MetricFields& fields() const { return f_; }
  operator const v1::MetricFields&() const { return f_; }  // NOLINT: reads like the JSON body

 private:
  template <typename Fn>
  Body& Set(const std::string& key, Fn fn) {
    fn();
    if (std::find(f_.set_fields().begin(), f_.set_fields().end(), key) == f_.set_fields().end()) {
      f_.add_set_fields(key);
    }
    return *this;
  }
  v1::MetricFields f_;
};

Body Llm(std::string name) {
  return std::move(
      Body().Name(name).Type("custom_evaluation").Instructions("Did the agent greet the caller?"));
}
Body Phrase(std::string name) {
  return std::move(Body().Name(name).Type("specific_text_/_phrase_check").Phrases({"hello"}));
}
Body Options(std::string name) {
  return std::move(Body().Name(name).Type("permitted_options_check").Permitted({"refund"}));
}
Body CodeJudge(std::string name) {
  return std::move(Body().Name(name).Type("code_as_judge").Code("metric['result'] = True\n"));
}

// Every case on a SQLite file and on PostgreSQL.
class MetricsStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  void SetUp() override {
    db::Database::Options options;
    options.synchronous_full = false;
    auto database =
        calleval::testing::TestDatabase::Create(GetParam(), SchemaMigrations(), options);
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
    db_ = database_->Release();
    accounts::AccountsStore accounts(db_.get());
    auto ws = accounts.CreateWorkspace("one", 0);
    ASSERT_TRUE(ws.ok()) << ws.status();
    ws_ = ws->id;
    auto other = accounts.CreateWorkspace("two", 0);
    ASSERT_TRUE(other.ok()) << other.status();
    other_ws_ = other->id;
    agents_ = std::make_unique<agents::AgentsStore>(db_.get());
    metric_directory_ = std::make_unique<InProcessMetricDirectory>(db_.get());
    scenarios_ = std::make_unique<agents::ScenariosStore>(db_.get(), metric_directory_.get());
    directory_ = std::make_unique<agents::InProcessAgentDirectory>(agents_.get(), scenarios_.get());
    store_ = std::make_unique<MetricsStore>(db_.get(), directory_.get());
    agent_a_ = MakeAgent(ws_, "A");
    agent_b_ = MakeAgent(ws_, "B");
    other_agent_ = MakeAgent(other_ws_, "Other");
    // Scenarios 1, 3, 4 and 9 of workspace one, 20 of workspace two, for scenario_ids.
    ASSERT_TRUE(db_->Write([&](db::Connection& c) -> absl::Status {
                     for (auto [id, ws, agent] : {std::tuple{1, ws_, agent_a_},
                                                  {3, ws_, agent_a_},
                                                  {4, ws_, agent_a_},
                                                  {9, ws_, agent_b_},
                                                  {20, other_ws_, other_agent_}}) {
                       auto insert = c.Prepare(
                           "INSERT INTO scenarios (id, workspace_id, agent_id, name, goal, "
                           "max_turns, created_at, updated_at) VALUES (?, ?, ?, 's', 'g', 20, "
                           "'t', 't')");
                       if (!insert.ok()) return insert.status();
                       insert->Bind(1, static_cast<int64_t>(id)).Bind(2, ws).Bind(3, agent);
                       if (absl::Status s = insert->Run(); !s.ok()) return s;
                     }
                     return absl::OkStatus();
                   })
                    .ok());
  }

  void TearDown() override {
    store_.reset();
    directory_.reset();
    scenarios_.reset();
    agents_.reset();
    db_.reset();
    database_.reset();
  }

  int64_t MakeAgent(int64_t ws, std::string name) {
    v1::AgentFields f;
    f.set_name(name);
    f.set_phone_number("+16502530000");
    f.set_language_id(1);
    f.set_instructions("Be kind.");
    auto agent = agents_->Create(ws, f);
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? agent->id() : 0;
  }

  v1::Metric MustCreate(const v1::MetricFields& fields, int64_t ws = 0) {
    auto metric = store_->Create(ws ? ws : ws_, fields);
    EXPECT_TRUE(metric.ok()) << metric.status();
    return metric.ok() ? *metric : v1::Metric();
  }

  std::vector<int64_t> DisabledOf(int64_t agent_id, int64_t ws = 0) {
    auto agent = agents_->Get(ws ? ws : ws_, agent_id);
    EXPECT_TRUE(agent.ok()) << agent.status();
    if (!agent.ok()) return {};
    return {agent->disabled_metric_ids().begin(), agent->disabled_metric_ids().end()};
  }

  static void ExpectInvalid(const absl::Status& status, std::vector<std::string> fields,
                            std::string code = "validation_failed") {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(HttpStatusFor(status), 422);
    EXPECT_EQ(ErrorCode(status), code) << status;
    EXPECT_EQ(ErrorFields(status), fields) << status;
  }

  static std::vector<int64_t> Ids(const google::protobuf::RepeatedPtrField<v1::Metric>& ms) {
    std::vector<int64_t> ids;
    for (const auto& m : ms) ids.push_back(m.id());
    return ids;
  }

  v1::ListMetricsResponse MustList(v1::ListMetricsRequest request) {
    auto r = store_->List(ws_, request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::ListMetricsResponse();
  }

  // The rows of link table `table` whose `column` is `id`, as stored.
  int64_t LinkRows(const std::string& table, const std::string& column, int64_t id) {
    auto count = db::ReadResult<int64_t>(*db_, [&](db::Connection& c) -> absl::StatusOr<int64_t> {
      auto stmt =
          c.Prepare(absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE ", column, " = ?"));
      if (!stmt.ok()) return stmt.status();
      stmt->Bind(1, id);
      absl::StatusOr<bool> row = stmt->Step();
      if (!row.ok()) return row.status();
      return *row ? stmt->Int64(0) : -1;
    });
    EXPECT_TRUE(count.ok()) << count.status();
    return count.ok() ? *count : -1;
  }

  std::unique_ptr<calleval::testing::TestDatabase> database_;
  std::unique_ptr<db::Database> db_;
  std::unique_ptr<agents::AgentsStore> agents_;
  std::unique_ptr<InProcessMetricDirectory> metric_directory_;
  std::unique_ptr<agents::ScenariosStore> scenarios_;
  std::unique_ptr<agents::InProcessAgentDirectory> directory_;
  std::unique_ptr<MetricsStore> store_;
  int64_t ws_ = 0;
  int64_t other_ws_ = 0;
  int64_t agent_a_ = 0;
  int64_t agent_b_ = 0;
  int64_t other_agent_ = 0;
};

// ---- create: shapes and defaults ----

TEST_P(MetricsStoreTest, CreateCustomEvaluationWithDefaults) {
  v1::Metric m = MustCreate(Llm("Greeting"));
  EXPECT_EQ(m.id(), kFirstCustomMetricId);
  EXPECT_EQ(m.client_id(), ws_);
  EXPECT_EQ(m.name(), "Greeting");
  EXPECT_FALSE(m.has_description());
  EXPECT_EQ(m.metrics_type(), "custom_evaluation");
  EXPECT_EQ(m.result_type(), "boolean");
  EXPECT_FALSE(m.has_standard_metric_key());
  EXPECT_TRUE(m.is_custom());
  EXPECT_EQ(m.scope(), "agent");
  EXPECT_FALSE(m.mark_as_global());
  EXPECT_FALSE(m.requires_audio());
  EXPECT_THAT(m.agent_ids(), IsEmpty());
  EXPECT_THAT(m.scenario_ids(), IsEmpty());
  EXPECT_EQ(m.evaluation_trigger().type(), "always");
  EXPECT_THAT(m.structured_output(), IsEmpty());
  EXPECT_THAT(m.enum_values(), IsEmpty());
  EXPECT_EQ(m.llm_instructions(), "Did the agent greet the caller?");
  EXPECT_FALSE(m.has_code_snippet());
  EXPECT_THAT(m.phrases(), IsEmpty());
  EXPECT_FALSE(m.has_match());
  EXPECT_FALSE(m.has_speaker());
  EXPECT_FALSE(m.has_case_sensitive());
  EXPECT_EQ(m.credit_cost(), kLlmMetricCost);
  EXPECT_TRUE(absl::EndsWith(m.created_at(), "Z")) << m.created_at();
  EXPECT_EQ(m.created_at().substr(10, 1), "T");
  EXPECT_EQ(m.created_at(), m.updated_at());

  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), m.SerializeAsString());
}

TEST_P(MetricsStoreTest, IdsStartAt101AndAreNeverReused) {
  EXPECT_EQ(MustCreate(Llm("one")).id(), 101);
  EXPECT_EQ(MustCreate(Llm("two")).id(), 102);
  EXPECT_EQ(MustCreate(Llm("three"), other_ws_).id(), 103);
  ASSERT_TRUE(store_->Delete(ws_, 102).ok());
  EXPECT_EQ(MustCreate(Llm("four")).id(), 104);
}

TEST_P(MetricsStoreTest, CreatePhraseCheckDefaultsAndIgnoresOtherTypesFields) {
  v1::Metric m = MustCreate(Phrase("Says hello")
                                .Instructions("ignored")
                                .Code("ignored")
                                .Permitted({"ignored"})
                                .Forbidden({"ignored"}));
  EXPECT_EQ(m.metrics_type(), "specific_text_/_phrase_check");
  EXPECT_EQ(m.result_type(), "boolean");
  EXPECT_THAT(m.phrases(), ElementsAre("hello"));
  EXPECT_EQ(m.match(), "any");
  EXPECT_EQ(m.speaker(), "AI Assistant");
  ASSERT_TRUE(m.has_case_sensitive());
  EXPECT_FALSE(m.case_sensitive());
  EXPECT_FALSE(m.has_llm_instructions());
  EXPECT_FALSE(m.has_code_snippet());
  EXPECT_THAT(m.permitted_options(), IsEmpty());
  EXPECT_THAT(m.forbidden_options(), IsEmpty());
  EXPECT_EQ(m.credit_cost(), kDeterministicMetricCost);

  v1::Metric all = MustCreate(Phrase("All of them")
                                  .Phrases({"hi", "bye"})
                                  .Match("all")
                                  .Speaker("User")
                                  .CaseSensitive(true)
                                  .Result("boolean"));
  EXPECT_THAT(all.phrases(), ElementsAre("hi", "bye"));
  EXPECT_EQ(all.match(), "all");
  EXPECT_EQ(all.speaker(), "User");
  EXPECT_TRUE(all.case_sensitive());
}

TEST_P(MetricsStoreTest, CreatePermittedOptionsCheck) {
  v1::Metric m = MustCreate(Options("Offers")
                                .Permitted({"refund", "credit"})
                                .Forbidden({"cash"})
                                .Speaker("any")
                                .Phrases({"ignored"})
                                .Match("all"));
  EXPECT_EQ(m.metrics_type(), "permitted_options_check");
  EXPECT_THAT(m.permitted_options(), ElementsAre("refund", "credit"));
  EXPECT_THAT(m.forbidden_options(), ElementsAre("cash"));
  EXPECT_EQ(m.speaker(), "any");
  EXPECT_THAT(m.phrases(), IsEmpty());
  EXPECT_FALSE(m.has_match());
  EXPECT_FALSE(m.has_case_sensitive());
  EXPECT_EQ(m.credit_cost(), 1);

  v1::Metric defaults = MustCreate(Options("Offers 2"));
  EXPECT_EQ(defaults.speaker(), "AI Assistant");
  EXPECT_THAT(defaults.forbidden_options(), IsEmpty());
}

TEST_P(MetricsStoreTest, CreateCodeAsJudge) {
  v1::Metric m = MustCreate(CodeJudge("Long silences").Result("numeric").Instructions("ignored"));
  EXPECT_EQ(m.metrics_type(), "code_as_judge");
  EXPECT_EQ(m.result_type(), "numeric");
  EXPECT_EQ(m.code_snippet(), "metric['result'] = True\n");
  EXPECT_FALSE(m.has_llm_instructions());
  EXPECT_EQ(m.credit_cost(), kDeterministicMetricCost);
}

TEST_P(MetricsStoreTest, CreateEnumMetricWithRulesTriggerAndEverything) {
  v1::Metric m = MustCreate(Llm("  Mood  ")
                                .Description("How the caller felt")
                                .Result("enum")
                                .Enum({"happy", "sad"})
                                .Rules({Rule("equals", "happy", "meets_expectations"),
                                        Rule("equals", "sad", "requires_attention")})
                                .Global(true)
                                .Agents({agent_b_, agent_a_, agent_b_})
                                .Scenarios({9, 3, 9})
                                .Cost(0));
  EXPECT_EQ(m.name(), "Mood");  // stored trimmed
  EXPECT_EQ(m.description(), "How the caller felt");
  EXPECT_EQ(m.result_type(), "enum");
  EXPECT_THAT(m.enum_values(), ElementsAre("happy", "sad"));
  ASSERT_EQ(m.structured_output_size(), 2);
  EXPECT_EQ(m.structured_output(1).outcome_classification(), "requires_attention");
  EXPECT_TRUE(m.mark_as_global());
  EXPECT_EQ(m.scope(), "global");
  EXPECT_THAT(m.agent_ids(), ElementsAre(agent_a_, agent_b_));
  EXPECT_THAT(m.scenario_ids(), ElementsAre(3, 9));
  EXPECT_EQ(m.credit_cost(), 0);

  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), m.SerializeAsString());
}

TEST_P(MetricsStoreTest, TriggersKeepOnlyTheirOwnFields) {
  v1::EvaluationTrigger phrase = Trigger("phrase");
  phrase.add_phrases("cancel");
  phrase.set_prompt("ignored");
  v1::Metric a = MustCreate(Llm("a").WithTrigger(phrase));
  EXPECT_EQ(a.evaluation_trigger().type(), "phrase");
  EXPECT_THAT(a.evaluation_trigger().phrases(), ElementsAre("cancel"));
  EXPECT_FALSE(a.evaluation_trigger().has_prompt());

  v1::EvaluationTrigger code = Trigger("code");
  code.set_code_snippet("metric['result'] = True");
  code.add_phrases("ignored");
  v1::Metric b = MustCreate(Llm("b").WithTrigger(code));
  EXPECT_EQ(b.evaluation_trigger().code_snippet(), "metric['result'] = True");
  EXPECT_THAT(b.evaluation_trigger().phrases(), IsEmpty());

  v1::EvaluationTrigger llm = Trigger("llm");
  llm.set_prompt("Was a refund discussed?");
  v1::Metric c = MustCreate(Llm("c").WithTrigger(llm));
  EXPECT_EQ(c.evaluation_trigger().prompt(), "Was a refund discussed?");

  v1::Metric d = MustCreate(Llm("d").WithTrigger(v1::EvaluationTrigger()));
  EXPECT_EQ(d.evaluation_trigger().type(), "always");

  auto got = store_->Get(ws_, a.id());
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(got->evaluation_trigger().phrases(), ElementsAre("cancel"));
}

TEST_P(MetricsStoreTest, ReadOnlyKeysInTheBodyAreIgnored) {
  Body body = Llm("x");
  body.raw().set_id(5);
  body.raw().set_standard_metric_key("latency");
  body.raw().set_is_custom(false);
  body.raw().set_scope("global");
  v1::Metric m = MustCreate(body);
  EXPECT_EQ(m.id(), 101);
  EXPECT_FALSE(m.has_standard_metric_key());
  EXPECT_TRUE(m.is_custom());
  EXPECT_EQ(m.scope(), "agent");
}

TEST_P(MetricsStoreTest, LimitsAtTheirMaximumAreAccepted) {
  std::string name;
  for (int i = 0; i < 255; ++i) name += "é";  // 255 characters, 510 bytes
  MustCreate(Llm(name));
  MustCreate(CodeJudge("big").Code(std::string(100000, '#')));
  MustCreate(Llm("long").Instructions(std::string(20000, 'x')));
  std::vector<std::string> enum_values;
  for (int i = 0; i < 50; ++i) enum_values.push_back(absl::StrCat("v", i));
  MustCreate(Llm("enum50").Result("enum").Enum(enum_values));
  std::vector<std::string> phrases(100, "p");
  MustCreate(Phrase("p100").Phrases(phrases));
  std::vector<v1::StructuredOutputRule> rules(20, Rule("equals", "true", "meets_expectations"));
  MustCreate(Llm("rules20").Rules(rules));
  MustCreate(Llm("cost").Cost(1000));
}

// ---- create: validation ----

struct InvalidCase {
  std::string label;
  Body body;
  std::vector<std::string> fields;
};

TEST_P(MetricsStoreTest, CreateRejectsEveryInvalidFieldWithItsName) {
  std::vector<std::string> many_values;
  for (int i = 0; i < 51; ++i) many_values.push_back(absl::StrCat("v", i));
  std::vector<v1::StructuredOutputRule> many_rules(21,
                                                   Rule("equals", "true", "meets_expectations"));
  v1::EvaluationTrigger untyped;
  untyped.add_phrases("x");

  const std::vector<InvalidCase> cases = {
      {"empty body", Body(), {"name", "metrics_type"}},
      {"blank name", Llm("   "), {"name"}},
      {"name too long", Llm(std::string(256, 'n')), {"name"}},
      {"standard type", Body().Name("x").Type("standard"), {"metrics_type"}},
      {"unknown type", Body().Name("x").Type("llm"), {"metrics_type"}},
      {"unknown result type", Llm("x").Result("text"), {"result_type"}},
      {"empty result type", Llm("x").Result(""), {"result_type"}},
      {"phrase check not boolean", Phrase("x").Result("numeric"), {"result_type"}},
      {"options check not boolean", Options("x").Result("enum").Enum({"a"}), {"result_type"}},
      {"enum without values", Llm("x").Result("enum"), {"enum_values"}},
      {"too many enum values", Llm("x").Result("enum").Enum(many_values), {"enum_values"}},
      {"bad enum values",
       Llm("x").Result("enum").Enum({"a", " ", "A", std::string(256, 'v')}),
       {"enum_values[1]", "enum_values[2]", "enum_values[3]"}},
      {"enum values for boolean", Llm("x").Enum({"a"}), {"enum_values"}},
      {"enum values for rating", CodeJudge("x").Result("rating").Enum({"a"}), {"enum_values"}},
      {"no instructions", Body().Name("x").Type("custom_evaluation"), {"llm_instructions"}},
      {"blank instructions", Llm("x").Instructions(" \n"), {"llm_instructions"}},
      {"instructions too long",
       Llm("x").Instructions(std::string(20001, 'i')),
       {"llm_instructions"}},
      {"no phrases", Body().Name("x").Type("specific_text_/_phrase_check"), {"phrases"}},
      {"too many phrases", Phrase("x").Phrases(std::vector<std::string>(101, "p")), {"phrases"}},
      {"bad phrases",
       Phrase("x").Phrases({"ok", "", std::string(501, 'p')}),
       {"phrases[1]", "phrases[2]"}},
      {"bad match", Phrase("x").Match("some"), {"match"}},
      {"bad speaker", Phrase("x").Speaker("Bot"), {"speaker"}},
      {"no permitted options",
       Body().Name("x").Type("permitted_options_check"),
       {"permitted_options"}},
      {"bad forbidden option", Options("x").Forbidden({"fine", ""}), {"forbidden_options[1]"}},
      {"options speaker", Options("x").Speaker("agent"), {"speaker"}},
      {"no code", Body().Name("x").Type("code_as_judge"), {"code_snippet"}},
      {"blank code", CodeJudge("x").Code("   "), {"code_snippet"}},
      {"code too big", CodeJudge("x").Code(std::string(100001, '#')), {"code_snippet"}},
      {"unknown trigger", Llm("x").WithTrigger(Trigger("sometimes")), {"evaluation_trigger.type"}},
      {"phrase trigger without phrases",
       Llm("x").WithTrigger(Trigger("phrase")),
       {"evaluation_trigger.phrases"}},
      {"code trigger without code",
       Llm("x").WithTrigger(Trigger("code")),
       {"evaluation_trigger.code_snippet"}},
      {"llm trigger without prompt",
       Llm("x").WithTrigger(Trigger("llm")),
       {"evaluation_trigger.prompt"}},
      {"trigger without type", Llm("x").WithTrigger(untyped), {"evaluation_trigger.type"}},
      {"too many rules", Llm("x").Rules(many_rules), {"structured_output"}},
      {"bad rule condition",
       Llm("x").Rules({Rule("bogus", "true", "meets_expectations")}),
       {"structured_output[0].condition"}},
      {"bad rule outcome",
       Llm("x").Rules({Rule("equals", "true", "great")}),
       {"structured_output[0].outcome_classification"}},
      {"bad scenario id", Llm("x").Scenarios({4, 0, -2}), {"scenario_ids[1]", "scenario_ids[2]"}},
      {"scenario of another workspace", Llm("x").Scenarios({20, 5}),
       {"scenario_ids[0]", "scenario_ids[1]"}},
      {"negative cost", Llm("x").Cost(-1), {"credit_cost"}},
      {"cost too high", Llm("x").Cost(1001), {"credit_cost"}},
      {"description too long", Llm("x").Description(std::string(5001, 'd')), {"description"}},
      {"several at once",
       Body().Type("custom_evaluation").Result("text").Cost(-5).Scenarios({0}),
       {"name", "result_type", "llm_instructions", "scenario_ids[0]", "credit_cost"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto result = store_->Create(ws_, c.body);
    ASSERT_FALSE(result.ok());
    ExpectInvalid(result.status(), c.fields);
  }
  // Nothing was stored along the way.
  auto list = store_->ListUsable(ws_, std::nullopt);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->data_size(), 12);
}

TEST_P(MetricsStoreTest, StructuredOutputIsCheckedAgainstTheResultType) {
  // A numeric comparison on a boolean result, an expected value outside enum_values.
  auto boolean =
      store_->Create(ws_, Llm("x").Rules({Rule("greater_than", "3", "meets_expectations")}));
  ASSERT_FALSE(boolean.ok());
  EXPECT_EQ(ErrorCode(boolean.status()), "validation_failed");
  for (const auto& f : ErrorFields(boolean.status())) {
    EXPECT_TRUE(absl::StartsWith(f, "structured_output[0].")) << f;
  }
  auto enum_metric = store_->Create(
      ws_,
      Llm("y").Result("enum").Enum({"a", "b"}).Rules({Rule("equals", "c", "meets_expectations")}));
  ASSERT_FALSE(enum_metric.ok());
  EXPECT_THAT(ErrorFields(enum_metric.status()),
              ElementsAre("structured_output[0].as_metrics_expected_value"));
  MustCreate(Llm("z").Result("rating").Rules({Rule("at_least", "4", "exceeds_expectations")}));
}

TEST_P(MetricsStoreTest, AgentIdsMustBeAgentsOfTheWorkspace) {
  auto result = store_->Create(ws_, Llm("x").Agents({agent_a_, 9999, other_agent_}));
  ASSERT_FALSE(result.ok());
  ExpectInvalid(result.status(), {"agent_ids[1]", "agent_ids[2]"}, "agent_not_found");

  // Mixed with another problem the code is the generic one.
  auto mixed = store_->Create(ws_, Llm("x").Cost(-1).Agents({9999}));
  ASSERT_FALSE(mixed.ok());
  ExpectInvalid(mixed.status(), {"agent_ids[0]", "credit_cost"});
}

TEST_P(MetricsStoreTest, NamesAreUniquePerWorkspaceIgnoringCaseAndSpaces) {
  MustCreate(Llm("Greeting"));
  for (std::string name : {"greeting", "  GREETING "}) {
    auto dup = store_->Create(ws_, Phrase(name));
    ASSERT_FALSE(dup.ok()) << name;
    ExpectInvalid(dup.status(), {"name"}, "duplicate_name");
  }
  // Another workspace may use the name.
  MustCreate(Llm("greeting"), other_ws_);
  // Unicode case folding.
  MustCreate(Llm("ÉTAT"));
  auto folded = store_->Create(ws_, Llm("état"));
  ASSERT_FALSE(folded.ok());
  ExpectInvalid(folded.status(), {"name"}, "duplicate_name");
}

TEST_P(MetricsStoreTest, StandardMetricNamesAreTaken) {
  for (std::string name : {"Latency", "latency", " TASK COMPLETION", "voice tone clarity"}) {
    auto dup = store_->Create(ws_, Llm(name));
    ASSERT_FALSE(dup.ok()) << name;
    ExpectInvalid(dup.status(), {"name"}, "duplicate_name");
  }
  // A duplicate name next to another problem: every issue, generic code.
  auto both = store_->Create(ws_, Llm("Latency").Cost(-1));
  ASSERT_FALSE(both.ok());
  ExpectInvalid(both.status(), {"credit_cost", "name"});
}

// ---- get ----

TEST_P(MetricsStoreTest, GetStandardMetrics) {
  auto latency = store_->Get(ws_, 1);
  ASSERT_TRUE(latency.ok()) << latency.status();
  EXPECT_EQ(latency->id(), 1);
  EXPECT_EQ(latency->client_id(), ws_);
  EXPECT_EQ(latency->name(), "Latency");
  EXPECT_EQ(latency->metrics_type(), "standard");
  EXPECT_EQ(latency->result_type(), "numeric");
  EXPECT_EQ(latency->standard_metric_key(), "latency");
  EXPECT_FALSE(latency->is_custom());
  EXPECT_EQ(latency->scope(), "global");
  EXPECT_TRUE(latency->mark_as_global());
  EXPECT_TRUE(latency->requires_audio());
  EXPECT_THAT(latency->agent_ids(), IsEmpty());
  EXPECT_THAT(latency->scenario_ids(), IsEmpty());
  EXPECT_EQ(latency->evaluation_trigger().type(), "always");
  EXPECT_THAT(latency->structured_output(), IsEmpty());
  EXPECT_EQ(latency->credit_cost(), 1);
  EXPECT_FALSE(latency->has_created_at());
  EXPECT_FALSE(latency->has_updated_at());

  auto clarity = store_->Get(other_ws_, 8);
  ASSERT_TRUE(clarity.ok());
  EXPECT_EQ(clarity->client_id(), other_ws_);
  EXPECT_EQ(clarity->result_type(), "rating");
  auto voice = store_->Get(ws_, 9);
  ASSERT_TRUE(voice.ok());
  EXPECT_EQ(voice->result_type(), "boolean");
  auto sentiment = store_->Get(ws_, 11);
  ASSERT_TRUE(sentiment.ok());
  EXPECT_EQ(sentiment->standard_metric_key(), "user_sentiment");
  EXPECT_EQ(sentiment->result_type(), "enum");
  EXPECT_FALSE(sentiment->requires_audio());
  auto task = store_->Get(ws_, 12);
  ASSERT_TRUE(task.ok());
  EXPECT_EQ(task->result_type(), "boolean");
}

TEST_P(MetricsStoreTest, GetUnknownOrForeignMetricIsNotFound) {
  v1::Metric theirs = MustCreate(Llm("theirs"), other_ws_);
  for (int64_t id : {int64_t{0}, int64_t{13}, int64_t{100}, theirs.id(), int64_t{5000}}) {
    auto got = store_->Get(ws_, id);
    ASSERT_FALSE(got.ok()) << id;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << id;
    EXPECT_EQ(HttpStatusFor(got.status()), 404);
  }
  EXPECT_TRUE(store_->Get(other_ws_, theirs.id()).ok());
}

// ---- update ----

TEST_P(MetricsStoreTest, UpdateMergesSentKeysAndKeepsTheOthers) {
  v1::Metric m = MustCreate(Llm("Greeting")
                                .Description("first")
                                .Result("rating")
                                .Agents({agent_a_})
                                .Scenarios({4})
                                .Rules({Rule("at_least", "3", "meets_expectations")}));
  auto updated = store_->Update(ws_, m.id(), Body().Description("second"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->description(), "second");
  EXPECT_EQ(updated->name(), "Greeting");
  EXPECT_EQ(updated->result_type(), "rating");
  EXPECT_EQ(updated->llm_instructions(), m.llm_instructions());
  EXPECT_THAT(updated->agent_ids(), ElementsAre(agent_a_));
  EXPECT_THAT(updated->scenario_ids(), ElementsAre(4));
  EXPECT_EQ(updated->structured_output_size(), 1);
  EXPECT_EQ(updated->credit_cost(), 2);
  EXPECT_EQ(updated->created_at(), m.created_at());

  // agent_ids sent replace the set; an empty list clears it.
  updated = store_->Update(ws_, m.id(), Body().Agents({agent_b_}));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_THAT(updated->agent_ids(), ElementsAre(agent_b_));
  updated = store_->Update(ws_, m.id(), Body().Agents({}));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_THAT(updated->agent_ids(), IsEmpty());

  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->SerializeAsString(), updated->SerializeAsString());
}

TEST_P(MetricsStoreTest, UpdateWithNullClearsOptionalFieldsAndRestoresDefaults) {
  v1::EvaluationTrigger phrase_trigger = Trigger("phrase");
  phrase_trigger.add_phrases("refund");
  v1::Metric m = MustCreate(Phrase("p")
                                .Description("d")
                                .Match("all")
                                .Speaker("User")
                                .CaseSensitive(true)
                                .Cost(7)
                                .Global(true)
                                .Scenarios({1})
                                .Rules({Rule("equals", "true", "meets_expectations")})
                                .WithTrigger(phrase_trigger));
  auto updated = store_->Update(ws_, m.id(),
                                Body()
                                    .Null("evaluation_trigger")
                                    .Null("description")
                                    .Null("match")
                                    .Null("speaker")
                                    .Null("case_sensitive")
                                    .Null("credit_cost")
                                    .Null("mark_as_global")
                                    .Null("scenario_ids")
                                    .Null("structured_output"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_FALSE(updated->has_description());
  EXPECT_EQ(updated->match(), "any");
  EXPECT_EQ(updated->speaker(), "AI Assistant");
  EXPECT_FALSE(updated->case_sensitive());
  EXPECT_EQ(updated->credit_cost(), 1);
  EXPECT_FALSE(updated->mark_as_global());
  EXPECT_EQ(updated->scope(), "agent");
  EXPECT_THAT(updated->scenario_ids(), IsEmpty());
  EXPECT_THAT(updated->structured_output(), IsEmpty());
  EXPECT_EQ(updated->evaluation_trigger().type(), "always");
  EXPECT_THAT(updated->evaluation_trigger().phrases(), IsEmpty());

  // A required field sent as null is missing.
  auto no_name = store_->Update(ws_, m.id(), Body().Null("name").Null("phrases"));
  ASSERT_FALSE(no_name.ok());
  ExpectInvalid(no_name.status(), {"name", "phrases"});
}

TEST_P(MetricsStoreTest, UpdateValidatesTheMergedMetric) {
  v1::Metric m = MustCreate(Phrase("p"));
  auto result = store_->Update(ws_, m.id(), Body().Phrases({}).Result("rating"));
  ASSERT_FALSE(result.ok());
  ExpectInvalid(result.status(), {"result_type", "phrases"});
  // Nothing changed.
  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->SerializeAsString(), m.SerializeAsString());

  auto bad_agent = store_->Update(ws_, m.id(), Body().Agents({other_agent_}));
  ASSERT_FALSE(bad_agent.ok());
  ExpectInvalid(bad_agent.status(), {"agent_ids[0]"}, "agent_not_found");
}

TEST_P(MetricsStoreTest, UpdateMetricsTypeCannotChange) {
  v1::Metric m = MustCreate(Llm("x"));
  auto same = store_->Update(ws_, m.id(), Body().Type("custom_evaluation").Name("y"));
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->name(), "y");

  for (std::string type : {"code_as_judge", "standard", "nonsense"}) {
    auto changed = store_->Update(ws_, m.id(), Body().Type(type).Code("metric['result']=1"));
    ASSERT_FALSE(changed.ok()) << type;
    ExpectInvalid(changed.status(), {"metrics_type"}, "metrics_type_immutable");
  }
  auto removed = store_->Update(ws_, m.id(), Body().Null("metrics_type"));
  ASSERT_FALSE(removed.ok());
  ExpectInvalid(removed.status(), {"metrics_type"}, "metrics_type_immutable");
  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->metrics_type(), "custom_evaluation");
}

TEST_P(MetricsStoreTest, UpdateNameUniquenessExcludesItself) {
  v1::Metric a = MustCreate(Llm("Alpha"));
  MustCreate(Llm("Beta"));
  auto recased = store_->Update(ws_, a.id(), Body().Name("ALPHA"));
  ASSERT_TRUE(recased.ok()) << recased.status();
  EXPECT_EQ(recased->name(), "ALPHA");
  auto taken = store_->Update(ws_, a.id(), Body().Name("beta "));
  ASSERT_FALSE(taken.ok());
  ExpectInvalid(taken.status(), {"name"}, "duplicate_name");
  auto standard = store_->Update(ws_, a.id(), Body().Name("Talk Ratio"));
  ASSERT_FALSE(standard.ok());
  ExpectInvalid(standard.status(), {"name"}, "duplicate_name");
}

TEST_P(MetricsStoreTest, UpdateResultTypeAwayFromEnumDropsStoredEnumValues) {
  v1::Metric m = MustCreate(Llm("Mood").Result("enum").Enum({"happy", "sad"}));
  auto boolean = store_->Update(ws_, m.id(), Body().Result("boolean"));
  ASSERT_TRUE(boolean.ok()) << boolean.status();
  EXPECT_THAT(boolean->enum_values(), IsEmpty());
  // enum_values sent with a non-enum type is still a 422.
  auto sent = store_->Update(ws_, m.id(), Body().Enum({"x"}));
  ASSERT_FALSE(sent.ok());
  ExpectInvalid(sent.status(), {"enum_values"});
  auto back = store_->Update(ws_, m.id(), Body().Result("enum"));
  ASSERT_FALSE(back.ok());
  ExpectInvalid(back.status(), {"enum_values"});
}

TEST_P(MetricsStoreTest, UpdateChangesUpdatedAt) {
  v1::Metric m = MustCreate(Llm("x"));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto updated = store_->Update(ws_, m.id(), Body().Description("later"));
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->created_at(), m.created_at());
  EXPECT_GT(updated->updated_at(), m.updated_at());
}

TEST_P(MetricsStoreTest, UpdateStandardIsForbiddenAndForeignIsNotFound) {
  for (int64_t id = 1; id <= 12; ++id) {
    auto result = store_->Update(ws_, id, Body().Name("mine"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(HttpStatusFor(result.status()), 403);
  }
  v1::Metric theirs = MustCreate(Llm("theirs"), other_ws_);
  for (int64_t id : {theirs.id(), int64_t{13}, int64_t{999}}) {
    auto result = store_->Update(ws_, id, Body().Name("mine"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << id;
  }
}

// ---- delete ----

TEST_P(MetricsStoreTest, Delete) {
  v1::Metric m = MustCreate(Llm("x").Agents({agent_a_}).Scenarios({3}));
  ASSERT_TRUE(store_->Delete(ws_, m.id()).ok());
  EXPECT_EQ(store_->Get(ws_, m.id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(ws_, m.id()).code(), absl::StatusCode::kNotFound);
  // The name is free again, and no links are left behind.
  v1::Metric again = MustCreate(Llm("x"));
  EXPECT_THAT(again.agent_ids(), IsEmpty());
  auto usable = store_->ListUsable(ws_, agent_a_);
  ASSERT_TRUE(usable.ok());
  for (const auto& u : usable->data()) EXPECT_NE(u.id(), m.id());
}

TEST_P(MetricsStoreTest, DeleteStandardIsForbiddenAndForeignIsNotFound) {
  for (int64_t id = 1; id <= 12; ++id) {
    absl::Status status = store_->Delete(ws_, id);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(HttpStatusFor(status), 403);
    EXPECT_EQ(ErrorCode(status), "standard_metric");
  }
  v1::Metric theirs = MustCreate(Llm("theirs"), other_ws_);
  EXPECT_EQ(store_->Delete(ws_, theirs.id()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete(ws_, 50).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Get(other_ws_, theirs.id()).ok());
}

TEST_P(MetricsStoreTest, DeletingAnAgentRemovesItFromAgentIds) {
  v1::Metric m = MustCreate(Llm("x").Agents({agent_a_, agent_b_}));
  ASSERT_TRUE(agents_->Delete(ws_, agent_a_).ok());
  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(got->agent_ids(), ElementsAre(agent_b_));
}

// The agents service tells the store once an agent's delete has committed: its links go, and a
// repeated notice (or one naming another workspace's agent) changes nothing.
TEST_P(MetricsStoreTest, AgentDeletedNoticeRemovesItsLinksAndMayRepeat) {
  v1::Metric m = MustCreate(Llm("x").Agents({agent_a_, agent_b_}));
  MustCreate(Llm("theirs").Agents({other_agent_}), other_ws_);
  ASSERT_TRUE(agents_->Delete(ws_, agent_a_).ok());
  // No foreign key reaches into the agents service's table: the rows wait for the notice.
  EXPECT_EQ(LinkRows("metric_agents", "agent_id", agent_a_), 1);
  ASSERT_TRUE(store_->AgentDeleted(ws_, agent_a_).ok());
  EXPECT_EQ(LinkRows("metric_agents", "agent_id", agent_a_), 0);
  ASSERT_TRUE(store_->AgentDeleted(ws_, agent_a_).ok());
  ASSERT_TRUE(store_->AgentDeleted(ws_, other_agent_).ok());  // not an agent of this workspace
  EXPECT_EQ(LinkRows("metric_agents", "agent_id", other_agent_), 1);
  EXPECT_EQ(LinkRows("metric_agents", "agent_id", agent_b_), 1);
  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->agent_ids(), ElementsAre(agent_b_));
}

TEST_P(MetricsStoreTest, ScenarioDeletedNoticeRemovesItsLinksAndReadsIgnoreThemBefore) {
  v1::Metric m = MustCreate(Llm("x").Scenarios({3, 9}));
  ASSERT_TRUE(scenarios_->Delete(ws_, 3).ok());
  // Before the notice (or if it was lost) the link is still stored, and no answer shows it.
  EXPECT_EQ(LinkRows("metric_scenarios", "scenario_id", 3), 1);
  auto got = store_->Get(ws_, m.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->scenario_ids(), ElementsAre(9));
  v1::ListMetricsRequest request;
  EXPECT_THAT(MustList(request).data(0).scenario_ids(), ElementsAre(9));
  ASSERT_TRUE(store_->ScenarioDeleted(ws_, 3).ok());
  ASSERT_TRUE(store_->ScenarioDeleted(ws_, 3).ok());
  EXPECT_EQ(LinkRows("metric_scenarios", "scenario_id", 3), 0);
  EXPECT_EQ(LinkRows("metric_scenarios", "scenario_id", 9), 1);
}

// Links kept by a PUT that does not send them are not checked again: an agent deleted since is
// not the client's mistake, and is left out of the answer.
TEST_P(MetricsStoreTest, UpdateKeepingALinkToADeletedAgentSucceeds) {
  v1::Metric m = MustCreate(Llm("x").Agents({agent_a_, agent_b_}).Scenarios({3, 9}));
  ASSERT_TRUE(agents_->Delete(ws_, agent_a_).ok());  // its scenarios 1, 3 and 4 go with it
  auto updated = store_->Update(ws_, m.id(), Body().Description("second"));
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_THAT(updated->agent_ids(), ElementsAre(agent_b_));
  EXPECT_THAT(updated->scenario_ids(), ElementsAre(9));
  // Sent again, the deleted agent is refused like any unknown one.
  auto resent = store_->Update(ws_, m.id(), Body().Agents({agent_a_, agent_b_}));
  ASSERT_FALSE(resent.ok());
  ExpectInvalid(resent.status(), {"agent_ids[0]"}, "agent_not_found");
}

TEST_P(MetricsStoreTest, AgentsOfAMetricListOnlyThoseThatExist) {
  MustCreate(Llm("x").Agents({agent_a_, agent_b_}));
  ASSERT_TRUE(agents_->Delete(ws_, agent_b_).ok());
  v1::ListMetricsRequest request;
  request.set_agent_id(agent_a_);
  EXPECT_THAT(MustList(request).data(0).agent_ids(), ElementsAre(agent_a_));
  request.set_agent_id(agent_b_);
  auto gone = store_->List(ws_, request);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  auto usable = store_->ListUsable(ws_, agent_b_);
  EXPECT_EQ(usable.status().code(), absl::StatusCode::kNotFound) << usable.status();
}

// ---- bulk create ----

TEST_P(MetricsStoreTest, BulkCreateCreatesNewAndSkipsDuplicates) {
  MustCreate(Llm("Existing"));
  v1::BulkCreateMetricsBody body;
  body.set_agent_id(agent_a_);
  *body.add_metrics() = Llm("One").Agents({agent_b_});
  *body.add_metrics() = Llm("existing");
  *body.add_metrics() = CodeJudge("Two");
  *body.add_metrics() = Phrase("ONE ");
  *body.add_metrics() = Llm("latency");
  *body.add_metrics() = Options("Three").Agents({agent_a_});
  auto result = store_->BulkCreate(ws_, body);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->created_size(), 3);
  EXPECT_EQ(result->created(0).name(), "One");
  EXPECT_EQ(result->created(1).name(), "Two");
  EXPECT_EQ(result->created(2).name(), "Three");
  EXPECT_EQ(result->created(0).id(), 102);
  EXPECT_EQ(result->created(1).id(), 103);
  EXPECT_EQ(result->created(2).id(), 104);
  EXPECT_THAT(result->created(0).agent_ids(), ElementsAre(agent_a_, agent_b_));
  EXPECT_THAT(result->created(1).agent_ids(), ElementsAre(agent_a_));
  EXPECT_THAT(result->created(2).agent_ids(), ElementsAre(agent_a_));
  EXPECT_EQ(result->created(1).credit_cost(), 1);
  ASSERT_EQ(result->skipped_size(), 3);
  EXPECT_EQ(result->skipped(0).name(), "existing");
  EXPECT_EQ(result->skipped(1).name(), "ONE");
  EXPECT_EQ(result->skipped(2).name(), "latency");
  for (const auto& s : result->skipped()) EXPECT_EQ(s.reason(), "duplicate_name");

  auto got = store_->Get(ws_, 102);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->SerializeAsString(), result->created(0).SerializeAsString());
}

TEST_P(MetricsStoreTest, BulkCreateWithoutAgent) {
  v1::BulkCreateMetricsBody body;
  *body.add_metrics() = Llm("One");
  auto result = store_->BulkCreate(ws_, body);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->created_size(), 1);
  EXPECT_THAT(result->created(0).agent_ids(), IsEmpty());
  EXPECT_THAT(result->skipped(), IsEmpty());
}

TEST_P(MetricsStoreTest, BulkCreateInvalidItemFailsEverything) {
  v1::BulkCreateMetricsBody body;
  *body.add_metrics() = Llm("Fine");
  *body.add_metrics() = Body().Name("No type");
  *body.add_metrics() = Llm("Fine 2");
  *body.add_metrics() = Phrase("Bad").Phrases({""}).Agents({other_agent_});
  auto result = store_->BulkCreate(ws_, body);
  ASSERT_FALSE(result.ok());
  ExpectInvalid(result.status(),
                {"metrics[1].metrics_type", "metrics[3].phrases[0]", "metrics[3].agent_ids[0]"});
  auto usable = store_->ListUsable(ws_, std::nullopt);
  ASSERT_TRUE(usable.ok());
  EXPECT_EQ(usable->data_size(), 12);
}

TEST_P(MetricsStoreTest, BulkCreateUnknownAgent) {
  v1::BulkCreateMetricsBody body;
  body.set_agent_id(other_agent_);
  *body.add_metrics() = Llm("One");
  *body.add_metrics() = Llm("Two");
  auto result = store_->BulkCreate(ws_, body);
  ASSERT_FALSE(result.ok());
  ExpectInvalid(result.status(), {"agent_id"}, "agent_not_found");

  *body.add_metrics() = Llm("");
  result = store_->BulkCreate(ws_, body);
  ASSERT_FALSE(result.ok());
  ExpectInvalid(result.status(), {"agent_id", "metrics[2].name"});
}

TEST_P(MetricsStoreTest, BulkCreateListSize) {
  auto empty = store_->BulkCreate(ws_, v1::BulkCreateMetricsBody());
  ASSERT_FALSE(empty.ok());
  ExpectInvalid(empty.status(), {"metrics"});

  v1::BulkCreateMetricsBody big;
  for (int i = 0; i < 101; ++i) *big.add_metrics() = Llm(absl::StrCat("m", i));
  auto too_many = store_->BulkCreate(ws_, big);
  ASSERT_FALSE(too_many.ok());
  ExpectInvalid(too_many.status(), {"metrics"});

  big.mutable_metrics()->RemoveLast();
  auto hundred = store_->BulkCreate(ws_, big);
  ASSERT_TRUE(hundred.ok()) << hundred.status();
  EXPECT_EQ(hundred->created_size(), 100);
}

// ---- list ----

TEST_P(MetricsStoreTest, ListSplitsStandardCustomAndGlobal) {
  v1::Metric a = MustCreate(Llm("a"));
  v1::Metric g1 = MustCreate(Llm("g1").Global(true));
  v1::Metric b = MustCreate(Phrase("b"));
  v1::Metric g2 = MustCreate(CodeJudge("g2").Global(true));
  MustCreate(Llm("theirs"), other_ws_);
  v1::ListMetricsResponse r = MustList(v1::ListMetricsRequest());
  ASSERT_EQ(r.standard_metrics_size(), 12);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(r.standard_metrics(i).id(), i + 1);
    EXPECT_EQ(r.standard_metrics(i).standard_metric_key(), kStandardMetrics[i].key);
    EXPECT_EQ(r.standard_metrics(i).metrics_type(), "standard");
    EXPECT_FALSE(r.standard_metrics(i).is_custom());
  }
  EXPECT_THAT(Ids(r.data()), ElementsAre(b.id(), a.id()));
  EXPECT_THAT(Ids(r.global_metrics()), ElementsAre(g2.id(), g1.id()));
  EXPECT_EQ(r.data(0).SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(r.pagination().current_page(), 1);
  EXPECT_EQ(r.pagination().per_page(), 25);
  EXPECT_EQ(r.pagination().total_count(), 2);
  EXPECT_EQ(r.pagination().total_pages(), 1);
}

TEST_P(MetricsStoreTest, ListPaginatesData) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(MustCreate(Llm(absl::StrCat("m", i))).id());
  MustCreate(Llm("global").Global(true));
  v1::ListMetricsRequest request;
  request.set_per_page(2);
  request.set_page(2);
  v1::ListMetricsResponse r = MustList(request);
  EXPECT_THAT(Ids(r.data()), ElementsAre(ids[2], ids[1]));
  EXPECT_EQ(r.global_metrics_size(), 1);  // not paginated
  EXPECT_EQ(r.pagination().current_page(), 2);
  EXPECT_EQ(r.pagination().per_page(), 2);
  EXPECT_EQ(r.pagination().total_count(), 5);
  EXPECT_EQ(r.pagination().total_pages(), 3);
  request.set_page(3);
  EXPECT_THAT(Ids(MustList(request).data()), ElementsAre(ids[0]));
  request.set_page(4);
  EXPECT_THAT(MustList(request).data(), IsEmpty());

  v1::ListMetricsResponse empty = MustList(v1::ListMetricsRequest());
  (void)empty;
  auto none = store_->List(other_ws_, v1::ListMetricsRequest());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->pagination().total_count(), 0);
  EXPECT_EQ(none->pagination().total_pages(), 0);
}

TEST_P(MetricsStoreTest, ListRejectsBadPaging) {
  struct Case {
    std::optional<int> page, per_page;
    std::vector<std::string> fields;
  };
  for (const Case& c : std::vector<Case>{{0, std::nullopt, {"page"}},
                                         {std::nullopt, 0, {"per_page"}},
                                         {std::nullopt, 101, {"per_page"}},
                                         {-1, -1, {"page", "per_page"}}}) {
    v1::ListMetricsRequest request;
    if (c.page) request.set_page(*c.page);
    if (c.per_page) request.set_per_page(*c.per_page);
    auto r = store_->List(ws_, request);
    ASSERT_FALSE(r.ok());
    ExpectInvalid(r.status(), c.fields);
  }
  v1::ListMetricsRequest max;
  max.set_per_page(100);
  EXPECT_TRUE(store_->List(ws_, max).ok());
}

TEST_P(MetricsStoreTest, ListSearchFiltersAllThreeByName) {
  v1::Metric a = MustCreate(Llm("Refund latency check"));
  MustCreate(Llm("Politeness"));
  v1::Metric g = MustCreate(Llm("LATENCY apology").Global(true));
  MustCreate(Llm("Other").Global(true));
  v1::ListMetricsRequest request;
  request.set_search("Latency");
  v1::ListMetricsResponse r = MustList(request);
  ASSERT_EQ(r.standard_metrics_size(), 1);
  EXPECT_EQ(r.standard_metrics(0).standard_metric_key(), "latency");
  EXPECT_THAT(Ids(r.data()), ElementsAre(a.id()));
  EXPECT_THAT(Ids(r.global_metrics()), ElementsAre(g.id()));
  EXPECT_EQ(r.pagination().total_count(), 1);

  request.set_search("interrupt");
  r = MustList(request);
  ASSERT_EQ(r.standard_metrics_size(), 3);  // AI, user interruptions, stop time after ...
  EXPECT_THAT(r.data(), IsEmpty());

  request.set_search("%");  // no wildcard
  r = MustList(request);
  EXPECT_THAT(r.standard_metrics(), IsEmpty());
  EXPECT_THAT(r.data(), IsEmpty());
}

TEST_P(MetricsStoreTest, ListForAnAgentKeepsWhatAppliesAndIsEnabled) {
  v1::Metric for_a = MustCreate(Llm("for a").Agents({agent_a_}));
  v1::Metric for_both = MustCreate(Llm("for both").Agents({agent_a_, agent_b_}));
  MustCreate(Llm("for b").Agents({agent_b_}));
  MustCreate(Llm("for nobody"));
  v1::Metric disabled_for_a = MustCreate(Llm("disabled").Agents({agent_a_}));
  v1::Metric global = MustCreate(Llm("global").Global(true));
  v1::Metric global_disabled = MustCreate(Llm("global off").Global(true));
  ASSERT_TRUE(store_->SetStandardToggles(ws_, agent_a_, {"latency", "talk_ratio"}).ok());
  ASSERT_TRUE(
      store_->SetCustomToggles(ws_, agent_a_, {disabled_for_a.id(), global_disabled.id()}).ok());

  v1::ListMetricsRequest request;
  request.set_agent_id(agent_a_);
  v1::ListMetricsResponse r = MustList(request);
  EXPECT_EQ(r.standard_metrics_size(), 10);
  for (const auto& s : r.standard_metrics()) {
    EXPECT_NE(s.standard_metric_key(), "latency");
    EXPECT_NE(s.standard_metric_key(), "talk_ratio");
  }
  EXPECT_THAT(Ids(r.data()), ElementsAre(for_both.id(), for_a.id()));
  EXPECT_EQ(r.pagination().total_count(), 2);
  EXPECT_THAT(Ids(r.global_metrics()), ElementsAre(global.id()));

  request.set_agent_id(other_agent_);
  auto foreign = store_->List(ws_, request);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kNotFound);
  request.set_agent_id(424242);
  EXPECT_EQ(store_->List(ws_, request).status().code(), absl::StatusCode::kNotFound);
}

// ---- usable, catalog, definitions ----

TEST_P(MetricsStoreTest, ListUsableWithoutAgentListsEverythingEnabled) {
  v1::Metric a = MustCreate(Llm("a").Agents({agent_a_}));
  v1::Metric b = MustCreate(CodeJudge("b"));
  MustCreate(Llm("theirs"), other_ws_);
  auto r = store_->ListUsable(ws_, std::nullopt);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->data_size(), 14);
  for (int i = 0; i < 12; ++i) {
    const auto& u = r->data(i);
    EXPECT_EQ(u.id(), i + 1);
    EXPECT_EQ(u.name(), kStandardMetrics[i].name);
    EXPECT_EQ(u.metrics_type(), "standard");
    EXPECT_EQ(u.standard_metric_key(), kStandardMetrics[i].key);
    EXPECT_EQ(u.requires_audio(), kStandardMetrics[i].requires_audio);
    EXPECT_TRUE(u.enabled());
  }
  EXPECT_EQ(r->data(12).id(), a.id());
  EXPECT_EQ(r->data(12).name(), "a");
  EXPECT_EQ(r->data(12).metrics_type(), "custom_evaluation");
  EXPECT_FALSE(r->data(12).has_standard_metric_key());
  EXPECT_FALSE(r->data(12).requires_audio());
  EXPECT_TRUE(r->data(12).enabled());
  EXPECT_EQ(r->data(13).id(), b.id());
  EXPECT_EQ(r->data(13).metrics_type(), "code_as_judge");
}

TEST_P(MetricsStoreTest, ListUsableForAnAgent) {
  v1::Metric for_a = MustCreate(Llm("a").Agents({agent_a_}));
  MustCreate(Llm("b").Agents({agent_b_}));
  v1::Metric global = MustCreate(Llm("g").Global(true));
  ASSERT_TRUE(store_->SetStandardToggles(ws_, agent_a_, {"user_sentiment"}).ok());
  ASSERT_TRUE(store_->SetCustomToggles(ws_, agent_a_, {global.id()}).ok());
  auto r = store_->ListUsable(ws_, agent_a_);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->data_size(), 14);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(r->data(i).enabled(), i + 1 != 11) << i;
  EXPECT_EQ(r->data(12).id(), for_a.id());
  EXPECT_TRUE(r->data(12).enabled());
  EXPECT_EQ(r->data(13).id(), global.id());
  EXPECT_FALSE(r->data(13).enabled());

  EXPECT_EQ(store_->ListUsable(ws_, other_agent_).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(MetricsStoreTest, CatalogSaysWhichMetricsApplyToTheAgent) {
  v1::Metric for_a = MustCreate(Llm("a").Agents({agent_a_}).Cost(5));
  v1::Metric for_b = MustCreate(Phrase("b").Agents({agent_b_}));
  v1::Metric global = MustCreate(CodeJudge("g").Global(true));
  MustCreate(Llm("theirs").Global(true), other_ws_);
  auto catalog = store_->Catalog(ws_, agent_a_);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_EQ(catalog->entries_size(), 3);
  EXPECT_EQ(catalog->entries(0).id(), for_a.id());
  EXPECT_EQ(catalog->entries(0).credit_cost(), 5);
  EXPECT_TRUE(catalog->entries(0).applies_to_agent());
  EXPECT_FALSE(catalog->entries(0).requires_audio());
  EXPECT_EQ(catalog->entries(1).id(), for_b.id());
  EXPECT_EQ(catalog->entries(1).credit_cost(), 1);
  EXPECT_FALSE(catalog->entries(1).applies_to_agent());
  EXPECT_EQ(catalog->entries(2).id(), global.id());
  EXPECT_TRUE(catalog->entries(2).applies_to_agent());
}

TEST_P(MetricsStoreTest, DefinitionsInRequestOrderSkippingMissing) {
  v1::Metric a = MustCreate(Llm("a"));
  v1::Metric b = MustCreate(Phrase("b"));
  v1::Metric theirs = MustCreate(Llm("theirs"), other_ws_);
  auto defs = store_->Definitions(ws_, {b.id(), 999, theirs.id(), 3, a.id(), b.id(), 50});
  ASSERT_TRUE(defs.ok()) << defs.status();
  ASSERT_EQ(defs->size(), 3u);
  EXPECT_EQ((*defs)[0].SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ((*defs)[1].id(), 3);
  EXPECT_EQ((*defs)[1].metrics_type(), "standard");
  EXPECT_EQ((*defs)[2].SerializeAsString(), a.SerializeAsString());
  auto none = store_->Definitions(ws_, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// ---- toggles ----

TEST_P(MetricsStoreTest, StandardTogglesReplaceTheStandardPart) {
  v1::Metric custom = MustCreate(Llm("c").Agents({agent_a_}));
  ASSERT_TRUE(store_->SetCustomToggles(ws_, agent_a_, {custom.id()}).ok());
  auto r = store_->SetStandardToggles(ws_, agent_a_,
                                      {"talk_ratio", "latency", "latency", "user_sentiment"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->agent_id(), agent_a_);
  EXPECT_THAT(r->disabled_metric_keys(), ElementsAre("latency", "talk_ratio", "user_sentiment"));
  EXPECT_THAT(r->enabled_metric_keys(),
              ElementsAre("ai_interruptions", "user_interruptions", "stop_time_after_interruption",
                          "silence_detection", "words_per_minute", "transcription_accuracy",
                          "voice_tone_clarity", "voice_change_detection", "task_completion"));
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(1, 10, 11, custom.id()));

  r = store_->SetStandardToggles(ws_, agent_a_, {"voice_tone_clarity"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->disabled_metric_keys(), ElementsAre("voice_tone_clarity"));
  EXPECT_EQ(r->enabled_metric_keys_size(), 11);
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(8, custom.id()));

  r = store_->SetStandardToggles(ws_, agent_a_, {});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->disabled_metric_keys(), IsEmpty());
  EXPECT_EQ(r->enabled_metric_keys_size(), 12);
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(custom.id()));
  EXPECT_THAT(DisabledOf(agent_b_), IsEmpty());
}

TEST_P(MetricsStoreTest, StandardTogglesRejectUnknownKeysAndAgents) {
  ASSERT_TRUE(store_->SetStandardToggles(ws_, agent_a_, {"latency"}).ok());
  auto bad = store_->SetStandardToggles(ws_, agent_a_, {"talk_ratio", "Latency", "nope"});
  ASSERT_FALSE(bad.ok());
  ExpectInvalid(bad.status(), {"disabled_metric_keys[1]", "disabled_metric_keys[2]"});
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(1));  // unchanged

  EXPECT_EQ(store_->SetStandardToggles(ws_, other_agent_, {"latency"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->SetStandardToggles(ws_, 999, {"nope"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(DisabledOf(other_agent_, other_ws_), IsEmpty());
}

TEST_P(MetricsStoreTest, CustomTogglesReplaceTheCustomPart) {
  v1::Metric a = MustCreate(Llm("a"));
  v1::Metric b = MustCreate(Llm("b").Global(true));
  v1::Metric c = MustCreate(CodeJudge("c"));
  ASSERT_TRUE(store_->SetStandardToggles(ws_, agent_a_, {"silence_detection"}).ok());
  auto r = store_->SetCustomToggles(ws_, agent_a_, {c.id(), a.id(), c.id()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->agent_id(), agent_a_);
  EXPECT_THAT(r->disabled_llm_metric_ids(), ElementsAre(a.id(), c.id()));
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(5, a.id(), c.id()));

  r = store_->SetCustomToggles(ws_, agent_a_, {b.id()});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->disabled_llm_metric_ids(), ElementsAre(b.id()));
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(5, b.id()));

  r = store_->SetCustomToggles(ws_, agent_a_, {});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->disabled_llm_metric_ids(), IsEmpty());
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(5));
}

TEST_P(MetricsStoreTest, CustomTogglesRejectUnknownMetricsAndAgents) {
  v1::Metric a = MustCreate(Llm("a"));
  v1::Metric theirs = MustCreate(Llm("theirs"), other_ws_);
  ASSERT_TRUE(store_->SetCustomToggles(ws_, agent_a_, {a.id()}).ok());
  auto bad = store_->SetCustomToggles(ws_, agent_a_, {a.id(), theirs.id(), 3, 9999});
  ASSERT_FALSE(bad.ok());
  ExpectInvalid(
      bad.status(),
      {"disabled_llm_metric_ids[1]", "disabled_llm_metric_ids[2]", "disabled_llm_metric_ids[3]"},
      "metric_not_found");
  EXPECT_THAT(DisabledOf(agent_a_), ElementsAre(a.id()));  // unchanged

  EXPECT_EQ(store_->SetCustomToggles(ws_, other_agent_, {a.id()}).status().code(),
            absl::StatusCode::kNotFound);
  // A deleted metric can no longer be disabled.
  ASSERT_TRUE(store_->Delete(ws_, a.id()).ok());
  auto deleted = store_->SetCustomToggles(ws_, agent_a_, {a.id()});
  ASSERT_FALSE(deleted.ok());
  ExpectInvalid(deleted.status(), {"disabled_llm_metric_ids[0]"}, "metric_not_found");
}

TEST_P(MetricsStoreTest, TogglesChangeTheAgentsUpdatedAt) {
  auto before = agents_->Get(ws_, agent_a_);
  ASSERT_TRUE(before.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(store_->SetStandardToggles(ws_, agent_a_, {"latency"}).ok());
  auto after = agents_->Get(ws_, agent_a_);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->updated_at(), before->updated_at());
  EXPECT_EQ(after->name(), before->name());
}

CALLEVAL_INSTANTIATE_ON_BOTH_BACKENDS(MetricsStoreTest);

}  // namespace
}  // namespace calleval::metrics
