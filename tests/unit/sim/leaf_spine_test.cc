// The leaf-spine fabric model: forwarding and timing hop by hop, ECMP by 5-tuple, tail drop and
// ECN in a lossy fabric, PFC in a lossless one (no drop, pauses that spread upstream and delay a
// victim flow), faults and routing reconvergence, determinism.
#include "tools/sim/leaf_spine.h"

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

constexpr size_t kPayload = 934;  // + 66 = 1000 wire bytes: 80 ns at 100 Gb/s

// 8 hosts, 4 per leaf (two leaves), 2 spines, 100 Gb/s everywhere, 1 us per hop.
LeafSpineConfig Small() {
  LeafSpineConfig c;
  c.hosts = 8;
  c.hosts_per_leaf = 4;
  c.spines = 2;
  c.hop_delay = microseconds(1);
  return c;
}

struct Arrival {
  Instant at;
  FabricPacket packet;
};

// A fabric on its own event queue, recording every delivery.
struct Net {
  explicit Net(const LeafSpineConfig& c)
      : fabric(c, queue, [this](FabricPacket& p) { arrivals.push_back({queue.now(), p}); }) {}
  void Send(uint32_t src, uint32_t dst, uint16_t src_port = 50000, uint8_t plane = 0,
            uint32_t tag = 0, bool data = false) {
    FabricPacket p;
    p.data = data;
    p.src_host = src;
    p.dst_host = dst;
    p.plane = plane;
    p.src_port = src_port;
    p.dst_port = 4791;
    p.bytes.assign(kPayload, std::byte{0});
    std::memcpy(p.bytes.data(), &tag, sizeof(tag));
    fabric.Send(std::move(p));
  }
  void RunUntil(Instant t) {
    while (!queue.empty() && queue.NextTime() <= t) queue.RunNext();
  }
  void Run() {
    while (queue.RunNext()) {
    }
  }
  uint64_t Dropped(FabricDrop why) const {
    return fabric.Totals().dropped[static_cast<size_t>(why)];
  }
  EventQueue queue;
  std::vector<Arrival> arrivals;
  LeafSpineFabric fabric;
};

uint32_t TagOf(const FabricPacket& p) {
  uint32_t tag;
  std::memcpy(&tag, p.bytes.data(), sizeof(tag));
  return tag;
}

TEST(LeafSpine_Config, RefusesWhatCannotBeBuilt) {
  LeafSpineConfig c = Small();
  EXPECT_TRUE(c.Validate().ok());
  c.hosts_per_leaf = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = Small();
  c.lossless = true;
  c.pfc_xon_bytes = c.pfc_xoff_bytes;
  EXPECT_FALSE(c.Validate().ok());
  c = Small();
  c.queue_bytes = 1000;
  EXPECT_FALSE(c.Validate().ok());
  c = Small();
  c.planes = 0;
  EXPECT_FALSE(c.Validate().ok());
  c = Small();
  c.ecn_pmax = 0.1;  // RED needs kmax above kmin
  EXPECT_FALSE(c.Validate().ok());
  c.ecn_kmax_bytes = c.ecn_threshold_bytes + 1;
  EXPECT_TRUE(c.Validate().ok());
  c.ecn_pmax = 1.5;
  EXPECT_FALSE(c.Validate().ok());
}

// Each hop costs a serialization at the hop's rate and a propagation delay: two hops under one
// leaf, four across the spines.
TEST(LeafSpine_Forwarding, TakesTwoHopsUnderALeafAndFourAcross) {
  Net n(Small());
  n.Send(0, 3, 50000, 0, 1);
  n.Send(0, 5, 50000, 0, 2);  // queued behind the first at host 0's NIC: 80 ns later
  n.Run();
  ASSERT_EQ(n.arrivals.size(), 2u);
  std::map<uint32_t, Instant> at;
  for (const Arrival& a : n.arrivals) at[TagOf(a.packet)] = a.at;
  EXPECT_EQ(at[1].ns, 2 * (80 + 1000));
  EXPECT_EQ(at[2].ns, 80 + 4 * (80 + 1000));
  EXPECT_EQ(n.arrivals[0].packet.dst_host, 3u);
  EXPECT_FALSE(n.arrivals[0].packet.ce);
}

