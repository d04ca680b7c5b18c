// PathCongestion: slow start until the first signal, DCTCP-style ECN reaction, Swift-style delay
// reaction, additive increase and bounds (docs/spec/congestion.md §3). Exact arithmetic where the
// spec gives a formula.
#include "lib/core/path_congestion.h"

#include <gtest/gtest.h>


namespace metaroce::core {
namespace {

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr Duration kSrtt = 100 * kUs;
constexpr Duration kNoSample{0};
constexpr Duration kMinUnknown{0};

CongestionParams Params() {
  CongestionParams p;
  p.mtu = 1000;
  p.initial_cwnd = 10'000;
  p.min_cwnd = 2'000;
  p.max_cwnd = 40'000;
  p.ecn_gain = 1.0 / 16;
  p.target_queue_delay = 20 * kUs;
  return p;
}

Instant At(Duration d) { return Instant{} + d; }

// Ends slow start without changing the window: a marked ACK inside the first ECN round (which
// opened at t=0 and closes at kSrtt) is a signal but not yet a cut.
void EndSlowStartWithoutCut(PathCongestion& cc) {
  cc.OnAck(At(0 * kUs), 0, 0, 0, kNoSample, kSrtt, kMinUnknown);
  cc.OnAck(At(1 * kUs), 0, 1, 1, kNoSample, kSrtt, kMinUnknown);
  ASSERT_FALSE(cc.in_slow_start());
  ASSERT_EQ(cc.cwnd(), 10'000u);
}

TEST(PathCongestion_Initial, StartsAtInitialWindowWithNoMarksInSlowStart) {
  PathCongestion cc(Params());
  EXPECT_EQ(cc.cwnd(), 10'000u);
  EXPECT_EQ(cc.ecn_fraction(), 0.0);
  EXPECT_TRUE(cc.in_slow_start());
}

TEST(PathCongestion_SlowStart, GrowsByTheBytesAcknowledgedUntilTheFirstSignal) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 3'000, 3, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 13'000u);
  cc.OnAck(At(1 * kUs), 13'000, 13, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 26'000u);  // doubles per window acknowledged
  cc.OnAck(At(2 * kUs), 1'000, 1, 1, kNoSample, kSrtt, kMinUnknown);  // a mark: no more doubling
  EXPECT_FALSE(cc.in_slow_start());
  EXPECT_EQ(cc.cwnd(), 26'000u);
  cc.OnAck(At(3 * kUs), 26'000, 26, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 27'000u);  // additive from now on
}

TEST(PathCongestion_SlowStart, ADelayCutEndsIt) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_FALSE(cc.in_slow_start());
  EXPECT_EQ(cc.cwnd(), 6'000u);
}

TEST(PathCongestion_Increase, OneWindowOfAckedBytesAddsOneMtuAtOnce) {
  PathCongestion cc(Params());
  EndSlowStartWithoutCut(cc);
  cc.OnAck(At(2 * kUs), 10'000, 10, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 11'000u);  // cwnd + mtu * acked / cwnd
}

TEST(PathCongestion_Increase, AboutOneMtuPerWindowAckedPacketByPacket) {
  PathCongestion cc(Params());
  EndSlowStartWithoutCut(cc);
  double expected = 10'000;
  for (int i = 0; i < 10; ++i) {
    cc.OnAck(At((2 + i) * kUs), 1'000, 1, 0, kNoSample, kSrtt, kMinUnknown);
    expected += 1000.0 * 1000.0 / expected;
  }
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(expected));
  EXPECT_GT(cc.cwnd(), 10'900u);
  EXPECT_LE(cc.cwnd(), 11'000u);
}

TEST(PathCongestion_Increase, AckOfNothingLeavesTheWindowAlone) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 0, 0, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 10'000u);
}

TEST(PathCongestion_Ecn, AlphaIsAnEwmaWithGainAndCutsByHalfAlphaOncePerRound) {
  PathCongestion cc(Params());
  const double g = 1.0 / 16;
  double alpha = 0, cwnd = 10'000;
  // t=0: the first ACK closes a round at once: 10 of 10 marked, F = 1.
  cc.OnAck(At(0 * kUs), 10'000, 10, 10, kNoSample, kSrtt, kMinUnknown);
  alpha = (1 - g) * alpha + g * 1.0;
  cwnd *= 1 - alpha / 2;
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), alpha);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(cwnd));
  // t=50us: inside the round (ends at 0 + srtt): accumulated, no cut, and no increase (marked).
  cc.OnAck(At(50 * kUs), 10'000, 10, 10, kNoSample, kSrtt, kMinUnknown);
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), alpha);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(cwnd));
  // t=100us: closes the round with 10 marked of 20 acked: F = 1/2, one cut.
  cc.OnAck(At(100 * kUs), 10'000, 10, 0, kNoSample, kSrtt, kMinUnknown);
  alpha = (1 - g) * alpha + g * 0.5;
  cwnd *= 1 - alpha / 2;
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), alpha);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(cwnd));
  // t=200us: an unmarked round decays alpha and cuts nothing; the ACK grows the window.
  cc.OnAck(At(200 * kUs), 1'000, 1, 0, kNoSample, kSrtt, kMinUnknown);
  alpha = (1 - g) * alpha;
  cwnd += 1000.0 * 1000.0 / cwnd;
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), alpha);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(cwnd));
}

