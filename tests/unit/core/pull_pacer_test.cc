// PullPacer: the host's pulls, one per asking packet, released at its receive rate round robin
// over the connections waiting; an unsolicited arrival takes its own slot, a CE-marked one delays
// the pulls (docs/spec/congestion.md §6).
#include "lib/core/pull_pacer.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace metaroce::core {
namespace {

Instant At(int64_t ns) { return Instant{ns}; }

// 8 Gb/s: one byte per ns, so a slot lasts as many ns as its packet has wire bytes.
PullPacerConfig Config() {
  PullPacerConfig c;
  c.rate_gbps = 8;
  c.pulled_packet_wire_bytes = 1000;
  c.wire_overhead_bytes = 100;
  return c;
}

// A data packet's arrival as the receiver reports it: OnArrival, then RequestPull when it asks.
bool Arrive(PullPacer& p, Instant now, uint32_t conn, uint32_t bytes, bool pulled, bool wants,
            bool ce = false) {
  p.OnArrival(now, bytes, pulled, ce);
  return wants && p.RequestPull(now, conn);
}

// (connection, turn) of each pull released.
using Released = std::vector<std::pair<uint32_t, uint64_t>>;
Released Release(PullPacer& p, Instant now) {
  Released out;
  p.ReleaseDue(now, [&](uint32_t conn, uint64_t turn) { out.emplace_back(conn, turn); });
  return out;
}

TEST(PullPacer, DisabledNeverPulls) {
  PullPacer p(PullPacerConfig{});
  EXPECT_FALSE(p.enabled());
  EXPECT_FALSE(Arrive(p, At(0), 1, 900, false, true));
  EXPECT_EQ(p.NextRelease(), kNever);
  EXPECT_EQ(p.waiting(), 0u);
}

TEST(PullPacer, PullsGoOnePerSlotNumberedInTurn) {
  PullPacer p(Config());
  // Pulled arrivals take no slot of their own: the first pull goes with its ACK at once (turn 0).
  EXPECT_TRUE(Arrive(p, At(0), 1, 900, true, true));
  // The next two wait: the first pull's slot lasts 1,000 ns.
  EXPECT_FALSE(Arrive(p, At(10), 2, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(20), 3, 900, true, true));
  EXPECT_EQ(p.waiting(), 2u);
  EXPECT_EQ(p.NextRelease(), At(1000));
  EXPECT_TRUE(Release(p, At(999)).empty());
  EXPECT_EQ(Release(p, At(1000)), (Released{{2, 1}}));
  EXPECT_EQ(p.NextRelease(), At(2000));
  EXPECT_EQ(Release(p, At(5000)), (Released{{3, 2}}));
  EXPECT_EQ(p.NextRelease(), kNever);
  EXPECT_EQ(p.counters().pulls_with_ack, 1u);
  EXPECT_EQ(p.counters().pulls_deferred, 2u);
}

TEST(PullPacer, ConnectionsWaitingAreServedInTurnNotByHowManyTheyAskFor) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 9, 900, true, true));  // takes the first slot
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Arrive(p, At(1), 1, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(2), 2, 900, true, true));
  EXPECT_EQ(p.waiting(), 4u);
  Released order;
  for (int64_t t = 1000; t <= 4000; t += 1000) {
    for (const auto& r : Release(p, At(t))) order.push_back(r);
  }
  EXPECT_EQ(order, (Released{{1, 1}, {2, 2}, {1, 3}, {1, 4}}));
}

TEST(PullPacer, AnUnsolicitedArrivalTakesItsOwnSlot) {
  PullPacer p(Config());
  // 900 bytes + 100 of overhead: the link is the pacer's again at 1,000 ns, and this packet's
  // own pull waits for that.
  EXPECT_FALSE(Arrive(p, At(0), 1, 900, false, true));
  EXPECT_EQ(p.NextRelease(), At(1000));
  EXPECT_EQ(p.counters().unsolicited_bytes, 1000u);
  // One that asks for no pull still takes its slot.
  EXPECT_FALSE(Arrive(p, At(0), 2, 400, false, false));
  EXPECT_EQ(p.NextRelease(), At(1500));
  EXPECT_EQ(Release(p, At(1500)), (Released{{1, 0}}));
  EXPECT_EQ(p.waiting(), 0u);
}

TEST(PullPacer, IdleTimeIsNotSavedForABurst) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 1, 900, true, true));
  // A long idle, then three asking packets at once: one pull goes now, the others a slot apart.
  EXPECT_TRUE(Arrive(p, At(1'000'000), 1, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(1'000'000), 2, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(1'000'000), 3, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(1'001'000));
  EXPECT_EQ(Release(p, At(1'001'000)), (Released{{2, 2}}));
  EXPECT_EQ(Release(p, At(1'002'000)), (Released{{3, 3}}));
}

TEST(PullPacer, AQueueWaitingKeepsNewPullsBehindIt) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 1, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 900, true, true));
  // The slot is free again at 1,000 ns, but a pull waits: the new one goes behind it.
  EXPECT_FALSE(Arrive(p, At(1500), 3, 900, true, true));
  EXPECT_EQ(Release(p, At(1500)), (Released{{2, 1}}));
  EXPECT_EQ(p.NextRelease(), At(2500));
  EXPECT_EQ(Release(p, At(2500)), (Released{{3, 2}}));
}

TEST(PullPacer, CancelledPullsSpendNoSlot) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 1, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(0), 3, 900, true, true));
  // Connection 2's data ran out: its two waiting pulls are dropped, and connection 3's takes
  // the first free slot.
  p.CancelPulls(2);
  EXPECT_EQ(p.waiting(), 1u);
  EXPECT_EQ(p.counters().pulls_cancelled, 2u);
  EXPECT_EQ(Release(p, At(1000)), (Released{{3, 1}}));
  EXPECT_EQ(p.NextRelease(), kNever);
  // Asking again later puts it back in turn.
  EXPECT_FALSE(Arrive(p, At(1500), 2, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(2000));
  EXPECT_EQ(Release(p, At(2000)), (Released{{2, 2}}));
}

TEST(PullPacer, CeMarkedArrivalsDrainTheQueueTheyReport) {
  PullPacer p(Config());
  // A marked arrival delays the pulls after it, its own included, by a quarter of a pulled
  // packet's slot (250 ns): the pulls run at 4/5 of the rate while the marks last.
  EXPECT_FALSE(Arrive(p, At(0), 1, 900, true, true, /*ce=*/true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(250));
  EXPECT_EQ(p.counters().ce_arrivals, 1u);
  EXPECT_EQ(Release(p, At(250)), (Released{{1, 0}}));
  // Unmarked, the pulls are back at the rate.
  EXPECT_FALSE(Arrive(p, At(300), 3, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(1250));
  EXPECT_EQ(Release(p, At(1250)), (Released{{2, 1}}));
  EXPECT_EQ(p.NextRelease(), At(2250));
}

}  // namespace
}  // namespace metaroce::core
