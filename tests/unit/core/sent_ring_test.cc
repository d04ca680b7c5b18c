// SentRing: a path's outstanding PSNs. Storage grows with the live range, keeps its entries
// across growth (also across the 2^32 wrap), and is released when the path is idle.
#include "lib/core/sent_ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace metaroce::core {
namespace {

TEST(SentRing, HoldsNothingUntilAPacketIsOutstanding) {
  SentRing ring;
  EXPECT_EQ(ring.capacity(), 0u);
  EXPECT_EQ(ring.heap_bytes(), 0u);
  ring.Reserve(5, 5, 6);
  EXPECT_EQ(ring.capacity(), SentRing::kMinCapacity);
}

TEST(SentRing, GrowsInPowersOfTwoKeepingTheLiveEntriesAcrossTheWrap) {
  SentRing ring;
  const uint32_t una = UINT32_MAX - 100;  // the live range crosses 2^32
  uint32_t next = una;
  for (uint32_t n = 0; n < SentRing::kMaxCapacity; ++n) {
    ring.Reserve(una, next, next + 1);
    ring.at(next).ref.index = next;
    ring.at(next).bytes = n;
    ++next;
    const uint32_t cap = ring.capacity();
    EXPECT_GE(cap, n + 1);
    EXPECT_EQ(cap & (cap - 1), 0u);
    EXPECT_LE(cap, SentRing::kMaxCapacity);
  }
  for (uint32_t psn = una, n = 0; psn != next; ++psn, ++n) {
    ASSERT_EQ(ring.at(psn).ref.index, psn);
    ASSERT_EQ(ring.at(psn).bytes, n);
  }
}

TEST(SentRing, GrowthDropsOnlyEntriesBelowTheLiveRange) {
  SentRing ring;
  for (uint32_t psn = 0; psn < 8; ++psn) {
    ring.Reserve(0, psn, psn + 1);
    ring.at(psn).bytes = 100 + psn;
  }
  // PSNs 0-5 resolved; 6, 7 live; 10 more to send.
  ring.Reserve(6, 8, 18);
  EXPECT_EQ(ring.capacity(), 16u);
  EXPECT_EQ(ring.at(6).bytes, 106u);
  EXPECT_EQ(ring.at(7).bytes, 107u);
}

TEST(SentRing, ReleaseGivesTheStorageBack) {
  SentRing ring;
  ring.Reserve(0, 0, 200);
  EXPECT_EQ(ring.capacity(), 256u);
  EXPECT_EQ(ring.heap_bytes(), 256 * sizeof(SentPacket));
  ring.Release();
  EXPECT_EQ(ring.capacity(), 0u);
  EXPECT_EQ(ring.heap_bytes(), 0u);
}

TEST(SentRing, TheSmallestStorageGoesToASpareAndBack) {
  // A sender keeps one smallest block for the next path that starts sending (sender.h).
  std::unique_ptr<SentPacket[]> spare;
  SentRing a, b;
  a.Reserve(0, 0, 1, &spare);
  ASSERT_EQ(a.capacity(), SentRing::kMinCapacity);
  const SentPacket* block = &a.at(0);
  a.Release(&spare);
  EXPECT_EQ(a.capacity(), 0u);
  ASSERT_NE(spare, nullptr) << "the smallest block is kept";
  b.Reserve(5, 5, 6, &spare);
  EXPECT_EQ(b.capacity(), SentRing::kMinCapacity);
  EXPECT_EQ(spare, nullptr) << "taken, not copied";
  EXPECT_EQ(&b.at(0), block) << "the same storage";
  // A larger one is freed, and a spare already held is not replaced.
  b.Reserve(5, 5, 5 + 20, &spare);
  EXPECT_EQ(b.capacity(), 32u);
  b.Release(&spare);
  EXPECT_EQ(spare, nullptr);
  SentRing c, d;
  c.Reserve(0, 0, 1, &spare);
  d.Reserve(0, 0, 1);
  c.Release(&spare);
  const SentPacket* kept = spare.get();
  d.Release(&spare);
  EXPECT_EQ(spare.get(), kept);
  // More than the smallest block needs: a new allocation, the spare stays.
  SentRing e;
  e.Reserve(0, 0, 9, &spare);
  EXPECT_EQ(e.capacity(), 16u);
  EXPECT_EQ(spare.get(), kept);
}

}  // namespace
}  // namespace metaroce::core