TEST(PathCongestion_Ecn, ManyMarkedAcksInOneRoundCutOnce) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 1, kNoSample, kSrtt, kMinUnknown);
  const uint32_t after_first_cut = cc.cwnd();
  for (int i = 1; i < 10; ++i) {
    cc.OnAck(At(i * 10 * kUs - kUs), 1'000, 1, 1, kNoSample, kSrtt, kMinUnknown);
  }
  EXPECT_EQ(cc.cwnd(), after_first_cut);
}

TEST(PathCongestion_Ecn, MarkedFractionIsAtMostOne) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 5, kNoSample, kSrtt, kMinUnknown);
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), 1.0 / 16);
}

TEST(PathCongestion_Ecn, GainOneTakesTheLatestFraction) {
  CongestionParams p = Params();
  p.ecn_gain = 1.0;
  PathCongestion cc(p);
  cc.OnAck(At(0 * kUs), 4'000, 4, 1, kNoSample, kSrtt, kMinUnknown);
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), 0.25);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(10'000 * (1 - 0.125)));
}

TEST(PathCongestion_Delay, AboveMinPlusTargetCutsInProportion) {
  PathCongestion cc(Params());
  // T = 10 + 20 = 30 us; R = 60 us: factor max(0.5, 1 - 0.8 * 30/60) = 0.6.
  cc.OnAck(At(0 * kUs), 1'000, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 6'000u);
}

TEST(PathCongestion_Delay, CutIsBoundedAtHalf) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 0, 1000 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 5'000u);
}

