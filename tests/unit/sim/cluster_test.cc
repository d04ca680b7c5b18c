// The cluster run (mrsim --topology leaf-spine): the real core on every host of a leaf-spine
// fabric. Every workload completes with every byte verified and never faster than its ideal;
// the verifier catches a wrong byte; PFC pauses and drops nothing; a spine that dies mid-run is
// survived by MetaRoCE; the JSON is a function of the config.
#include "tools/sim/cluster.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/wire/packet.h"

namespace metaroce::sim {
namespace {

using std::chrono::microseconds;

ClusterConfig Small(Workload w) {
  ClusterConfig c;
  c.fabric.hosts = 8;
  c.fabric.hosts_per_leaf = 2;
  c.fabric.spines = 2;
  c.fabric.planes = 2;
  c.workload = w;
  c.message_bytes = 64 * 1024;
  c.steps = 2;
  c.incast_degree = 4;
  c.paths = 4;
  c.duration_cap = std::chrono::seconds(1);
  return c;
}

uint64_t Flows(const ClusterConfig& c) {
  switch (c.workload) {
    case Workload::kPair: return 1;
    case Workload::kIncast: return c.incast_degree;
    case Workload::kAllToAll: return uint64_t{c.fabric.hosts} * (c.fabric.hosts - 1);
    default: return c.fabric.hosts;
  }
}

class Cluster_Workloads : public ::testing::TestWithParam<Workload> {};

TEST_P(Cluster_Workloads, CompleteWithEveryByteVerifiedAndNeverFasterThanIdeal) {
  const ClusterConfig c = Small(GetParam());
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
  EXPECT_EQ(r->data_errors, 0u) << ClusterResultToJson(*r);
  const bool ring = c.workload == Workload::kAllReduceRing;
  const uint64_t steps = ring ? c.steps * 2 * (c.fabric.hosts - 1) : c.steps;
  const uint64_t per_flow = ring ? c.message_bytes / c.fabric.hosts : c.message_bytes;
  EXPECT_EQ(r->messages_completed, Flows(c) * steps);
  EXPECT_EQ(r->bytes_verified, Flows(c) * steps * per_flow);
  EXPECT_EQ(r->steps_completed, steps);
  EXPECT_GT(r->vs_ideal, 0.05);
  EXPECT_LE(r->vs_ideal, 1.0) << "the ideal is a lower bound on completion";
}

INSTANTIATE_TEST_SUITE_P(All, Cluster_Workloads,
                         ::testing::Values(Workload::kPair, Workload::kPermutation,
                                           Workload::kIncast, Workload::kAllToAll,
                                           Workload::kAllReduceRing),
                         [](const auto& info) {
                           std::string name(WorkloadName(info.param));
                           std::erase(name, '-');
                           return name;
                         });

TEST(Cluster_Transports, GoBackNAndReorderRunOnBothFabrics) {
  for (TransportKind t : {TransportKind::kGoBackN, TransportKind::kReorderBuffer}) {
    for (bool lossless : {false, true}) {
      ClusterConfig c = Small(Workload::kPermutation);
      c.transport = t;
      c.fabric.lossless = lossless;
      absl::StatusOr<ClusterResult> r = RunCluster(c);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
      EXPECT_EQ(r->data_errors, 0u);
      EXPECT_EQ(r->messages_completed, 16u);
    }
  }
}

TEST(Cluster_Verifier, CatchesAWrongByte) {
  ClusterConfig c = Small(Workload::kPair);
  int corrupted = 0;
  c.on_delivery = [&corrupted](FabricPacket& p) {
    if (corrupted == 0 && p.bytes.size() > wire::kDataHeadersSize + 100) {
      p.bytes[wire::kDataHeadersSize + 100] ^= std::byte{1};
      ++corrupted;
    }
  };
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(corrupted, 1);
  EXPECT_EQ(r->data_errors, 1u);
  EXPECT_EQ(r->data_errors_by_kind.count("wrong_bytes"), 1u);
}

// An incast on a lossless fabric: PFC pauses, nothing is dropped, every byte arrives.
TEST(Cluster_Lossless, IncastPausesAndDropsNothing) {
  ClusterConfig c = Small(Workload::kIncast);
  c.transport = TransportKind::kGoBackN;
  c.fabric.lossless = true;
  c.fabric.pfc_xoff_bytes = 32 * 1024;
  c.fabric.pfc_xon_bytes = 16 * 1024;
  c.incast_degree = 7;
  c.message_bytes = 256 * 1024;
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "done");
  EXPECT_EQ(r->data_errors, 0u);
  EXPECT_GT(r->fabric.pauses, 0u);
  for (uint64_t d : r->fabric.dropped) EXPECT_EQ(d, 0u);
  EXPECT_EQ(r->retransmits, 0u);
}

// A spine dies mid-run and stays dead, routing never reconverges: MetaRoCE's paths through it
// fail, rotate onto the other spine and every message completes.
TEST(Cluster_Faults, MetaRoceSurvivesASpineDyingMidRun) {
  ClusterConfig c = Small(Workload::kPermutation);
  c.message_bytes = 512 * 1024;
  c.steps = 3;
  FabricFault f;
  f.kind = FabricFault::Kind::kBlackhole;
  f.whole_spine = true;
  f.plane = 0;
  f.spine = 1;
  f.window = {Instant{0} + microseconds(20), core::kNever};
  c.faults.push_back(f);
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
  EXPECT_EQ(r->messages_failed, 0u);
  EXPECT_EQ(r->data_errors, 0u);
  EXPECT_GT(r->fabric.dropped[static_cast<size_t>(FabricDrop::kDown)], 0u);
  EXPECT_GT(r->port_rotations, 0u);
}

// An incast into host 0 beside a permutation on a lossless fabric: the pauses it causes hold the
// permutation's flows (victims, most of them not going to host 0), whose steps take longer than
// without it; the incast itself keeps going until the permutation ends and is not in its figures.
TEST(Cluster_Lossless, ABackgroundIncastSlowsTheWorkloadsFlows) {
  auto run = [](uint32_t background) {
    ClusterConfig c = Small(Workload::kPermutation);
    c.fabric.lossless = true;
    c.fabric.pfc_xoff_bytes = 32 * 1024;
    c.fabric.pfc_xon_bytes = 16 * 1024;
    c.message_bytes = 256 * 1024;
    c.background_incast = background;
    absl::StatusOr<ClusterResult> r = RunCluster(c);
    EXPECT_TRUE(r.ok());
    return *r;
  };
  const ClusterResult alone = run(0);
  const ClusterResult beside = run(4);
  EXPECT_EQ(alone.background_messages_completed, 0u);
  EXPECT_GT(beside.background_messages_completed, 0u);
  EXPECT_EQ(beside.messages_completed, 16u);
  EXPECT_EQ(beside.data_errors, 0u);
  EXPECT_EQ(beside.ideal_us, alone.ideal_us);  // the ideal is the workload's alone
  EXPECT_GT(beside.fabric.pauses, alone.fabric.pauses);
  EXPECT_GT(beside.step_p99_us, 1.3 * alone.step_p99_us)
      << "alone " << alone.step_p99_us << " us, beside an incast " << beside.step_p99_us << " us";
}

TEST(Cluster_Determinism, SameConfigSameJson) {
  ClusterConfig c = Small(Workload::kPermutation);
  FabricFault loss;
  loss.kind = FabricFault::Kind::kLoss;
  loss.whole_spine = true;
  loss.spine = 0;
  loss.loss_probability = 0.02;
  c.faults.push_back(loss);
  absl::StatusOr<ClusterResult> a = RunCluster(c);
  absl::StatusOr<ClusterResult> b = RunCluster(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ClusterResultToJson(*a), ClusterResultToJson(*b));
  EXPECT_GT(a->fabric.dropped[static_cast<size_t>(FabricDrop::kLoss)], 0u);
  c.seed = 2;
  absl::StatusOr<ClusterResult> other = RunCluster(c);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(ClusterResultToJson(*a), ClusterResultToJson(*other));
}

TEST(Cluster_Config, RefusesWhatCannotRun) {
  ClusterConfig c = Small(Workload::kIncast);
  c.incast_degree = 8;  // 8 hosts: at most 7 senders
  EXPECT_FALSE(c.Validate().ok());
  c = Small(Workload::kPermutation);
  c.fabric.hosts = 1;
  EXPECT_FALSE(c.Validate().ok());
  c = Small(Workload::kAllToAll);
  c.fabric.hosts = 4096;
  c.fabric.hosts_per_leaf = 32;
  EXPECT_FALSE(c.Validate().ok()) << "16.7 M connections";
}

}  // namespace
}  // namespace metaroce::sim