// A host's NIC sends an ACK ahead of the data it has queued (a NIC's traffic classes); switches
// keep one FIFO. With nic_control_first off, the host's NIC is one FIFO too.
TEST(LeafSpine_NicQueues, AnAckOvertakesDataQueuedAtItsHostOnly) {
  for (const bool control_first : {true, false}) {
    LeafSpineConfig c = Small();
    c.nic_control_first = control_first;
    Net n(c);
    for (uint32_t i = 1; i <= 10; ++i) n.Send(0, 3, 50000, 0, i, /*data=*/true);
    n.Send(0, 3, 50000, 0, 100, /*data=*/false);
    n.Run();
    ASSERT_EQ(n.arrivals.size(), 11u);
    std::vector<uint32_t> order;
    for (const Arrival& a : n.arrivals) order.push_back(TagOf(a.packet));
    if (control_first) {
      // The first data packet was already on the wire; the ACK goes next.
      EXPECT_EQ(order[1], 100u);
    } else {
      EXPECT_EQ(order.back(), 100u);
    }
  }
  // At a switch the ACK waits its turn: hosts 0 and 2 send 30 data packets each to host 3, twice
  // the rate of the leaf's port toward it. Host 1's ACK reaches the leaf at 2,580 ns, when ~37
  // data packets have arrived there and ~19 have left: it goes out behind the ~18 queued.
  Net n(Small());
  for (uint32_t i = 1; i <= 30; ++i) {
    n.Send(0, 3, 50000, 0, i, /*data=*/true);
    n.Send(2, 3, 50000, 0, 30 + i, /*data=*/true);
  }
  n.RunUntil(Instant{1500});
  n.Send(1, 3, 50000, 0, 100, /*data=*/false);
  n.Run();
  ASSERT_EQ(n.arrivals.size(), 61u);
  size_t ack_at = 0;
  while (TagOf(n.arrivals[ack_at].packet) != 100u) ++ack_at;
  EXPECT_GE(ack_at, 34u) << "behind the data queued at the leaf before it";
  EXPECT_LE(ack_at, 40u) << "ahead of the data that came after it";
}

TEST(LeafSpine_Forwarding, PlanesAreSeparateNetworks) {
  LeafSpineConfig c = Small();
  c.planes = 2;
  Net n(c);
  // Same instant, same hosts, two planes: neither queues behind the other.
  n.Send(0, 5, 50000, 0, 1);
  n.Send(0, 5, 50000, 1, 2);
  n.Run();
  ASSERT_EQ(n.arrivals.size(), 2u);
  EXPECT_EQ(n.arrivals[0].at, n.arrivals[1].at);
  EXPECT_EQ(n.fabric.counters({0, FabricLink::Tier::kHost, 0, 0}, true).tx_packets, 1u);
  EXPECT_EQ(n.fabric.counters({1, FabricLink::Tier::kHost, 0, 0}, true).tx_packets, 1u);
}

// ECMP hashes the 5-tuple: a flow keeps its spine, source ports spread over spines, and another
// source port (a rotation) can move a path to another spine.
TEST(LeafSpine_Ecmp, SourcePortPicksTheSpine) {
  LeafSpineConfig c = Small();
  c.spines = 4;
  Net n(c);
  std::map<int, int> per_spine;
  FabricPacket p;
  p.src_host = 1;
  p.dst_host = 6;
  p.dst_port = 4791;
  for (uint16_t port = 49152; port < 49152 + 1000; ++port) {
    p.src_port = port;
    const int spine = n.fabric.SpineFor(p);
    ASSERT_GE(spine, 0);
    ASSERT_EQ(spine, n.fabric.SpineFor(p));
    ++per_spine[spine];
  }
  ASSERT_EQ(per_spine.size(), 4u);
  for (const auto& [spine, count] : per_spine) {
    EXPECT_GT(count, 180) << "spine " << spine;  // 250 expected
  }
  // Same leaf: no spine.
  p.dst_host = 2;
  EXPECT_EQ(n.fabric.SpineFor(p), -1);
  // Another seed, another hash.
  c.seed = 2;
  Net other(c);
  p.dst_host = 6;
  int moved = 0;
  for (uint16_t port = 49152; port < 49152 + 100; ++port) {
    p.src_port = port;
    moved += n.fabric.SpineFor(p) != other.fabric.SpineFor(p);
  }
  EXPECT_GT(moved, 40);
}

