// The cluster run (mrsim --topology leaf-spine): the real core on every host of a leaf-spine
// fabric. Every workload completes with every byte verified and never faster than its ideal;
// the verifier catches a wrong byte; PFC pauses and drops nothing; a spine that dies mid-run is
// survived by MetaRoCE; the JSON is a function of the config. The incast figures agree with each
// other and with the run, and the timeline is read without changing the run.
#include "tools/sim/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/wire/packet.h"
#include "tools/sim/cli_options.h"

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

// --loss: every link of the cluster drops packets at random, both directions (issue 36 §4: the
// pair model's --loss, in the cluster too); the run still completes with every byte verified, and
// a loss fault on one link replaces the uniform loss there only for its window.
TEST(Cluster_Faults, UniformLossOnEveryLink) {
  ClusterConfig c = Small(Workload::kPermutation);
  c.fabric.loss_probability = 0.01;
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
  EXPECT_EQ(r->messages_failed, 0u);
  EXPECT_EQ(r->data_errors, 0u);
  EXPECT_GT(r->fabric.dropped[static_cast<size_t>(FabricDrop::kLoss)], 0u);
  EXPECT_GT(r->fabric.data_dropped[static_cast<size_t>(FabricDrop::kLoss)], 0u);
  c.fabric.loss_probability = 0;
  absl::StatusOr<ClusterResult> clean = RunCluster(c);
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(clean->fabric.dropped[static_cast<size_t>(FabricDrop::kLoss)], 0u);
  c.fabric.loss_probability = 1.5;
  EXPECT_FALSE(RunCluster(c).ok());
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
    c.receive_budget_bytes = 0;  // no receiver hints: the incast must fill the buffers
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

// --ack-every reaches the leaf-spine model's responders: the same bytes, fewer events (ACKs).
TEST(Cluster_AckEvery, CoalescesTheResponderAcks) {
  ClusterConfig c = Small(Workload::kPermutation);
  absl::StatusOr<ClusterResult> every2 = RunCluster(c);
  c.ack_every = 16;
  absl::StatusOr<ClusterResult> every16 = RunCluster(c);
  ASSERT_TRUE(every2.ok() && every16.ok());
  for (const ClusterResult* r : {&*every2, &*every16}) {
    EXPECT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
    EXPECT_EQ(r->data_errors, 0u);
    EXPECT_EQ(r->bytes_verified, every2->bytes_verified);
  }
  EXPECT_LT(every16->events, every2->events);
  EXPECT_THAT(ClusterResultToJson(*every16), ::testing::HasSubstr("\"ack_every\":16"));
  EXPECT_THAT(ClusterResultToJson(*every2), ::testing::HasSubstr("\"ack_every\":2"));
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

// A 16-host incast (15 senders, two planes): what the congestion evaluation reads (issue 13).
ClusterConfig Incast16() {
  ClusterConfig c;
  c.fabric.hosts = 16;
  c.fabric.hosts_per_leaf = 4;
  c.fabric.spines = 2;
  c.fabric.planes = 2;
  c.fabric.queue_bytes = 128 * 1024;  // small buffers: the incast drops
  c.fabric.ecn_threshold_bytes = 32 * 1024;
  c.workload = Workload::kIncast;
  c.incast_degree = 15;
  c.connections_per_pair = 2;
  c.message_bytes = 256 * 1024;
  c.paths = 4;
  c.duration_cap = std::chrono::seconds(1);
  c.timeline_bin = microseconds(10);
  // No receiver hints: the accounting below needs a run that drops data.
  c.receive_budget_bytes = 0;
  return c;
}

uint64_t DataDropped(const ClusterResult& r) {
  return std::accumulate(std::begin(r.fabric.data_dropped), std::end(r.fabric.data_dropped),
                         uint64_t{0});
}

// docs/spec/congestion.md §5: the same incast with every host's receive budget shared as window
// hints (the default) drops nothing, fails no path, and still completes every message.
TEST(Cluster_Incast, TheReceiversHintsHoldItWithoutDrops) {
  ClusterConfig c = Incast16();
  c.receive_budget_bytes.reset();
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
  EXPECT_EQ(r->messages_completed, 30u);
  EXPECT_EQ(r->data_errors, 0u);
  EXPECT_EQ(DataDropped(*r), 0u);
  EXPECT_EQ(r->paths_failed, 0u);
  EXPECT_EQ(r->port_rotations, 0u);
  const ClusterResult without = *RunCluster(Incast16());
  EXPECT_GT(DataDropped(without), 0u);
}

TEST(Cluster_Incast, FiguresAgreeWithEachOtherAndTheRun) {
  const ClusterConfig c = Incast16();
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->stop_reason, "done") << ClusterResultSummary(*r);
  ASSERT_EQ(r->messages_completed, 30u);
  EXPECT_EQ(r->data_errors, 0u);
  const uint64_t bytes = uint64_t{15} * c.message_bytes;
  EXPECT_EQ(r->workload_bytes_placed, bytes);
  // Data packets: at least one send of every packet; drops are data or not, by cause.
  EXPECT_GE(r->fabric.data_sent, bytes / c.mtu);
  EXPECT_GT(DataDropped(*r), 0u) << "small buffers under a 15-to-1 incast drop data";
  EXPECT_LE(DataDropped(*r), r->fabric.data_sent);
  for (size_t i = 0; i < static_cast<size_t>(FabricDrop::kCount); ++i) {
    EXPECT_LE(r->fabric.data_dropped[i], r->fabric.dropped[i]) << "cause " << i;
  }
  // Every data packet lost was sent again (or its message would not have completed).
  EXPECT_GE(r->fabric.data_sent, bytes / c.mtu + DataDropped(*r));
  // Message completion: every completed message, in order; one step, so the last is the step.
  EXPECT_EQ(r->messages_timed, r->messages_completed);
  EXPECT_GT(r->message_p50_us, 0);
  EXPECT_LE(r->message_p50_us, r->message_p99_us);
  EXPECT_LE(r->message_p99_us, r->message_max_us);
  EXPECT_DOUBLE_EQ(r->message_max_us, r->completion_us);
  EXPECT_DOUBLE_EQ(r->p99_vs_ideal, r->message_p99_us / r->ideal_us);
  EXPECT_GE(r->p99_vs_ideal, 1.0) << "p99 of 30 messages is the last one, never below the ideal";
  EXPECT_LE(r->paths_failed, r->path_state_changes);
  // Goodput against host 0's two links, payload only: below 1.
  const double link_gbps = c.fabric.host_gbps * c.fabric.planes;
  EXPECT_NEAR(r->goodput_vs_receiver_link,
              static_cast<double>(bytes) * 8 / (r->completion_us * 1000 * link_gbps), 1e-9);
  EXPECT_GT(r->goodput_vs_receiver_link, 0.05);
  EXPECT_LT(r->goodput_vs_receiver_link, 1.0);
  // One flow per sender: Jain over senders is Jain over flows.
  EXPECT_DOUBLE_EQ(r->jain_over_senders, r->jain_fairness);
  EXPECT_GT(r->jain_over_senders, 0);
  EXPECT_LE(r->jain_over_senders, 1.0 + 1e-12);

  // The timeline: arrays of one length, bins end to end, the last covering the run's end.
  ASSERT_TRUE(r->has_timeline);
  const ClusterTimeline& tl = r->timeline;
  EXPECT_EQ(tl.bin_us, 10);
  EXPECT_EQ(tl.connections_sampled, 30u);
  const size_t n = tl.samples();
  ASSERT_GT(n, 10u);
  for (size_t len : {tl.rx_bytes.size(), tl.rx_gbps.size(), tl.queue_kb_max.size(),
                     tl.receiver_queue_kb.size(), tl.cwnd_kb_mean.size(),
                     tl.window_kb_mean.size(), tl.inflight_kb_total.size()}) {
    EXPECT_EQ(len, n);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(tl.t_us[i], 10.0 * static_cast<double>(i + 1));
  EXPECT_GE(tl.t_us.back(), r->completion_us);
  EXPECT_LT(tl.t_us.back() - tl.bin_us, r->completion_us);
  // What the timeline received is what was placed; in Gb/s, within one bin's worth.
  EXPECT_EQ(std::accumulate(tl.rx_bytes.begin(), tl.rx_bytes.end(), uint64_t{0}), bytes);
  const double rx_bytes =
      std::accumulate(tl.rx_gbps.begin(), tl.rx_gbps.end(), 0.0) * tl.bin_us * 1000 / 8;
  EXPECT_NEAR(rx_bytes, static_cast<double>(bytes), tl.bin_us * 1000 * link_gbps / 8);
  double deepest_receiver_queue = 0, peak_inflight = 0;
  for (size_t i = 0; i < n; ++i) {
    // Host 0's links deliver at most their line rate (one packet per plane of slack at a bin's
    // edge).
    EXPECT_LE(tl.rx_gbps[i], link_gbps + c.fabric.planes * c.mtu * 8 / (tl.bin_us * 1000))
        << "bin " << i;
    EXPECT_LE(tl.queue_kb_max[i] * 1024, static_cast<double>(c.fabric.queue_bytes)) << i;
    EXPECT_LE(tl.receiver_queue_kb[i], c.fabric.planes * tl.queue_kb_max[i] + 1e-9) << i;
    EXPECT_GE(tl.cwnd_kb_mean[i], 0);
    EXPECT_LE(tl.window_kb_mean[i], tl.cwnd_kb_mean[i] + 1e-9) << i;
    deepest_receiver_queue = std::max(deepest_receiver_queue, tl.receiver_queue_kb[i]);
    peak_inflight = std::max(peak_inflight, tl.inflight_kb_total[i]);
  }
  EXPECT_GT(deepest_receiver_queue, 32) << "the incast's bottleneck is host 0's downlinks";
  EXPECT_GT(peak_inflight, 0);
  EXPECT_GT(tl.cwnd_kb_mean.front(), 0);
}

// Sampling schedules nothing: with and without a timeline the run is the same, events included;
// and the JSON with a timeline is a function of the config.
TEST(Cluster_Incast, TheTimelineDoesNotChangeTheRun) {
  ClusterConfig c = Incast16();
  absl::StatusOr<ClusterResult> with = RunCluster(c);
  absl::StatusOr<ClusterResult> again = RunCluster(c);
  c.timeline_bin = Duration(0);
  absl::StatusOr<ClusterResult> without = RunCluster(c);
  ASSERT_TRUE(with.ok() && again.ok() && without.ok());
  const std::string json = ClusterResultToJson(*with);
  EXPECT_EQ(json, ClusterResultToJson(*again));
  EXPECT_THAT(json, ::testing::HasSubstr("\"timeline\":{"));
  EXPECT_THAT(ClusterResultToJson(*without), ::testing::Not(::testing::HasSubstr("timeline")));
  EXPECT_EQ(with->events, without->events);
  ClusterResult stripped = *with;
  stripped.config.timeline_bin = Duration(0);
  stripped.has_timeline = false;
  EXPECT_EQ(ClusterResultToJson(stripped), ClusterResultToJson(*without));
}

// A run longer than timeline_max_samples bins doubles the bin: the samples kept are those of the
// narrow timeline at the wide bins' ends, and the bytes of the bins they merged add up.
TEST(Cluster_Incast, ALongRunWidensTheBinAndKeepsTheSamples) {
  ClusterConfig c = Incast16();
  c.timeline_bin = microseconds(1);
  c.timeline_max_samples = 1'000'000;
  absl::StatusOr<ClusterResult> narrow = RunCluster(c);
  ASSERT_TRUE(narrow.ok());
  const ClusterTimeline& a = narrow->timeline;
  ASSERT_GT(a.samples(), 200u);
  EXPECT_EQ(a.bin_us, 1);
  // 24: widened at 25 samples, an odd one left over whose bytes go into the next; 25: at 26.
  for (uint32_t cap : {24u, 25u}) {
    SCOPED_TRACE(cap);
    c.timeline_max_samples = cap;
    absl::StatusOr<ClusterResult> wide = RunCluster(c);
    ASSERT_TRUE(wide.ok());
    const ClusterTimeline& b = wide->timeline;
    EXPECT_EQ(b.requested_bin_us, 1);
    EXPECT_LE(b.samples(), cap);
    EXPECT_GT(b.samples(), cap / 2) << "widened no more than needed";
    EXPECT_EQ(std::exp2(std::round(std::log2(b.bin_us))), b.bin_us) << "a power of two";
    EXPECT_LT(b.bin_us * static_cast<double>(b.samples() - 1), narrow->completion_us);
    EXPECT_EQ(std::accumulate(b.rx_bytes.begin(), b.rx_bytes.end(), uint64_t{0}),
              wide->workload_bytes_placed);
    const size_t ratio = static_cast<size_t>(b.bin_us);
    for (size_t i = 0; i + 1 < b.samples(); ++i) {  // the last covers the run's end: not aligned
      const size_t j = (i + 1) * ratio - 1;         // the narrow sample at the same time
      ASSERT_LT(j, a.samples());
      EXPECT_DOUBLE_EQ(b.t_us[i], a.t_us[j]);
      EXPECT_DOUBLE_EQ(b.queue_kb_max[i], a.queue_kb_max[j]);
      EXPECT_DOUBLE_EQ(b.receiver_queue_kb[i], a.receiver_queue_kb[j]);
      EXPECT_DOUBLE_EQ(b.cwnd_kb_mean[i], a.cwnd_kb_mean[j]);
      EXPECT_DOUBLE_EQ(b.window_kb_mean[i], a.window_kb_mean[j]);
      EXPECT_DOUBLE_EQ(b.inflight_kb_total[i], a.inflight_kb_total[j]);
      uint64_t merged = 0;
      for (size_t k = j + 1 - ratio; k <= j; ++k) merged += a.rx_bytes[k];
      EXPECT_EQ(b.rx_bytes[i], merged) << "bin " << i;
    }
  }
}

// Other workloads: data drops by cause under random loss, Jain over senders is Jain over flows,
// goodput against host 0's link means nothing (null), and the timeline counts every host.
TEST(Cluster_Incast, OtherWorkloadsReportTheSameKeys) {
  ClusterConfig c = Small(Workload::kPermutation);
  c.message_bytes = 256 * 1024;
  FabricFault loss;
  loss.kind = FabricFault::Kind::kLoss;
  loss.whole_spine = true;
  loss.spine = 0;
  loss.loss_probability = 0.05;
  c.faults.push_back(loss);
  c.timeline_bin = microseconds(5);
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->stop_reason, "done");
  const size_t kLoss = static_cast<size_t>(FabricDrop::kLoss);
  EXPECT_GT(r->fabric.data_dropped[kLoss], 0u);
  EXPECT_LT(r->fabric.data_dropped[kLoss], r->fabric.dropped[kLoss]) << "ACKs are lost too";
  EXPECT_EQ(r->fabric.data_dropped[kLoss], DataDropped(*r));
  EXPECT_TRUE(std::isnan(r->goodput_vs_receiver_link));
  EXPECT_EQ(r->jain_over_senders, r->jain_fairness);
  EXPECT_EQ(r->messages_timed, 16u);
  EXPECT_GE(r->p99_vs_ideal, 1.0);
  const std::string json = ClusterResultToJson(*r);
  EXPECT_THAT(json, ::testing::HasSubstr("\"goodput_vs_receiver_link\":null"));
  EXPECT_THAT(json, ::testing::HasSubstr("\"data_packets_dropped\":"));
  const ClusterTimeline& tl = r->timeline;
  EXPECT_EQ(std::accumulate(tl.rx_bytes.begin(), tl.rx_bytes.end(), uint64_t{0}),
            r->bytes_verified);
  EXPECT_EQ(r->workload_bytes_placed, r->bytes_verified);
}

TEST(Cluster_Incast, TimelineFlag) {
  auto parse = [](std::vector<const char*> args) {
    return ParseCommandLine(std::span<const char* const>(args.data(), args.size()));
  };
  absl::StatusOr<CommandLine> off = parse({"--topology", "leaf-spine"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->cluster_config.timeline_bin, Duration(0));
  absl::StatusOr<CommandLine> on = parse({"--topology", "leaf-spine", "--timeline-us", "2.5"});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->cluster_config.timeline_bin, Duration(2500));
  EXPECT_FALSE(parse({"--topology", "leaf-spine", "--timeline-us=-1"}).ok());
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
  c = Small(Workload::kPermutation);
  c.ack_every = 0;
  EXPECT_THAT(c.Validate().message(), ::testing::HasSubstr("--ack-every"));
}

// RoCE as deployed (--transport gbn --fabric lossless --cc dcqcn): N senders into host 0's one
// port. Checked against the DCQCN paper's behaviour (Zhu et al., SIGCOMM 2015, §5): the senders
// converge to a fair share, and the queue at the receiver's port is held down by ECN marking,
// not at the PFC limit. The same incast without congestion control (--cc none) is the contrast
// that shows both measures can fail: its queue stands at PFC's threshold.
struct IncastShares {
  double jain = 0;            // over the senders' bytes delivered in the run's last part
  double queue_kb_median = 0; // host 0's downlink, over the last half of the timeline
  ClusterResult result;
};

IncastShares RunIncastInto0(const char* cc, uint32_t senders, const char* size) {
  const std::string degree = std::to_string(senders);
  const std::vector<const char*> args = {
      "--topology", "leaf-spine", "--hosts", "32", "--hosts-per-leaf", "16", "--spines", "4",
      "--workload", "incast", "--incast-degree", degree.c_str(), "--size", size,
      "--fabric", "lossless", "--transport", "gbn", "--cc", cc, "--timeline-us", "20"};
  absl::StatusOr<CommandLine> cl =
      ParseCommandLine(std::span<const char* const>(args.data(), args.size()));
  EXPECT_TRUE(cl.ok()) << cl.status();
  ClusterConfig c = cl->cluster_config;
  // The run's last part, measured in bytes rather than time: from when host 0 has received
  // half of everything until the first sender has delivered all of its bytes. Over that
  // stretch every sender was sending, so their bytes delivered are their rates.
  const uint64_t total = uint64_t{senders} * c.message_bytes;
  std::vector<uint64_t> sent_by(c.fabric.hosts, 0), late_by(c.fabric.hosts, 0);
  uint64_t delivered = 0;
  bool someone_done = false;
  c.on_delivery = [&](FabricPacket& p) {
    if (!p.data || p.dst_host != 0) return;
    const uint64_t payload = p.bytes.size() + p.payload.size() - wire::kDataHeadersSize;
    delivered += payload;
    sent_by[p.src_host] += payload;
    if (!someone_done && delivered >= total / 2) late_by[p.src_host] += payload;
    if (sent_by[p.src_host] >= c.message_bytes) someone_done = true;
  };
  absl::StatusOr<ClusterResult> r = RunCluster(c);
  EXPECT_TRUE(r.ok()) << r.status();
  IncastShares out;
  out.result = *r;
  double sum = 0, squares = 0;
  for (uint32_t h = 1; h <= senders; ++h) {
    sum += static_cast<double>(late_by[h]);
    squares += static_cast<double>(late_by[h]) * static_cast<double>(late_by[h]);
  }
  out.jain = squares > 0 ? sum * sum / (senders * squares) : 0;
  const std::vector<double>& q = r->timeline.receiver_queue_kb;
  std::vector<double> late(q.begin() + static_cast<ptrdiff_t>(q.size() / 2), q.end());
  std::sort(late.begin(), late.end());
  out.queue_kb_median = late.empty() ? 0 : late[late.size() / 2];
  return out;
}

class Cluster_Dcqcn : public ::testing::TestWithParam<uint32_t> {};

TEST_P(Cluster_Dcqcn, SendersConvergeToAFairShareWithTheQueueHeldBelowPfc) {
  const uint32_t senders = GetParam();
  // Long enough to converge from the line-rate start: 16 senders fill the PFC-paused NICs first.
  const char* size = senders == 2 ? "32M" : "8M";  // 5.5 and 11 ms of host 0's link
  const IncastShares dcqcn = RunIncastInto0("dcqcn", senders, size);
  const IncastShares none = RunIncastInto0("none", senders, size);
  for (const IncastShares* run : {&dcqcn, &none}) {
    EXPECT_EQ(run->result.stop_reason, "done");
    EXPECT_EQ(run->result.data_errors, 0u);
    EXPECT_EQ(run->result.retransmits, 0u) << "PFC: nothing is lost";
  }
  EXPECT_GT(dcqcn.result.cnps, 0u);
  EXPECT_GT(dcqcn.jain, 0.98) << "fair share over the run's last part";
  // PFC pauses a leaf's ingress above 96 KiB: without congestion control the port's queue
  // stands there (and above, one XOFF per ingress port feeding it); DCQCN holds it within its
  // RED range (5-200 KiB) well below that.
  const double xoff_kb = static_cast<double>(dcqcn.result.config.fabric.pfc_xoff_bytes) / 1024;
  EXPECT_LT(dcqcn.queue_kb_median, xoff_kb / 2) << "DCQCN holds the queue low";
  EXPECT_GT(none.queue_kb_median, xoff_kb) << "without CC the queue stands at PFC's limit";
  // ... without starving the port: a rate control that held the queue low by collapsing the
  // rates (or never recovering them) would pass the two checks above.
  EXPECT_GT(dcqcn.result.vs_ideal, 0.75) << "DCQCN keeps host 0's link mostly busy";
  std::printf("[ dcqcn %2u ] jain %.4f (none %.4f), receiver queue median %.1f KiB (none %.1f), "
              "vs_ideal %.3f (none %.3f), cnps %llu, pause %.0f us (none %.0f)\n",
              senders, dcqcn.jain, none.jain, dcqcn.queue_kb_median, none.queue_kb_median,
              dcqcn.result.vs_ideal, none.result.vs_ideal,
              static_cast<unsigned long long>(dcqcn.result.cnps),
              static_cast<double>(dcqcn.result.fabric.paused_ns) / 1000,
              static_cast<double>(none.result.fabric.paused_ns) / 1000);
}

INSTANTIATE_TEST_SUITE_P(Senders, Cluster_Dcqcn, ::testing::Values(2u, 16u),
                         [](const auto& info) { return std::to_string(info.param); });

TEST(Cluster_Dcqcn, IsTheGoBackNProfilesAndLeavesTheJsonOfOthersAlone) {
  ClusterConfig c = Small(Workload::kPermutation);
  c.cc = CongestionKind::kDcqcn;
  EXPECT_THAT(c.Validate().message(), ::testing::HasSubstr("--transport gbn"));
  c.transport = TransportKind::kGoBackN;
  EXPECT_TRUE(c.Validate().ok());
  // The default (the core's window) prints neither cc nor cnps nor RED's fields: runs before
  // DCQCN existed keep their JSON byte for byte.
  const ClusterConfig plain = Small(Workload::kPermutation);
  absl::StatusOr<ClusterResult> r = RunCluster(plain);
  ASSERT_TRUE(r.ok());
  const std::string json = ClusterResultToJson(*r);
  for (const char* key : {"\"cc\"", "\"cnps\"", "\"ecn_pmax\"", "\"ecn_kmax_kb\""}) {
    EXPECT_THAT(json, ::testing::Not(::testing::HasSubstr(key)));
  }
}

}  // namespace
}  // namespace metaroce::sim
