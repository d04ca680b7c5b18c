// PullPacer: the host's pulls, one per asking packet, released at its receive rate in arrival
// order; an unsolicited arrival takes its own slot (docs/spec/congestion.md §6).
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
bool Arrive(PullPacer& p, Instant now, uint32_t conn, uint16_t path, uint32_t bytes, bool pulled,
            bool wants, bool ce = false) {
  p.OnArrival(now, bytes, pulled, ce);
  return wants && p.RequestPull(now, conn, path);
}

using Released = std::vector<std::pair<uint32_t, uint16_t>>;
Released Release(PullPacer& p, Instant now) {
  Released out;
  p.ReleaseDue(now, [&](uint32_t conn, uint16_t path) { out.emplace_back(conn, path); });
  return out;
}

TEST(PullPacer, DisabledNeverPulls) {
  PullPacer p(PullPacerConfig{});
  EXPECT_FALSE(p.enabled());
  EXPECT_FALSE(Arrive(p, At(0), 1, 0, 900, false, true));
  EXPECT_EQ(p.NextRelease(), kNever);
  EXPECT_EQ(p.waiting(), 0u);
}

TEST(PullPacer, PullsGoOnePerSlotInArrivalOrder) {
  PullPacer p(Config());
  // Pulled arrivals take no slot of their own: the first pull goes with its ACK at once.
  EXPECT_TRUE(Arrive(p, At(0), 1, 3, 900, true, true));
  // The next two wait: the first pull's slot lasts 1,000 ns.
  EXPECT_FALSE(Arrive(p, At(10), 2, 0, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(20), 1, 5, 900, true, true));
  EXPECT_EQ(p.waiting(), 2u);
  EXPECT_EQ(p.NextRelease(), At(1000));
  EXPECT_TRUE(Release(p, At(999)).empty());
  EXPECT_EQ(Release(p, At(1000)), (Released{{2, 0}}));
  EXPECT_EQ(p.NextRelease(), At(2000));
  EXPECT_EQ(Release(p, At(5000)), (Released{{1, 5}}));
  EXPECT_EQ(p.NextRelease(), kNever);
  EXPECT_EQ(p.counters().pulls_with_ack, 1u);
  EXPECT_EQ(p.counters().pulls_deferred, 2u);
}

TEST(PullPacer, AnUnsolicitedArrivalTakesItsOwnSlot) {
  PullPacer p(Config());
  // 900 bytes + 100 of overhead: the link is the pacer's again at 1,000 ns, and this packet's
  // own pull waits for that.
  EXPECT_FALSE(Arrive(p, At(0), 1, 0, 900, false, true));
  EXPECT_EQ(p.NextRelease(), At(1000));
  EXPECT_EQ(p.counters().unsolicited_bytes, 1000u);
  // One that asks for no pull still takes its slot.
  EXPECT_FALSE(Arrive(p, At(0), 2, 0, 400, false, false));
  EXPECT_EQ(p.NextRelease(), At(1500));
  EXPECT_EQ(Release(p, At(1500)), (Released{{1, 0}}));
  EXPECT_EQ(p.waiting(), 0u);
}

TEST(PullPacer, IdleTimeIsNotSavedForABurst) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 1, 0, 900, true, true));
  // A long idle, then three asking packets at once: one pull goes now, the others a slot apart.
  EXPECT_TRUE(Arrive(p, At(1'000'000), 1, 0, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(1'000'000), 2, 0, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(1'000'000), 3, 0, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(1'001'000));
  EXPECT_EQ(Release(p, At(1'001'000)), (Released{{2, 0}}));
  EXPECT_EQ(Release(p, At(1'002'000)), (Released{{3, 0}}));
}

TEST(PullPacer, AQueueWaitingKeepsNewPullsBehindIt) {
  PullPacer p(Config());
  EXPECT_TRUE(Arrive(p, At(0), 1, 0, 900, true, true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 0, 900, true, true));
  // The slot is free again at 1,000 ns, but a pull waits: the new one goes behind it.
  EXPECT_FALSE(Arrive(p, At(1500), 3, 0, 900, true, true));
  EXPECT_EQ(Release(p, At(1500)), (Released{{2, 0}}));
  EXPECT_EQ(p.NextRelease(), At(2500));
  EXPECT_EQ(Release(p, At(2500)), (Released{{3, 0}}));
}

TEST(PullPacer, CeMarkedArrivalsDrainTheQueueTheyReport) {
  PullPacer p(Config());
  // A marked arrival delays the pulls after it, its own included, by a quarter of a pulled
  // packet's slot (250 ns): the pulls run at 4/5 of the rate while the marks last.
  EXPECT_FALSE(Arrive(p, At(0), 1, 0, 900, true, true, /*ce=*/true));
  EXPECT_FALSE(Arrive(p, At(0), 2, 0, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(250));
  EXPECT_EQ(p.counters().ce_arrivals, 1u);
  EXPECT_EQ(Release(p, At(250)), (Released{{1, 0}}));
  // Unmarked, the pulls are back at the rate.
  EXPECT_FALSE(Arrive(p, At(300), 3, 0, 900, true, true));
  EXPECT_EQ(p.NextRelease(), At(1250));
  EXPECT_EQ(Release(p, At(1250)), (Released{{2, 0}}));
  EXPECT_EQ(p.NextRelease(), At(2250));
}

}  // namespace
}  // namespace metaroce::core