TEST(LeafSpine_Ecmp, PacketsTakeTheSpineTheHashNames) {
  Net n(Small());
  FabricPacket p;
  p.src_host = 0;
  p.dst_host = 4;
  p.dst_port = 4791;
  std::map<int, uint64_t> expected;
  for (uint16_t port = 50000; port < 50064; ++port) {
    p.src_port = port;
    ++expected[n.fabric.SpineFor(p)];
    n.Send(0, 4, port);
  }
  n.Run();
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(n.fabric.counters({0, FabricLink::Tier::kSpine, 0, s}, true).tx_packets,
              expected[static_cast<int>(s)]);
    EXPECT_EQ(n.fabric.counters({0, FabricLink::Tier::kSpine, 1, s}, false).tx_packets,
              expected[static_cast<int>(s)]);
  }
}

// Four senders on the other leaf, one receiver: its leaf port is the bottleneck. A lossy fabric
// marks above the ECN threshold and tail-drops above the queue.
TEST(LeafSpine_Lossy, IncastMarksThenTailDropsAtTheBottleneck) {
  LeafSpineConfig c = Small();
  c.queue_bytes = 20'000;
  c.ecn_threshold_bytes = 5'000;
  Net n(c);
  for (int i = 0; i < 50; ++i) {
    for (uint32_t src = 4; src < 8; ++src) n.Send(src, 0, static_cast<uint16_t>(50000 + i));
  }
  n.Run();
  const PortCounters& bottleneck = n.fabric.counters({0, FabricLink::Tier::kHost, 0, 0}, false);
  const FabricTotals t = n.fabric.Totals();
  EXPECT_GT(bottleneck.dropped[static_cast<size_t>(FabricDrop::kTail)], 0u);
  EXPECT_GT(bottleneck.ce_marked, 0u);
  EXPECT_LE(bottleneck.max_backlog_bytes, c.queue_bytes);
  EXPECT_EQ(t.delivered + n.Dropped(FabricDrop::kTail), 200u);
  EXPECT_EQ(t.pauses, 0u);
  // Marked packets arrive marked; the senders' uplinks (2:1 oversubscribed) mark too.
  size_t marked = 0;
  for (const Arrival& a : n.arrivals) marked += a.packet.ce;
  EXPECT_LE(marked, t.ce_marked);
  EXPECT_GE(marked, bottleneck.ce_marked);  // marked after the tail-drop check: all delivered
}

