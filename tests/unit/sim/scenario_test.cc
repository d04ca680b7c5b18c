#include "tools/sim/scenario.h"

#include <map>
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/wire/packet.h"
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
  EXPECT_EQ(r.messages_completed, r.config.TotalMessages()) << Describe(r);
  EXPECT_EQ(r.messages_failed, 0u) << Describe(r);
  EXPECT_EQ(r.data_errors, 0u) << Describe(r);
  EXPECT_EQ(r.malformed_datagrams, 0u);
  EXPECT_EQ(r.unknown_connection_datagrams, 0u);
  if (r.config.UsesReceives()) {
    EXPECT_EQ(r.receives_completed, r.config.TotalMessages());
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

// The verifier itself: one payload byte flipped in flight (the third data packet B receives;
// nothing on the wire checks payloads) is placed by the core as it came, and the run must report
// it as a data error of the operation's kind. The same run through a seam that changes nothing
// is clean, so the error is the flipped byte's.
class Scenario_Verifier : public ::testing::TestWithParam<Operation> {};

TEST_P(Scenario_Verifier, ReportsAByteCorruptedInFlight) {
  for (const bool flip : {false, true}) {
    SCOPED_TRACE(flip ? "one byte flipped" : "nothing changed");
    ScenarioConfig c = SmallConfig();
    c.op = GetParam();
    int data_packets = 0, flipped = 0;
    c.on_arrival = [&](Datagram& d) {
      if (d.direction != Direction::kAToB) return;
      const wire::ParseResult p = wire::Parse(d.bytes);
      if (!p.ok() || !wire::IsData(p.packet.opcode) || p.packet.payload.empty()) return;
      if (++data_packets != 3 || !flip) return;
      const size_t at = static_cast<size_t>(p.packet.payload.data() - d.bytes.data()) +
                        p.packet.payload.size() / 2;
      d.bytes[at] ^= std::byte{0x01};
      ++flipped;
    };
    absl::StatusOr<ScenarioResult> r = RunScenario(c);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GE(data_packets, 3);
    EXPECT_EQ(r->resent_data_packets, 0u) << "a resend could have put the right byte back";
    // The core cannot tell: every message still completes.
    EXPECT_EQ(r->messages_completed, c.TotalMessages()) << Describe(*r);
    if (!flip) {
      EXPECT_EQ(r->data_errors, 0u) << Describe(*r);
      continue;
    }
    ASSERT_EQ(flipped, 1);
    std::map<std::string, uint64_t> want;
    switch (c.op) {
      case Operation::kWrite: want = {{"write_data_mismatch", 1}}; break;
      case Operation::kSend: want = {{"send_data_mismatch", 1}}; break;
      // Checked twice: at B's receive completion, and again at A's completion (RC: placed
      // before acknowledged).
      case Operation::kWriteImm:
        want = {{"write_data_mismatch", 1}, {"write_imm_data_mismatch", 1}};
        break;
    }
    EXPECT_EQ(r->data_errors_by_kind, want) << Describe(*r);
    uint64_t total = 0;
    for (const auto& [kind, n] : want) total += n;
    EXPECT_EQ(r->data_errors, total);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, Scenario_Verifier,
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

// --ack-every reaches the responders: fewer ACKs for the same data, and the JSON says which.
TEST(Scenario_AckEvery, CoalescesTheResponderAcks) {
  ScenarioConfig c = SmallConfig();
  c.messages = 32;
  absl::StatusOr<ScenarioResult> every2 = RunScenario(c);
  c.ack_every = 16;
  absl::StatusOr<ScenarioResult> every16 = RunScenario(c);
  ASSERT_TRUE(every2.ok() && every16.ok());
  ExpectAllCompletedCleanly(*every2);
  ExpectAllCompletedCleanly(*every16);
  EXPECT_LT(every16->requester_counters.acks_rcvd, every2->requester_counters.acks_rcvd)
      << Describe(*every16);
  EXPECT_THAT(ResultToJson(*every16), ::testing::HasSubstr("\"ack_every\":16"));
  EXPECT_THAT(ResultToJson(*every2), ::testing::HasSubstr("\"ack_every\":2"));
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

TEST(Scenario_PathLoss, LosesOnlyOnItsPathInBothDirections) {
  ScenarioConfig c = SmallConfig();
  c.physical_paths = 4;
  c.messages = 32;
  c.path_losses.push_back({2, 0.05});
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  for (const PathReport& p : r->paths) {
    if (p.path == 2) {
      EXPECT_GT(p.a_to_b.dropped_random, 0u) << Describe(*r);
      EXPECT_GT(p.b_to_a.dropped_random, 0u) << Describe(*r);
    } else {
      EXPECT_EQ(p.a_to_b.dropped_random + p.b_to_a.dropped_random, 0u) << p.path;
    }
  }
  EXPECT_EQ(r->lost_random, r->packets_lost);
  EXPECT_GT(r->resent_data_packets, 0u);
}

class Scenario_Steps : public ::testing::TestWithParam<std::tuple<TransportKind, Operation>> {};

TEST_P(Scenario_Steps, EveryStepCompletesBeforeTheNextAndIsTimed) {
  ScenarioConfig c = SmallConfig();
  c.transport = std::get<0>(GetParam());
  c.op = std::get<1>(GetParam());
  c.physical_paths = 4;
  c.steps = 6;
  c.messages = 8;
  c.depth = 8;
  c.path_losses.push_back({1, 0.02});
  if (c.transport == TransportKind::kGoBackN) {
    c.connections = 4;
    c.depth = 2;
  }
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop_reason, "done") << Describe(*r);
  EXPECT_EQ(r->messages_completed, 48u) << Describe(*r);
  EXPECT_EQ(r->data_errors, 0u) << Describe(*r);
  const StepSummary& st = r->steps;
  ASSERT_EQ(st.count, 6u);
  ASSERT_EQ(st.times_us.size(), 6u);
  EXPECT_EQ(st.with_failures, 0u);
  double sum = 0, max = 0;
  for (double t : st.times_us) {
    EXPECT_GT(t, 0);
    sum += t;
    max = std::max(max, t);
  }
  // Steps run back to back from time 0: the last ends when the workload ends.
  EXPECT_NEAR(sum, r->sim_time_us, 0.01);
  EXPECT_DOUBLE_EQ(st.max_us, max);
  EXPECT_DOUBLE_EQ(st.p99_us, max);  // nearest rank of 6 samples
  EXPECT_LE(st.p50_us, st.p99_us);
  EXPECT_NEAR(st.mean_us, sum / 6, 0.01);
  // A step holds at most its own messages: the last post is at the start of the last step.
  EXPECT_NEAR(r->last_post_us, sum - st.times_us.back(), 0.01);
  const std::string json = ResultToJson(*r);
  EXPECT_THAT(json, ::testing::HasSubstr("\"step_us\":{\"count\":6,"));
  EXPECT_THAT(json, ::testing::HasSubstr("\"step_times_us\":["));
}

INSTANTIATE_TEST_SUITE_P(
    TransportsAndOps, Scenario_Steps,
    ::testing::Values(std::make_tuple(TransportKind::kMetaRoce, Operation::kWrite),
                      std::make_tuple(TransportKind::kMetaRoce, Operation::kSend),
                      std::make_tuple(TransportKind::kMetaRoce, Operation::kWriteImm),
                      std::make_tuple(TransportKind::kGoBackN, Operation::kWrite),
                      std::make_tuple(TransportKind::kReorderBuffer, Operation::kWrite)),
    [](const auto& info) {
      return std::string(TransportName(std::get<0>(info.param))) + "_" +
             std::string(OperationName(std::get<1>(info.param)));
    });

TEST(Scenario_StepWorkload, DepthBelowStepSizeStillCompletesEveryStep) {
  ScenarioConfig c = SmallConfig();
  c.steps = 3;
  c.messages = 10;
  c.depth = 3;
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  EXPECT_EQ(r->messages_completed, 30u);
  EXPECT_EQ(r->steps.count, 3u);
}

TEST(Scenario_StepWorkload, StepsOfAFailedConnectionCountAsFailedAndStillEnd) {
  // Go-back-N cannot leave its path: the connection on the dead path fails by the no-progress
  // timeout; its messages of later steps are refused, and those steps end without them.
  ScenarioConfig c = SmallConfig();
  c.transport = TransportKind::kGoBackN;
  c.connections = 2;
  c.steps = 3;
  c.messages = 4;
  c.depth = 2;
  c.blackholes.push_back({0, TimeWindow{Instant{0}, Instant{0} + std::chrono::seconds(100)}});
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop_reason, "done") << Describe(*r);
  EXPECT_EQ(r->steps.count, 3u) << Describe(*r);
  EXPECT_EQ(r->steps.with_failures, 3u) << Describe(*r);
  EXPECT_EQ(r->messages_completed, 6u) << Describe(*r);  // connection 2's share of each step
  EXPECT_GT(r->messages_failed, 0u);
  EXPECT_EQ(r->messages_completed + r->messages_failed + r->messages_not_posted, 12u);
  EXPECT_EQ(r->data_errors, 0u);
}

TEST(Scenario_StepWorkload, WithoutStepsJsonSaysNull) {
  absl::StatusOr<ScenarioResult> r = RunScenario(SmallConfig());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->steps.count, 0u);
  EXPECT_THAT(ResultToJson(*r), ::testing::HasSubstr("\"step_us\":null"));
}

TEST(Scenario_Determinism, StepsPathLossAndSamplesAreDeterministic) {
  ScenarioConfig c = SmallConfig();
  c.physical_paths = 4;
  c.steps = 4;
  c.messages = 8;
  c.path_losses.push_back({0, 0.05});
  c.ce_marks.push_back({1, 0.5, std::nullopt});
  c.sample_interval = std::chrono::microseconds(20);
  absl::StatusOr<ScenarioResult> a = RunScenario(c);
  absl::StatusOr<ScenarioResult> b = RunScenario(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ResultToJson(*a), ResultToJson(*b));
}

TEST(Scenario_Samples, SamplingDoesNotChangeTheRun) {
  ScenarioConfig c = SmallConfig();
  c.loss = 0.02;
  absl::StatusOr<ScenarioResult> plain = RunScenario(c);
  c.sample_interval = std::chrono::microseconds(10);
  absl::StatusOr<ScenarioResult> sampled = RunScenario(c);
  ASSERT_TRUE(plain.ok() && sampled.ok());
  EXPECT_EQ(plain->sim_time_us, sampled->sim_time_us);
  EXPECT_EQ(plain->resent_data_packets, sampled->resent_data_packets);
  EXPECT_EQ(plain->completion_us.p99_us, sampled->completion_us.p99_us);
  EXPECT_TRUE(plain->path_samples.t_us.empty());
  const PathSamples& ps = sampled->path_samples;
  ASSERT_EQ(ps.paths.size(), 2u);
  ASSERT_FALSE(ps.t_us.empty());
  EXPECT_EQ(ps.t_us.front(), 0);
  EXPECT_NEAR(ps.t_us.back(), sampled->sim_time_us, 10.0);
  for (const PathSamples::Series& s : ps.paths) {
    EXPECT_EQ(s.srtt_us.size(), ps.t_us.size());
    EXPECT_EQ(s.state.size(), ps.t_us.size());
    EXPECT_EQ(s.physical.front(), s.path);  // path i starts on physical path i
    EXPECT_GT(s.srtt_us.back(), 0);
  }
}

TEST(Scenario_CeMark, PersistentMarkingRaisesAlphaOnThatPathOnly) {
  ScenarioConfig c = SmallConfig();
  c.physical_paths = 4;
  c.messages = 64;
  c.ecn_threshold_bytes = c.queue_bytes;  // queues never mark: only the injection does
  c.ce_marks.push_back({3, 1.0, std::nullopt});
  c.sample_interval = std::chrono::microseconds(50);
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectAllCompletedCleanly(*r);
  EXPECT_GT(r->paths[3].a_to_b.ce_injected, 0u);
  for (uint16_t p = 0; p < 3; ++p) EXPECT_EQ(r->paths[p].a_to_b.ce_injected, 0u);
  const PathSamples& ps = r->path_samples;
  ASSERT_EQ(ps.paths.size(), 4u);
  EXPECT_GT(ps.paths[3].ecn_alpha.back(), 0.2) << Describe(*r);
  for (uint16_t p = 0; p < 3; ++p) EXPECT_EQ(ps.paths[p].ecn_alpha.back(), 0) << p;
}

TEST(Scenario_Config, RefusesInvalidSettings) {
  ScenarioConfig c = SmallConfig();
  c.blackholes.push_back({5, TimeWindow{Instant{0}, Instant{10}}});
  EXPECT_FALSE(RunScenario(c).ok());
  c = SmallConfig();
  c.ack_every = 0;
  EXPECT_THAT(c.Validate().message(), ::testing::HasSubstr("--ack-every"));
}

// Source ports are unique within one connection direction, not across connections (spec
// wire-format §1): 10,000 connections of 8 paths between two hosts run, beyond the 16,384
// ephemeral ports, each connection's ports distinct.
TEST(Scenario_Config, TenThousandConnectionsOfEightPathsRun) {
  ScenarioConfig c = SmallConfig();
  c.physical_paths = 8;
  c.connections = 10'000;
  c.messages = 10'000;
  c.message_bytes = 1024;
  c.depth = 1;
  c.rate_gbps = 10'000;  // no queueing: what is checked is that every connection runs
  c.queue_bytes = uint64_t{1} << 30;
  c.ecn_threshold_bytes = uint64_t{1} << 30;
  ASSERT_TRUE(c.Validate().ok()) << c.Validate();
  absl::StatusOr<ScenarioResult> r = RunScenario(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->messages_completed, 10'000u) << Describe(*r);
  EXPECT_EQ(r->data_errors, 0u);
}

TEST(Scenario_Report, MeasurementsOnlyWhenAskedFor) {
  ScenarioConfig c = SmallConfig();
  absl::StatusOr<ScenarioResult> plain = RunScenario(c);
  c.measure = true;
  absl::StatusOr<ScenarioResult> measured = RunScenario(c);
  ASSERT_TRUE(plain.ok() && measured.ok());
  EXPECT_THAT(ResultToJson(*plain), ::testing::Not(::testing::HasSubstr("\"measured\"")));
  const std::string json = ResultToJson(*measured);
  for (const char* key : {"\"measured\":{", "\"run_wall_s\"", "\"events_per_wall_s\"",
                          "\"run_cpu_s\"", "\"events_per_cpu_s\"",
                          "\"core_heap_bytes_per_connection\""}) {
    EXPECT_THAT(json, ::testing::HasSubstr(key));
  }
#if !defined(__SANITIZE_ADDRESS__)  // ASan's malloc is not counted by glibc's mallinfo2
  EXPECT_GT(measured->core_heap_bytes_per_connection, 0u);
#endif
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