TEST(PathCongestion_Delay, AtMostOneCutPerSrtt) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 0, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 6'000u);
  cc.OnAck(At(49 * kUs), 0, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 6'000u);
  cc.OnAck(At(50 * kUs), 0, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 3'600u);
}

TEST(PathCongestion_Delay, AtTargetOrWithoutMinRttIsNoSignal) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 10'000, 10, 0, 30 * kUs, 50 * kUs, 10 * kUs);  // R == T
  EXPECT_EQ(cc.cwnd(), 20'000u);  // still in slow start: no signal
  EXPECT_TRUE(cc.in_slow_start());
  PathCongestion unknown_min(Params());
  unknown_min.OnAck(At(0 * kUs), 10'000, 10, 0, 900 * kUs, 50 * kUs, kMinUnknown);
  EXPECT_EQ(unknown_min.cwnd(), 20'000u);
  EXPECT_TRUE(unknown_min.in_slow_start());
}

// congestion.md §3.3: the increase applies only if "its RTT sample (if any) is not above T". An
// ACK whose sample shows a standing queue, inside the once-per-srtt hold of the delay cut, must
// not grow the window back.
TEST(PathCongestion_Delay, NoIncreaseWhileTheSampleIsAboveTarget) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  ASSERT_EQ(cc.cwnd(), 6'000u);
  cc.OnAck(At(10 * kUs), 1'000, 1, 0, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_EQ(cc.cwnd(), 6'000u);
}

// Loss is deliberately not an input (congestion.md §4): the class offers no loss or timeout hook.
template <typename T>
concept HasLossInput = requires(T t) { t.OnLoss(); } || requires(T t) { t.OnTimeout(); } ||
                       requires(T t, Instant now) { t.OnLoss(now); } ||
                       requires(T t, Instant now) { t.OnTimeout(now); };
static_assert(!HasLossInput<PathCongestion>);

TEST(PathCongestion_Bounds, IncreaseStopsAtMax) {
  CongestionParams p = Params();
  p.initial_cwnd = p.max_cwnd = 40'000;
  PathCongestion cc(p);
  cc.OnAck(At(0 * kUs), 40'000, 40, 0, kNoSample, kSrtt, kMinUnknown);
  EXPECT_EQ(cc.cwnd(), 40'000u);
}

TEST(PathCongestion_Bounds, CutsStopAtMin) {
  CongestionParams p = Params();
  p.min_cwnd = 8'000;
  PathCongestion cc(p);
  cc.OnAck(At(0 * kUs), 1'000, 1, 0, 1000 * kUs, 50 * kUs, 10 * kUs);  // would halve to 5000
  EXPECT_EQ(cc.cwnd(), 8'000u);
  for (int i = 1; i <= 20; ++i) {
    cc.OnAck(At(i * kSrtt), 1'000, 1, 1, 1000 * kUs, kSrtt, 10 * kUs);
  }
  EXPECT_EQ(cc.cwnd(), 8'000u);
}

TEST(PathCongestion_Reset, StartsOverAtInitialWithFreshRounds) {
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1'000, 1, 1, 60 * kUs, 50 * kUs, 10 * kUs);
  ASSERT_LT(cc.cwnd(), 10'000u);
  ASSERT_GT(cc.ecn_fraction(), 0.0);
  ASSERT_FALSE(cc.in_slow_start());
  cc.Reset();
  EXPECT_EQ(cc.cwnd(), 10'000u);
  EXPECT_EQ(cc.ecn_fraction(), 0.0);
  EXPECT_TRUE(cc.in_slow_start());
  // Neither the ECN round nor the delay hold of the old route carries over: an ACK right away
  // is judged afresh (its round closes at once, the delay cut is allowed).
  cc.OnAck(At(1 * kUs), 1'000, 1, 1, 60 * kUs, 50 * kUs, 10 * kUs);
  EXPECT_DOUBLE_EQ(cc.ecn_fraction(), 1.0 / 16);
  EXPECT_EQ(cc.cwnd(), static_cast<uint32_t>(10'000 * (1 - 1.0 / 32) * 0.6));
}

TEST(PathCongestion_Loss, ALossWithoutAQueueAroundItChangesNothing) {
  // congestion.md §4: random loss is repaired, not answered.
  PathCongestion cc(Params());
  cc.OnAck(At(0 * kUs), 1000, 1, 0, kNoSample, kSrtt, kMinUnknown);
  const uint32_t before = cc.cwnd();
  EXPECT_FALSE(cc.OnLoss(At(10 * kUs), kSrtt));
  EXPECT_EQ(cc.cwnd(), before);
  EXPECT_TRUE(cc.in_slow_start());
}

TEST(PathCongestion_Loss, CeMarksAloneDoNotMakeALossAnOverflowDrop) {
  // congestion.md §4: marks say the queue stands above the marking threshold, not that it is
  // full: a random loss beside a queue the windows keep just above it is still random (two
  // hosts, 1 % loss, windows at twice the BDP: 119 cuts, 0.84 of the lossless goodput).
  PathCongestion cc(Params());
  EndSlowStartWithoutCut(cc);  // a marked ACK at 1 us
  const uint32_t before = cc.cwnd();
  EXPECT_FALSE(cc.OnLoss(At(5 * kUs), kSrtt));
  EXPECT_EQ(cc.cwnd(), before);
}

TEST(PathCongestion_Loss, ALossBehindAQueueDelayIsAnOverflowDropOncePerRtt) {
  PathCongestion cc(Params());
  // min_rtt 10 us, sample 40 us: 10 us above the 20 us target.
  cc.OnAck(At(0 * kUs), 1000, 1, 0, 40 * kUs, kSrtt, 10 * kUs);
  const uint32_t before = cc.cwnd();
  EXPECT_TRUE(cc.OnLoss(At(50 * kUs), kSrtt));  // (the delay itself cut to 8,000)
  EXPECT_EQ(cc.cwnd(), before / 2);
  EXPECT_FALSE(cc.OnLoss(At(60 * kUs), kSrtt));  // the same episode
  EXPECT_EQ(cc.cwnd(), before / 2);
  // More than an RTT after the latest delay signal (and the latest cut) a loss is random again.
  EXPECT_FALSE(cc.OnLoss(At(201 * kUs), kSrtt));
  EXPECT_EQ(cc.cwnd(), before / 2);
}

}  // namespace
}  // namespace metaroce::core