// RED-like marking (ecn_pmax > 0): between kmin and kmax a packet is marked with a probability
// rising to pmax, so fewer than a step at kmin marks; at and above kmax every one, as the step.
TEST(LeafSpine_Ecn, RedMarksFewerThanAStepBelowKmaxAndAllAbove) {
  auto marked = [](uint64_t kmax, double pmax) {
    LeafSpineConfig c = Small();
    c.lossless = true;  // nothing dropped: the same packets meet the queue every time
    c.ecn_threshold_bytes = 5'000;
    c.ecn_kmax_bytes = kmax;
    c.ecn_pmax = pmax;
    Net n(c);
    for (int i = 0; i < 100; ++i) {
      for (uint32_t src = 1; src < 4; ++src) n.Send(src, 0, static_cast<uint16_t>(50000 + i));
    }
    n.Run();
    return n.fabric.counters({0, FabricLink::Tier::kHost, 0, 0}, false).ce_marked;
  };
  const uint64_t step = marked(0, 0);
  const uint64_t red = marked(1u << 20, 0.5);
  EXPECT_GT(step, 100u);
  EXPECT_GT(red, 0u);
  EXPECT_LT(red, step / 2) << "p <= 0.5 x (backlog - kmin) / (kmax - kmin), far below 0.5 here";
  EXPECT_EQ(marked(5'001, 0.01), step) << "above kmax RED marks every packet";
}

// The same incast, half of it data: data packets are counted apart when offered and dropped; the
// deepest switch queue, read after every event, peaks where the ports' counters say (hosts' NIC
// queues, deeper still, are not the fabric's).
TEST(LeafSpine_Lossy, CountsDataApartAndReadsQueueDepths) {
  LeafSpineConfig c = Small();
  c.queue_bytes = 20'000;
  c.ecn_threshold_bytes = 5'000;
  EventQueue queue;
  LeafSpineFabric fabric(c, queue, [](FabricPacket&) {});
  uint64_t data = 0;
  for (int i = 0; i < 50; ++i) {
    for (uint32_t src = 4; src < 8; ++src) {
      FabricPacket p;
      p.src_host = src;
      p.dst_host = 0;
      p.src_port = static_cast<uint16_t>(50000 + i);
      p.dst_port = 4791;
      p.data = (i + src) % 2 == 0;
      data += p.data;
      p.bytes.assign(kPayload, std::byte{0});
      fabric.Send(std::move(p));
    }
  }
  uint64_t deepest = 0, deepest_receiver = 0;
  while (queue.RunNext()) {
    const uint64_t now = fabric.MaxSwitchBacklogBytes();
    const uint64_t receiver = fabric.BacklogBytes({0, FabricLink::Tier::kHost, 0, 0}, false);
    EXPECT_LE(receiver, now);
    deepest = std::max(deepest, now);
    deepest_receiver = std::max(deepest_receiver, receiver);
  }
  const FabricTotals t = fabric.Totals();
  EXPECT_EQ(t.data_sent, data);
  const size_t tail = static_cast<size_t>(FabricDrop::kTail);
  EXPECT_GT(t.data_dropped[tail], 0u);
  EXPECT_LT(t.data_dropped[tail], t.dropped[tail]) << "the others were dropped too";
  EXPECT_LE(t.data_dropped[tail], data);
  uint64_t counted = 0;
  for (uint32_t h = 0; h < c.hosts; ++h) {
    counted = std::max(counted, fabric.counters({0, FabricLink::Tier::kHost, h, 0}, false)
                                    .max_backlog_bytes);
  }
  for (uint32_t l = 0; l < c.leaves(); ++l) {
    for (uint32_t s = 0; s < c.spines; ++s) {
      for (bool up : {true, false}) {
        counted = std::max(
            counted, fabric.counters({0, FabricLink::Tier::kSpine, l, s}, up).max_backlog_bytes);
      }
    }
  }
  EXPECT_EQ(deepest, counted);
  EXPECT_EQ(deepest_receiver,
            fabric.counters({0, FabricLink::Tier::kHost, 0, 0}, false).max_backlog_bytes);
  EXPECT_GT(fabric.counters({0, FabricLink::Tier::kHost, 4, 0}, true).max_backlog_bytes, deepest)
      << "a sender's NIC queue holds its burst";
  EXPECT_EQ(fabric.MaxSwitchBacklogBytes(), 0u);
}

// The same incast on a lossless fabric: nothing dropped, the bottleneck's leaf pauses the spines,
// the spines pause the senders' leaf, which pauses the senders: pause spreads hop by hop.
TEST(LeafSpine_Lossless, IncastDropsNothingAndPausesSpreadUpstream) {
  LeafSpineConfig c = Small();
  c.lossless = true;
  c.pfc_xoff_bytes = 8'000;
  c.pfc_xon_bytes = 4'000;
  Net n(c);
  for (int i = 0; i < 200; ++i) {
    for (uint32_t src = 4; src < 8; ++src) n.Send(src, 0, static_cast<uint16_t>(50000 + i));
  }
  n.Run();
  const FabricTotals t = n.fabric.Totals();
  EXPECT_EQ(t.delivered, 800u);
  for (size_t i = 0; i < static_cast<size_t>(FabricDrop::kCount); ++i) EXPECT_EQ(t.dropped[i], 0u);
  EXPECT_GT(t.pauses, 0u);
  EXPECT_GT(t.paused_ns, 0);
  uint64_t spine_pauses = 0, host_pauses = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    spine_pauses += n.fabric.counters({0, FabricLink::Tier::kSpine, 0, s}, false).pauses;
  }
  for (uint32_t h = 4; h < 8; ++h) {
    host_pauses += n.fabric.counters({0, FabricLink::Tier::kHost, h, 0}, true).pauses;
  }
  EXPECT_GT(spine_pauses, 0u) << "the bottleneck leaf paused the spines";
  EXPECT_GT(host_pauses, 0u) << "pause reached the senders' NICs";
  // The bottleneck ran at line rate: 800 packets of 80 ns, plus the path's latency.
  EXPECT_LT(n.arrivals.back().at.ns, 800 * 80 + 20'000);
}

// Congestion spreading: a victim flow to an idle receiver shares the senders' leaf and spines
// with an incast. Under PFC the pauses the incast causes hold the victim too; on a lossy fabric
// with shallow queues (what ECN fabrics run) the incast loses packets and the victim passes.
TEST(LeafSpine_Lossless, AVictimFlowIsHeldBehindAnotherFlowsCongestion) {
  auto victim_done = [](bool lossless) {
    LeafSpineConfig c = Small();
    c.lossless = lossless;
    c.queue_bytes = 20'000;
    c.pfc_xoff_bytes = 8'000;
    c.pfc_xon_bytes = 4'000;
    Net n(c);
    for (int i = 0; i < 200; ++i) {
      for (uint32_t src = 4; src < 7; ++src) n.Send(src, 0, static_cast<uint16_t>(50000 + i));
      n.Send(7, 1, static_cast<uint16_t>(50000 + i), 0, 7);  // the victim: to host 1, idle
    }
    n.Run();
    Instant last{0};
    for (const Arrival& a : n.arrivals) {
      if (TagOf(a.packet) == 7) last = std::max(last, a.at);
    }
    return last;
  };
  const Instant lossy = victim_done(false);
  const Instant lossless = victim_done(true);
  EXPECT_GT(lossless.ns, 2 * lossy.ns) << "lossy " << lossy.ns << " ns, lossless " << lossless.ns;
}

// A dead leaf-spine link drops what hashes onto it until routing reconverges; then every flow
// takes the spine that is left.
TEST(LeafSpine_Faults, BlackholedLinkDropsUntilReconvergenceMovesFlowsOff) {
  LeafSpineConfig c = Small();
  c.reconvergence = microseconds(50);
  Net n(c);
  FabricFault f;
  f.kind = FabricFault::Kind::kBlackhole;
  f.link = {0, FabricLink::Tier::kSpine, 0, 1};  // leaf 0 <-> spine 1
  ASSERT_TRUE(n.fabric.AddFault(f).ok());
  FabricPacket probe;
  probe.src_host = 0;
  probe.dst_host = 4;
  probe.dst_port = 4791;
  std::vector<uint16_t> on_spine1;
  for (uint16_t port = 50000; on_spine1.size() < 10; ++port) {
    probe.src_port = port;
    if (n.fabric.SpineFor(probe) == 1) on_spine1.push_back(port);
  }
  n.RunUntil(Instant{1});  // the fault is in force
  for (uint16_t port : on_spine1) n.Send(0, 4, port);
  n.RunUntil(Instant{40'000});
  EXPECT_TRUE(n.arrivals.empty());
  EXPECT_EQ(n.Dropped(FabricDrop::kDown), 10u);
  n.RunUntil(Instant{60'000});  // reconverged
  EXPECT_EQ(n.fabric.Totals().route_changes, 2u);  // both directions of the link
  probe.src_port = on_spine1[0];
  EXPECT_EQ(n.fabric.SpineFor(probe), 0);
  for (uint16_t port : on_spine1) n.Send(0, 4, port);
  n.Run();
  EXPECT_EQ(n.arrivals.size(), 10u);
  EXPECT_EQ(n.Dropped(FabricDrop::kDown), 10u);
}

TEST(LeafSpine_Faults, WithoutReconvergenceADeadSpineKeepsDropping) {
  Net n(Small());
  FabricFault f;
  f.kind = FabricFault::Kind::kBlackhole;
  f.whole_spine = true;
  f.spine = 0;
  ASSERT_TRUE(n.fabric.AddFault(f).ok());
  n.RunUntil(Instant{1});
  for (uint16_t port = 50000; port < 50100; ++port) n.Send(2, 6, port);
  n.Run();
  EXPECT_GT(n.Dropped(FabricDrop::kDown), 20u);
  EXPECT_GT(n.arrivals.size(), 20u);
  EXPECT_EQ(n.arrivals.size() + n.Dropped(FabricDrop::kDown), 100u);
  EXPECT_EQ(n.fabric.Totals().route_changes, 0u);
}

TEST(LeafSpine_Faults, RateCutSlowsTheLink) {
  LeafSpineConfig c = Small();
  Net n(c);
  FabricFault f;
  f.kind = FabricFault::Kind::kRateCut;
  f.link = {0, FabricLink::Tier::kHost, 0, 0};
  f.rate_factor = 0.25;
  ASSERT_TRUE(n.fabric.AddFault(f).ok());
  n.RunUntil(Instant{1});
  for (int i = 0; i < 100; ++i) n.Send(0, 1);
  n.Run();
  ASSERT_EQ(n.arrivals.size(), 100u);
  // 100 packets of 320 ns each at host 0's NIC; the leaf's port to host 1 runs at full rate.
  EXPECT_GE(n.arrivals.back().at.ns, 100 * 320);
  EXPECT_LT(n.arrivals.back().at.ns, 100 * 320 + 3'000);
}

TEST(LeafSpine_Faults, LossAndFlapDropSomeAndDeliverTheRest) {
  Net n(Small());
  FabricFault loss;
  loss.kind = FabricFault::Kind::kLoss;
  loss.link = {0, FabricLink::Tier::kHost, 1, 0};
  loss.loss_probability = 0.5;
  ASSERT_TRUE(n.fabric.AddFault(loss).ok());
  FabricFault flap;
  flap.kind = FabricFault::Kind::kFlap;
  flap.link = {0, FabricLink::Tier::kHost, 2, 0};
  flap.window = {Instant{0}, Instant{200'000}};
  flap.flap_period = microseconds(20);
  ASSERT_TRUE(n.fabric.AddFault(flap).ok());
  n.RunUntil(Instant{1});
  for (int i = 0; i < 2000; ++i) n.Send(1, 3);
  // One packet every 1 us on the flapping link for 200 us.
  for (int i = 0; i < 200; ++i) {
    n.queue.Schedule(Instant{1 + i * 1000}, [&n] { n.Send(2, 3, 50000, 0, 2); });
  }
  n.Run();
  const uint64_t lost = n.Dropped(FabricDrop::kLoss);
  EXPECT_GT(lost, 850u);
  EXPECT_LT(lost, 1150u);
  uint64_t flapped = 0;
  for (const Arrival& a : n.arrivals) flapped += TagOf(a.packet) == 2;
  EXPECT_GT(flapped, 60u);
  EXPECT_LT(flapped, 140u);
  EXPECT_EQ(flapped + n.Dropped(FabricDrop::kDown), 200u);
  FabricFault endless = flap;
  endless.window.end = core::kNever;
  EXPECT_FALSE(n.fabric.AddFault(endless).ok());
}

TEST(LeafSpine_Determinism, SameInputsSameCounters) {
  auto run = [] {
    LeafSpineConfig c = Small();
    c.queue_bytes = 20'000;
    Net n(c);
    FabricFault loss;
    loss.kind = FabricFault::Kind::kLoss;
    loss.whole_spine = true;
    loss.spine = 1;
    loss.loss_probability = 0.1;
    EXPECT_TRUE(n.fabric.AddFault(loss).ok());
    n.RunUntil(Instant{1});
    for (int i = 0; i < 300; ++i) {
      for (uint32_t src = 0; src < 8; ++src) {
        n.Send(src, (src + 3) % 8, static_cast<uint16_t>(50000 + i));
      }
    }
    n.Run();
    std::vector<int64_t> v;
    for (const Arrival& a : n.arrivals) v.push_back(a.at.ns * 8 + a.packet.dst_host);
    const FabricTotals t = n.fabric.Totals();
    for (uint64_t d : t.dropped) v.push_back(static_cast<int64_t>(d));
    v.push_back(static_cast<int64_t>(t.ce_marked));
    return v;
  };
  EXPECT_EQ(run(), run());
}

}  // namespace
}  // namespace metaroce::sim
