#include "lib/engine/spsc_ring.h"

#include <array>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace metaroce::engine {
namespace {

TEST(SpscRing_Capacity, RoundsUpToPowerOfTwo) {
  EXPECT_EQ(SpscRing<int>(0).capacity(), 2u);
  EXPECT_EQ(SpscRing<int>(5).capacity(), 8u);
  EXPECT_EQ(SpscRing<int>(1024).capacity(), 1024u);
}

TEST(SpscRing_PushPop, FifoUntilFullThenRefuses) {
  SpscRing<int> ring(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ring.TryPush(i));
  EXPECT_FALSE(ring.TryPush(99));
  EXPECT_EQ(ring.SizeApprox(), 4u);
  EXPECT_EQ(ring.FreeApprox(), 0u);
  int v = -1;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.TryPop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(ring.TryPop(v));
  EXPECT_TRUE(ring.EmptyApprox());
  EXPECT_EQ(ring.FreeApprox(), 4u);
}

TEST(SpscRing_PushPop, WrapsAroundManyTimes) {
  SpscRing<uint64_t> ring(8);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ring.TryPush(next_in++));
    uint64_t v;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(ring.TryPop(v));
      ASSERT_EQ(v, next_out++);
    }
  }
}

TEST(SpscRing_Batch, PopsAtMostWhatIsThere) {
  SpscRing<int> ring(16);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.TryPush(i));
  std::array<int, 4> out{};
  EXPECT_EQ(ring.PopBatch(out), 4u);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[3], 3);
  std::array<int, 16> rest{};
  EXPECT_EQ(ring.PopBatch(rest), 6u);
  EXPECT_EQ(rest[5], 9);
  EXPECT_EQ(ring.PopBatch(rest), 0u);
}

TEST(SpscRing_Front, LeavesElementUntilPopFront) {
  SpscRing<int> ring(4);
  EXPECT_EQ(ring.Front(), nullptr);
  ring.TryPush(7);
  ring.TryPush(8);
  ASSERT_NE(ring.Front(), nullptr);
  EXPECT_EQ(*ring.Front(), 7);
  EXPECT_EQ(*ring.Front(), 7);  // still there: the consumer may retry later
  ring.PopFront();
  EXPECT_EQ(*ring.Front(), 8);
}

TEST(SpscRing_MoveOnly, HoldsMovableElements) {
  SpscRing<std::unique_ptr<int>> ring(2);
  EXPECT_TRUE(ring.TryPush(std::make_unique<int>(3)));
  std::unique_ptr<int> out;
  ASSERT_TRUE(ring.TryPop(out));
  EXPECT_EQ(*out, 3);
}

// Two threads, a small ring (so that both full and empty are hit constantly), every value
// checked in order on the consumer side, mixing single and batch pops.
TEST(SpscRing_Stress, TwoThreadsKeepOrderAndLoseNothing) {
  constexpr uint64_t kCount = 2'000'000;
  SpscRing<uint64_t> ring(64);
  std::thread producer([&] {
    for (uint64_t i = 0; i < kCount;) {
      if (ring.TryPush(i)) {
        ++i;
      } else {
        std::this_thread::yield();
      }
    }
  });
  uint64_t expected = 0;
  uint64_t sum = 0;
  std::array<uint64_t, 7> batch{};
  while (expected < kCount) {
    size_t n;
    if (expected % 3 == 0) {
      n = ring.PopBatch(batch);
    } else {
      n = ring.TryPop(batch[0]) ? 1 : 0;
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(batch[i], expected);
      sum += batch[i];
      ++expected;
    }
    if (n == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(sum, kCount * (kCount - 1) / 2);
  EXPECT_TRUE(ring.EmptyApprox());
}

}  // namespace
}  // namespace metaroce::engine
