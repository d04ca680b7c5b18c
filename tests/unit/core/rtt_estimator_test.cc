// RttEstimator: RFC 6298 smoothing (docs/spec/paths-and-recovery.md §5), the minimum, the probe
// timeout and the values reported before any sample. Exact nanosecond arithmetic.
#include "lib/core/rtt_estimator.h"

#include <gtest/gtest.h>

namespace metaroce::core {
namespace {

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr Duration kNs = Duration(1);

TEST(RttEstimator_AddSample, FirstSampleSetsSrttRttvarAndMin) {
  RttEstimator rtt(20 * kUs);
  rtt.AddSample(10 * kUs);
  EXPECT_TRUE(rtt.has_sample());
  EXPECT_EQ(rtt.srtt(), 10'000 * kNs);
  EXPECT_EQ(rtt.rttvar(), 5'000 * kNs);  // R/2
  EXPECT_EQ(rtt.min_rtt(), 10'000 * kNs);
  EXPECT_EQ(rtt.latest(), 10'000 * kNs);
}

TEST(RttEstimator_AddSample, LaterSamplesSmoothWithAlphaEighthBetaQuarter) {
  RttEstimator rtt(20 * kUs);
  rtt.AddSample(10 * kUs);
  // rttvar = 3/4 * 5000 + 1/4 * |10000 - 18000| = 5750; srtt = 7/8 * 10000 + 1/8 * 18000 = 11000.
  rtt.AddSample(18 * kUs);
  EXPECT_EQ(rtt.rttvar(), 5'750 * kNs);
  EXPECT_EQ(rtt.srtt(), 11'000 * kNs);
  EXPECT_EQ(rtt.min_rtt(), 10'000 * kNs);
  EXPECT_EQ(rtt.latest(), 18'000 * kNs);
  // rttvar uses the srtt before this sample: (3 * 5750 + |11000 - 2000|) / 4 = 6562 (truncated);
  // srtt = (7 * 11000 + 2000) / 8 = 9875.
  rtt.AddSample(2 * kUs);
  EXPECT_EQ(rtt.rttvar(), 6'562 * kNs);
  EXPECT_EQ(rtt.srtt(), 9'875 * kNs);
  EXPECT_EQ(rtt.min_rtt(), 2'000 * kNs);
}

TEST(RttEstimator_AddSample, MinTracksTheSmallestSampleOnly) {
  RttEstimator rtt(20 * kUs);
  for (int us : {30, 12, 40, 13, 12, 100}) rtt.AddSample(us * kUs);
  EXPECT_EQ(rtt.min_rtt(), 12 * kUs);
  EXPECT_EQ(rtt.latest(), 100 * kUs);
}

TEST(RttEstimator_AddSample, NegativeSampleIsIgnored) {
  RttEstimator rtt(20 * kUs);
  rtt.AddSample(-5 * kUs);
  EXPECT_FALSE(rtt.has_sample());
  rtt.AddSample(10 * kUs);
  rtt.AddSample(-1 * kNs);
  EXPECT_EQ(rtt.srtt(), 10 * kUs);
  EXPECT_EQ(rtt.rttvar(), 5 * kUs);
  EXPECT_EQ(rtt.latest(), 10 * kUs);
}

TEST(RttEstimator_ProbeTimeout, SrttPlusFourRttvarAboveTheFloor) {
  RttEstimator rtt(20 * kUs);
  rtt.AddSample(10 * kUs);  // 10 + 4 * 5 = 30 us
  EXPECT_EQ(rtt.ProbeTimeout(1 * kUs), 30 * kUs);
  EXPECT_EQ(rtt.ProbeTimeout(30 * kUs), 30 * kUs);
  EXPECT_EQ(rtt.ProbeTimeout(50 * kUs), 50 * kUs);  // the floor wins
}

// docs/spec/paths-and-recovery.md §5: "Before the first sample (and after each reset), srtt is
// taken as initial_rtt, rttvar as 0 and min_rtt as unknown".
TEST(RttEstimator_BeforeAnySample, SrttIsInitialRttvarHalfOfItMinUnknown) {
  RttEstimator rtt(20 * kUs);
  EXPECT_FALSE(rtt.has_sample());
  EXPECT_EQ(rtt.srtt(), 20 * kUs);
  EXPECT_EQ(rtt.min_rtt(), Duration(0));
  EXPECT_EQ(rtt.latest(), Duration(0));
  // As if the initial RTT were a first sample (RFC 6298 2.2): rttvar = initial / 2.
  EXPECT_EQ(rtt.rttvar(), 10 * kUs);
  // Hence the first PTO of a path is max(min_probe_timeout, 3 x initial_rtt).
  EXPECT_EQ(rtt.ProbeTimeout(1 * kUs), 60 * kUs);
  EXPECT_EQ(rtt.ProbeTimeout(80 * kUs), 80 * kUs);
}

TEST(RttEstimator_Reset, ForgetsEverySample) {
  RttEstimator rtt(20 * kUs);
  rtt.AddSample(7 * kUs);
  rtt.AddSample(9 * kUs);
  rtt.Reset();
  EXPECT_FALSE(rtt.has_sample());
  EXPECT_EQ(rtt.srtt(), 20 * kUs);
  EXPECT_EQ(rtt.min_rtt(), Duration(0));
  EXPECT_EQ(rtt.latest(), Duration(0));
  // The next sample is a first sample again.
  rtt.AddSample(40 * kUs);
  EXPECT_EQ(rtt.srtt(), 40 * kUs);
  EXPECT_EQ(rtt.rttvar(), 20 * kUs);
  EXPECT_EQ(rtt.min_rtt(), 40 * kUs);
}

}  // namespace
}  // namespace metaroce::core
