// DCQCN's reaction point and notification point (lib/core/dcqcn.h), step by step against the
// rules of the HPCC simulator's Mellanox model, with a mock clock: the first CNP, the cut by
// alpha/2 on the decrease timer, fast recovery, additive and hyper increase, alpha's decay, the
// limiter's spacing of packets and the NP's one CNP per interval.
#include "lib/core/dcqcn.h"

#include "gtest/gtest.h"

namespace metaroce::core {
namespace {

using std::chrono::microseconds;

Instant At(int64_t us) { return Instant{us * 1000}; }

DcqcnParams Params() {
  DcqcnParams p;  // HPCC's dcqcn_paper preset at 100 Gb/s
  p.line_rate_gbps = 100;
  return p;
}

TEST(Dcqcn_Rate, StartsAtLineRateAndPacesPacketsAtIt) {
  DcqcnRate r(Params());
  EXPECT_TRUE(r.MaySend(At(0)));
  r.OnSent(At(0), 1000);  // 8,000 bits at 100 Gb/s: 80 ns
  EXPECT_FALSE(r.MaySend(Instant{79}));
  EXPECT_TRUE(r.MaySend(Instant{80}));
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 100);
}

TEST(Dcqcn_Rate, FirstCnpCutsAtTheFirstDecreaseCheckByHalfOfTheUpdatedAlpha) {
  const DcqcnParams p = Params();
  DcqcnRate r(p);
  r.OnCnp(At(10));
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 100) << "rate_on_first_cnp 1: no cut on arrival";
  r.MaySend(At(59));
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 100);
  r.MaySend(Instant{60 * 1000 + 1});  // alpha update at 60 us, then the decrease check
  const double alpha = 1 - p.g;        // the first CNP does not count in the first update
  EXPECT_DOUBLE_EQ(r.alpha(), alpha);
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 100 * (1 - alpha / 2));
  EXPECT_DOUBLE_EQ(r.target_gbps(), 100) << "a cut at stage 0 keeps the target";
  EXPECT_EQ(r.cuts(), 1u);
}

TEST(Dcqcn_Rate, RecoversFastThenAdditivelyThenHyper) {
  const DcqcnParams p = Params();
  DcqcnRate r(p);
  r.OnCnp(At(0));
  r.MaySend(Instant{50 * 1000 + 1});  // the cut; the increase timer starts from it
  const double cut = r.rate_gbps();
  const Instant cut_at{50 * 1000 + 1};
  r.MaySend(cut_at + microseconds(55));  // stage 0: fast recovery, halfway to the target
  EXPECT_DOUBLE_EQ(r.rate_gbps(), (cut + 100) / 2);
  EXPECT_DOUBLE_EQ(r.target_gbps(), 100);
  // Stage 1 = F: additive increase (the target is at line rate already: it stays there).
  r.MaySend(cut_at + microseconds(110));
  EXPECT_DOUBLE_EQ(r.target_gbps(), 100);
  EXPECT_DOUBLE_EQ(r.rate_gbps(), ((cut + 100) / 2 + 100) / 2);
}

TEST(Dcqcn_Rate, ASecondCutLowersTheTargetAndIncreasesRaiseIt) {
  DcqcnParams p = Params();
  DcqcnRate r(p);
  r.OnCnp(At(0));
  r.MaySend(Instant{50 * 1000 + 1});                          // cut 1 (stage 0: target 100)
  r.MaySend(Instant{50 * 1000 + 1} + microseconds(55));       // fast recovery: stage 1
  const double before = r.rate_gbps();
  r.OnCnp(Instant{50 * 1000 + 1} + microseconds(60));
  r.MaySend(Instant{150 * 1000 + 1});  // the check at 150 us cuts again, at stage 1
  EXPECT_DOUBLE_EQ(r.target_gbps(), before) << "the rate before the cut is the new target";
  EXPECT_LT(r.rate_gbps(), before);
  const Instant cut_at{150 * 1000 + 1};
  r.MaySend(cut_at + microseconds(55));   // stage 0: fast recovery
  r.MaySend(cut_at + microseconds(110));  // stage 1: additive
  EXPECT_DOUBLE_EQ(r.target_gbps(), before + p.rai_gbps);
  r.MaySend(cut_at + microseconds(165));  // stage 2: hyper
  EXPECT_DOUBLE_EQ(r.target_gbps(), before + p.rai_gbps + p.rhai_gbps);
}

TEST(Dcqcn_Rate, AlphaDecaysWithoutCnpsAndTheRateNeverFallsBelowTheMinimum) {
  DcqcnParams p = Params();
  p.min_rate_gbps = 40;
  DcqcnRate r(p);
  r.OnCnp(At(0));
  r.MaySend(At(51));
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 100 * (1 - (1 - p.g) / 2));
  for (int i = 0; i < 5; ++i) {  // a CNP before every check: cut after cut, down to the floor
    r.OnCnp(At(60 + 50 * i));
    r.MaySend(At(101 + 50 * i));
  }
  EXPECT_DOUBLE_EQ(r.rate_gbps(), 40);
  const double alpha = r.alpha();
  r.MaySend(At(10'000));  // no CNP for ~10 ms: alpha decays by (1 - g) every 50 us
  EXPECT_LT(r.alpha(), alpha * 0.5);
  EXPECT_NEAR(r.rate_gbps(), 100, 1) << "recovered to the line rate";
}

TEST(Dcqcn_Rate, ACutMovesTheNextPacketLater) {
  DcqcnRate r(Params());
  r.OnCnp(At(0));
  r.MaySend(At(51));  // rate about 50 Gb/s
  r.OnSent(At(51), 4096);
  const Instant at_50 = r.NextSendAt();
  EXPECT_NEAR(static_cast<double>((at_50 - At(51)).count()), 4096 * 8 / r.rate_gbps(), 1);
  EXPECT_FALSE(r.MaySend(At(51) + Duration(400)));  // at 100 Gb/s it would be due: 328 ns
}

TEST(Dcqcn_CnpLimiter, OneCnpPerIntervalPerConnection) {
  CnpLimiter np;
  const Duration interval = microseconds(50);
  EXPECT_TRUE(np.OnMarked(At(0), interval));
  EXPECT_FALSE(np.OnMarked(At(1), interval));
  EXPECT_FALSE(np.OnMarked(At(49), interval));
  EXPECT_TRUE(np.OnMarked(At(50), interval));
  EXPECT_FALSE(np.OnMarked(At(99), interval));
}

}  // namespace
}  // namespace metaroce::core
