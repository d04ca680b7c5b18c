// RotationBucket: the [R7] rate limit on port rotations (lib/core/rotation_bucket.h).
#include "lib/core/rotation_bucket.h"

#include <gtest/gtest.h>

namespace metaroce::core {
namespace {

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr double kBurst = 4;
constexpr double kRate = 2000;  // per second: a token every 500 us

Instant At(Duration d) { return Instant{} + d; }

TEST(RotationBucket_Burst, FullAtFirstUseThenEmptyAfterBurstRotations) {
  RotationBucket bucket;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(bucket.Wait(At(10 * kUs), kBurst, kRate), Duration(0)) << "rotation " << i;
    bucket.Take();
  }
  const Duration wait = bucket.Wait(At(10 * kUs), kBurst, kRate);
  EXPECT_GE(wait, 500 * kUs);  // one token at 2,000 a second
  EXPECT_LE(wait, 500 * kUs + Duration(2));
}

TEST(RotationBucket_Refill, ATokenComesBackAtTheRateAndTheBucketHoldsAtMostBurst) {
  RotationBucket bucket;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(bucket.Wait(At(0 * kUs), kBurst, kRate), Duration(0));
    bucket.Take();
  }
  // Half a token later the wait is the other half.
  const Duration half = bucket.Wait(At(250 * kUs), kBurst, kRate);
  EXPECT_GE(half, 250 * kUs - Duration(2));
  EXPECT_LE(half, 250 * kUs + Duration(2));
  EXPECT_EQ(bucket.Wait(At(250 * kUs) + half, kBurst, kRate), Duration(0));
  // Idle for a second: full again, not more.
  EXPECT_EQ(bucket.Wait(At(2'000'000 * kUs), kBurst, kRate), Duration(0));
  EXPECT_EQ(bucket.tokens(), kBurst);
}

TEST(RotationBucket_Wait, NeverZeroWhileATokenIsMissing) {
  RotationBucket bucket;
  ASSERT_EQ(bucket.Wait(At(0 * kUs), 1, 1e12), Duration(0));
  bucket.Take();
  // At 10^12 tokens a second a token takes 1 ps: the wait still rounds up to 1 ns, never 0 (a
  // 0 would tell the caller to rotate now without a token).
  EXPECT_GE(bucket.Wait(At(0 * kUs), 1, 1e12), Duration(1));
}

}  // namespace
}  // namespace metaroce::core
