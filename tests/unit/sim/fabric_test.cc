#include "tools/sim/fabric.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::sim {
namespace {

using std::chrono::microseconds;

LinkConfig TestLink() {
  LinkConfig c;
  c.rate_gbps = 100;  // 100 bits/ns: 1000 wire bytes take 80 ns
  c.delay = microseconds(1);
  c.queue_bytes = 3000;
  c.ecn_threshold_bytes = 1500;
  return c;
}

TEST(Link_Serialization, DepartureIsMaxOfNowAndBusyPlusBitsOverRate) {
  Link link(TestLink());
  const Transmission first = link.Send(Instant{0}, 1000);
  const Transmission second = link.Send(Instant{0}, 1000);
  const Transmission later = link.Send(Instant{10'000}, 1000);  // link idle again
  ASSERT_EQ(first.drop, DropCause::kNone);
  EXPECT_EQ(first.arrival.ns, 80 + 1000);
  EXPECT_EQ(second.arrival.ns, 160 + 1000);
  EXPECT_EQ(later.arrival.ns, 10'000 + 80 + 1000);
  EXPECT_EQ(link.counters().tx_bytes, 3000u);
  EXPECT_EQ(link.counters().busy_ps, 3 * 80'000);
}

TEST(Link_Serialization, FractionalTimesDoNotDrift) {
  LinkConfig c = TestLink();
  c.rate_gbps = 3;  // 1000 bytes = 2666.67 ns
  c.queue_bytes = 1u << 30;
  Link link(c);
  Transmission last;
  for (int i = 0; i < 3000; ++i) last = link.Send(Instant{0}, 1000);
  // 3000 packets = 8e6 ns exactly; rounding per packet would be off by ~1000 ns.
  EXPECT_NEAR(static_cast<double>(last.arrival.ns), 8'000'000.0 + 1000.0, 2.0);
}

TEST(Link_TailDrop, DropsWhenBacklogPlusPacketExceedsQueue) {
  Link link(TestLink());
  EXPECT_EQ(link.Send(Instant{0}, 1000).drop, DropCause::kNone);  // backlog 0
  EXPECT_EQ(link.Send(Instant{0}, 1000).drop, DropCause::kNone);  // backlog 1000
  EXPECT_EQ(link.Send(Instant{0}, 1000).drop, DropCause::kNone);  // backlog 2000, fits exactly
  EXPECT_EQ(link.Send(Instant{0}, 1000).drop, DropCause::kTailDrop);
  EXPECT_EQ(link.counters().dropped_tail, 1u);
  EXPECT_EQ(link.counters().tx_packets, 3u);
  // Half the backlog drained: room again.
  EXPECT_EQ(link.BacklogBytes(Instant{120}), 1500u);
  EXPECT_EQ(link.Send(Instant{120}, 1000).drop, DropCause::kNone);
}

TEST(Link_Ecn, MarksWhenBacklogExceedsThreshold) {
  Link link(TestLink());
  EXPECT_FALSE(link.Send(Instant{0}, 1000).ce);  // backlog 0
  EXPECT_FALSE(link.Send(Instant{0}, 1000).ce);  // backlog 1000
  EXPECT_TRUE(link.Send(Instant{0}, 1000).ce);   // backlog 2000 > 1500
  EXPECT_EQ(link.counters().ce_marked, 1u);
  EXPECT_FALSE(link.Send(Instant{1'000'000}, 1000).ce);
}

TEST(Link_CeInjection, MarksOnlyInsideItsWindowWithItsProbability) {
  LinkConfig c = TestLink();
  c.queue_bytes = 1u << 30;
  c.ecn_threshold_bytes = 1u << 30;  // the queue itself never marks
  c.ce_injections.push_back({1.0, TimeWindow{Instant{10'000}, Instant{20'000}}});
  c.ce_injections.push_back({0.5, TimeWindow{Instant{100'000}, Instant{1'100'000}}});
  Link link(c);
  EXPECT_FALSE(link.Send(Instant{9'999}, 100).ce);
  EXPECT_TRUE(link.Send(Instant{10'000}, 100).ce);
  EXPECT_TRUE(link.Send(Instant{19'999}, 100).ce);
  EXPECT_FALSE(link.Send(Instant{20'000}, 100).ce);
  int marked = 0;
  for (int i = 0; i < 1000; ++i) marked += link.Send(Instant{100'000 + i * 1000}, 100).ce;
  EXPECT_GT(marked, 400);
  EXPECT_LT(marked, 600);
  EXPECT_EQ(link.counters().ce_injected, static_cast<uint64_t>(2 + marked));
  EXPECT_EQ(link.counters().ce_marked, link.counters().ce_injected);
}

TEST(Link_CeInjection, LeavesTheLossStreamAligned) {
  LinkConfig c = TestLink();
  c.queue_bytes = 1u << 30;
  c.loss_probability = 0.3;
  LinkConfig marked = c;
  marked.ce_injections.push_back({0.5, TimeWindow{Instant{0}, core::kNever}});
  Link plain(c), injected(marked);
  for (int i = 0; i < 500; ++i) {
    const Instant t{i * 1000};
    EXPECT_EQ(plain.Send(t, 100).drop, injected.Send(t, 100).drop) << i;
  }
  EXPECT_GT(injected.counters().ce_injected, 0u);
}

TEST(Link_Blackhole, DropsOnlyWhatOverlapsTheWindow) {
  LinkConfig c = TestLink();
  c.blackholes.push_back({Instant{10'000}, Instant{20'000}});
  Link link(c);
  EXPECT_EQ(link.Send(Instant{5'000}, 100).drop, DropCause::kNone);        // arrives 6008
  EXPECT_EQ(link.Send(Instant{9'500}, 100).drop, DropCause::kBlackhole);   // in flight at 10000
  EXPECT_EQ(link.Send(Instant{10'000}, 100).drop, DropCause::kBlackhole);  // window start
  EXPECT_EQ(link.Send(Instant{19'999}, 100).drop, DropCause::kBlackhole);
  EXPECT_EQ(link.Send(Instant{20'000}, 100).drop, DropCause::kNone);  // window end is open
  EXPECT_EQ(link.counters().dropped_blackhole, 3u);
  // Offered inside the window: no link time spent.
  EXPECT_EQ(link.counters().tx_packets, 3u);
}

TEST(Link_RandomLoss, SameSeedSameDropsAndRateNearP) {
  LinkConfig c = TestLink();
  c.loss_probability = 0.1;
  c.queue_bytes = 1u << 30;
  c.seed = 42;
  Link a(c), b(c);
  int drops = 0;
  for (int i = 0; i < 20000; ++i) {
    const Transmission ta = a.Send(Instant{i * 1000}, 100);
    const Transmission tb = b.Send(Instant{i * 1000}, 100);
    ASSERT_EQ(ta.drop, tb.drop) << "packet " << i;
    drops += ta.drop == DropCause::kRandomLoss;
  }
  EXPECT_NEAR(drops / 20000.0, 0.1, 0.01);
  // Another seed draws another pattern.
  LinkConfig reseeded = c;
  reseeded.seed = 43;
  Link x(c), y(reseeded);
  int differences = 0;
  for (int i = 0; i < 1000; ++i) {
    differences += x.Send(Instant{i * 1000}, 100).drop != y.Send(Instant{i * 1000}, 100).drop;
  }
  EXPECT_GT(differences, 0);
}

TEST(Fabric_Ecmp, PathIsSumOfPortsModuloPathCount) {
  EventQueue queue;
  std::vector<Datagram> delivered;
  std::vector<int64_t> times;
  std::vector<PhysicalPathConfig> paths(4, PhysicalPathConfig{TestLink(), TestLink()});
  paths[2].a_to_b.queue_bytes = 1u << 20;
  Fabric fabric(paths, queue, [&](Datagram& d) {
    delivered.push_back(d);
    times.push_back(queue.now().ns);
  });
  core::TxMeta meta;
  meta.src_port = 49154;  // (49154 + 4792) % 4 == 2
  meta.dst_port = 4792;
  meta.plane = 1;
  std::vector<std::byte> bytes(958, std::byte{0x5a});  // 958 + 42 headers + 24 framing = 1024
  const Fabric::SendResult sent = fabric.Send(Direction::kAToB, meta, bytes);
  EXPECT_EQ(sent.physical_path, 2);
  EXPECT_EQ(fabric.PhysicalPathFor(49155, 4792), 3);
  while (queue.RunNext()) {
  }
  ASSERT_EQ(delivered.size(), 1u);
  EXPECT_EQ(delivered[0].physical_path, 2);
  EXPECT_EQ(delivered[0].direction, Direction::kAToB);
  EXPECT_EQ(delivered[0].meta.src_port, 49154);
  EXPECT_EQ(delivered[0].meta.dst_port, 4792);
  EXPECT_EQ(delivered[0].meta.plane, 1);
  EXPECT_FALSE(delivered[0].meta.ce);
  EXPECT_EQ(delivered[0].bytes, bytes);
  // 1024 wire bytes at 100 Gb/s = 81.92 ns (rounded up) + 1 us.
  EXPECT_EQ(times[0], 1082);
  EXPECT_EQ(fabric.link(2, Direction::kAToB).counters().tx_bytes, 1024u);
  EXPECT_EQ(fabric.link(2, Direction::kBToA).counters().tx_packets, 0u);
}

TEST(Fabric_Determinism, SameInputsSameArrivals) {
  auto run = [] {
    EventQueue queue;
    std::vector<std::pair<int64_t, uint16_t>> log;
    LinkConfig lossy = TestLink();
    lossy.loss_probability = 0.2;
    lossy.queue_bytes = 64 * 1024;
    std::vector<PhysicalPathConfig> paths(3, PhysicalPathConfig{lossy, lossy});
    for (uint16_t p = 0; p < 3; ++p) paths[p].a_to_b.seed = 100 + p;
    Fabric fabric(paths, queue,
                  [&](Datagram& d) { log.emplace_back(queue.now().ns, d.physical_path); });
    for (int i = 0; i < 300; ++i) {
      queue.Schedule(Instant{i * 37}, [&, i] {
        core::TxMeta meta;
        meta.src_port = static_cast<uint16_t>(50000 + i);
        meta.dst_port = 4792;
        fabric.Send(Direction::kAToB, meta, std::vector<std::byte>(1000 + i));
      });
    }
    while (queue.RunNext()) {
    }
    return log;
  };
  const auto first = run();
  EXPECT_EQ(first, run());
  EXPECT_LT(first.size(), 300u);
  EXPECT_GT(first.size(), 150u);
}

}  // namespace
}  // namespace metaroce::sim
