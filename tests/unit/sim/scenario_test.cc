#include "tools/sim/scenario.h"

#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/sim/report.h"

namespace metaroce::sim {
namespace {

ScenarioConfig SmallConfig() {
  ScenarioConfig c;
  c.physical_paths = 2;
  c.messages = 16;
  c.message_bytes = 64 * 1024;
  c.depth = 4;
  c.rate_gbps = 25;
  c.duration_cap = std::chrono::seconds(2);
  c.max_events = 5'000'000;
  return c;
}

std::string Describe(const ScenarioResult& r) { return ResultSummary(r, std::nullopt); }

void ExpectAllCompletedCleanly(const ScenarioResult& r) {
  EXPECT_EQ(r.stop_reason, "done") << Describe(r);
  EXPECT_EQ(r.messages_completed, r.config.messages) << Describe(r);
  EXPECT_EQ(r.messages_failed, 0u) << Describe(r);
  EXPECT_EQ(r.data_errors, 0u) << Describe(r);
  EXPECT_EQ(r.malformed_datagrams, 0u);
  EXPECT_EQ(r.unknown_connection_datagrams, 0u);
  if (r.config.UsesReceives()) {
    EXPECT_EQ(r.receives_completed, r.config.messages);
  }
}

class Scenario_Transports
    : public ::testing::TestWithParam<std::tuple<TransportKind, double>> {};

TEST_P(Scenario_Transports, AllMessagesCompleteWithoutDataErrors) {
  ScenarioConfig c = SmallConfig();
  c.transport = std::get<0>(GetParam());
  c.loss = std::get<1>(GetParam());
  if (c.transport == TransportKind::kGoBackN) c.connections = c.physical_paths;
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  if (c.loss > 0) {
    EXPECT_GT(r->packets_lost, 0u);
    EXPECT_GT(r->retransmits, 0u);
  } else {
    EXPECT_EQ(r->packets_lost, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LossAndNoLoss, Scenario_Transports,
    ::testing::Combine(::testing::Values(TransportKind::kMetaRoce, TransportKind::kGoBackN,
                                         TransportKind::kReorderBuffer),
                       ::testing::Values(0.0, 0.05)),
    [](const auto& info) {
      return std::string(TransportName(std::get<0>(info.param))) +
             (std::get<1>(info.param) > 0 ? "_loss5pct" : "_lossless");
    });

class Scenario_Operations : public ::testing::TestWithParam<Operation> {};

TEST_P(Scenario_Operations, VerifiedUnderLoss) {
  ScenarioConfig c = SmallConfig();
  c.op = GetParam();
  c.loss = 0.05;
  c.connections = 2;
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
}

INSTANTIATE_TEST_SUITE_P(AllOps, Scenario_Operations,
                         ::testing::Values(Operation::kWrite, Operation::kSend,
                                           Operation::kWriteImm),
                         [](const auto& info) { return std::string(OperationName(info.param)); });

TEST(Scenario_Determinism, SameSeedGivesIdenticalJson) {
  ScenarioConfig c = SmallConfig();
  c.loss = 0.05;
  c.seed = 7;
  absl::StatusOr<ScenarioResult> a = RunScenario(c);
  absl::StatusOr<ScenarioResult> b = RunScenario(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ResultToJson(*a), ResultToJson(*b));
  c.seed = 8;
  absl::StatusOr<ScenarioResult> other = RunScenario(c);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(ResultToJson(*a), ResultToJson(*other));
}

TEST(Scenario_Receives, LateReceivesAreRetriedNotLost) {
  ScenarioConfig c = SmallConfig();
  c.op = Operation::kSend;
  c.recv_delay = std::chrono::microseconds(100);
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  EXPECT_GT(r->responder_counters.rnr_naks_sent, 0u) << Describe(*r);
}

TEST(Scenario_Blackhole, MessagesSurviveAPathGoingDark) {
  ScenarioConfig c = SmallConfig();
  c.physical_paths = 4;
  c.messages = 64;
  c.blackholes.push_back({0, TimeWindow{Instant{20'000}, Instant{400'000}}});
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  EXPECT_GT(r->lost_blackhole, 0u);
}

TEST(Scenario_Config, RefusesInvalidSettings) {
  ScenarioConfig c = SmallConfig();
  c.blackholes.push_back({5, TimeWindow{Instant{0}, Instant{10}}});
  EXPECT_FALSE(RunScenario(c).ok());
}

TEST(Scenario_Report, JsonCarriesHeadlineFields) {
  absl::StatusOr<ScenarioResult> r = RunScenario(SmallConfig());
  ASSERT_TRUE(r.ok());
  const std::string json = ResultToJson(*r);
  for (const char* key : {"\"messages_completed\":16", "\"data_errors\":0", "\"goodput_gbps\"",
                          "\"capacity_gbps\":50", "\"completion_us\"", "\"paths\"",
                          "\"recovery_us\":null", "\"spurious_retransmits\""}) {
    EXPECT_THAT(json, ::testing::HasSubstr(key));
  }
  EXPECT_EQ(json.back(), '\n');
}

}  // namespace
}  // namespace metaroce::sim
