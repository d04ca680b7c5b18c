// ReceiveBudget: the host's receive budget divided among the paths of the connections that send
// to it (docs/spec/congestion.md §5): counted from set-up, by byte-clocked epochs, and forgotten.
#include "lib/core/receive_budget.h"

#include <gtest/gtest.h>

#include <vector>

namespace metaroce::core {
namespace {

constexpr Duration kUs = std::chrono::microseconds(1);
Instant At(Duration d) { return Instant{} + d; }

ReceiveBudgetConfig Config() {
  ReceiveBudgetConfig c;
  c.budget_bytes = 80'000;
  c.active_window = 1000 * kUs;
  c.mtu = 1000;
  return c;
}

TEST(ReceiveBudget_Hint, IsTheBudgetOverThePathsOfConnectionsSetUpAndNotYetSending) {
  ReceiveBudget b(Config());
  ActivityMark m1, m2;
  b.AddConnection(m1, 8);
  b.AddConnection(m2, 8);
  EXPECT_EQ(b.counted_pairs(), 16u);
  EXPECT_EQ(b.Hint(At(0 * kUs)), 5'000u);
  // Sending moves a connection from pending to active: still counted once.
  b.OnData(At(1 * kUs), m1, 1000);
  b.OnData(At(2 * kUs), m1, 1000);
  EXPECT_EQ(b.counted_pairs(), 16u);
  // One never sending stops counting one active_window after the first event after its set-up.
  EXPECT_EQ(b.Hint(At(999 * kUs)), 5'000u);
  b.OnData(At(999 * kUs), m1, 1000);
  EXPECT_EQ(b.Hint(At(1000 * kUs)), 10'000u);
}

TEST(ReceiveBudget_Hint, AConnectionThisHostPostsOnIsNotPending) {
  // A permutation: each host sends on one connection and receives on another. The one it sends
  // on counted for the whole active_window and halved the other's share.
  ReceiveBudget b(Config());
  ActivityMark outgoing, incoming;
  b.AddConnection(outgoing, 8);
  b.AddConnection(incoming, 8);
  b.OnLocalPost(outgoing);
  EXPECT_EQ(b.counted_pairs(), 8u);
  EXPECT_EQ(b.Hint(At(0 * kUs)), 10'000u);
  b.OnLocalPost(outgoing);  // once is enough
  b.OnData(At(1 * kUs), incoming, 1000);
  EXPECT_EQ(b.Hint(At(1 * kUs)), 10'000u);
  // Data arriving on it after all (both directions in use) counts it, as active.
  b.OnData(At(2 * kUs), outgoing, 1000);
  EXPECT_EQ(b.counted_pairs(), 16u);
}

TEST(ReceiveBudget_Hint, DisabledBudgetGivesNoHintAndNoOffer) {
  ReceiveBudgetConfig c = Config();
  c.budget_bytes = 0;
  ReceiveBudget b(c);
  ActivityMark m;
  b.AddConnection(m, 8);
  EXPECT_EQ(b.Hint(At(0 * kUs)), 0u);
  EXPECT_EQ(b.InitialOffer(), 0u);
}

TEST(ReceiveBudget_Hint, IsAtLeastOneByte) {
  ReceiveBudgetConfig c = Config();
  c.budget_bytes = 10;
  ReceiveBudget b(c);
  ActivityMark m;
  b.AddConnection(m, 64);
  EXPECT_EQ(b.Hint(At(0 * kUs)), 1u);
}

// A connection set up while the budget is between checks counts from the next event on, for one
// active_window (Roll's shortcut must not leave its group unstamped until the epoch ends).
TEST(ReceiveBudget_Hint, AConnectionSetUpBetweenEventsExpiresAWindowAfterTheNextEvent) {
  ReceiveBudget b(Config());  // active_window 1000 us
  ActivityMark busy, late;
  b.AddConnection(busy, 8);
  b.OnData(At(0 * kUs), busy, 1000);
  b.AddConnection(late, 8);  // never sends
  EXPECT_EQ(b.Hint(At(100 * kUs)), 5'000u);  // its group's first event: 100 us
  b.OnData(At(1050 * kUs), busy, 1000);
  EXPECT_EQ(b.counted_pairs(), 16u);
  EXPECT_EQ(b.Hint(At(1100 * kUs)), 10'000u) << "counted until 100 + 1000 us";
}

// An epoch's length in bytes follows the connections there are: removing most of them shortens
// the epoch under way at once (Roll's shortcut must not keep the longer length it computed).
TEST(ReceiveBudget_Epochs, RemovedConnectionsShortenTheEpochUnderWay) {
  ReceiveBudget b(Config());  // 80,000 bytes, 1,000-byte packets
  ActivityMark quiet, busy;
  std::vector<ActivityMark> others(98);
  b.AddConnection(quiet, 1);
  b.AddConnection(busy, 1);
  for (ActivityMark& m : others) b.AddConnection(m, 1);
  // 100 connections: an epoch is two packets each, 200,000 bytes.
  b.OnData(At(0 * kUs), quiet, 1000);
  b.OnData(At(0 * kUs), busy, 1000);
  for (ActivityMark& m : others) b.RemoveConnection(m);
  EXPECT_EQ(b.counted_pairs(), 2u);
  // Two connections: an epoch is the budget, 80,000 bytes, and the silent one is forgotten
  // after two of them.
  uint64_t bytes = 2000;
  for (int t = 1; b.counted_pairs() > 1 && bytes < 400'000; ++t) {
    b.OnData(At(t * kUs), busy, 1000);
    bytes += 1000;
  }
  EXPECT_EQ(b.counted_pairs(), 1u);
  EXPECT_LE(bytes, 2 * 80'000u + 2000);
}

TEST(ReceiveBudget_Epochs, AConnectionThatStoppedIsForgottenWithinTwoEpochsOfBytes) {
  ReceiveBudget b(Config());
  ActivityMark quiet, busy;
  b.AddConnection(quiet, 4);
  b.AddConnection(busy, 4);
  b.OnData(At(0 * kUs), quiet, 1000);
  b.OnData(At(0 * kUs), busy, 1000);
  EXPECT_EQ(b.Hint(At(0 * kUs)), 10'000u);
  // An epoch is max(budget, 2 x mtu x connections) = 80,000 bytes: `busy` alone sends two of
  // them; `quiet` counts in the previous epoch during the first, then not at all.
  Instant t = At(1 * kUs);
  for (int i = 0; i < 80; ++i) b.OnData(t = t + kUs, busy, 1000);
  EXPECT_EQ(b.Hint(t), 10'000u);
  for (int i = 0; i < 80; ++i) b.OnData(t = t + kUs, busy, 1000);
  EXPECT_EQ(b.Hint(t), 20'000u);
}

TEST(ReceiveBudget_Epochs, EndAfterTwiceThePreviousEpochWhenBytesSlowDown) {
  ReceiveBudget b(Config());
  ActivityMark gone, slow;
  b.AddConnection(gone, 4);
  b.AddConnection(slow, 4);
  // A first epoch ended by its bytes in 80 us...
  Instant t = At(0 * kUs);
  for (int i = 0; i < 40; ++i) {
    b.OnData(t = t + kUs, gone, 1000);
    b.OnData(t = t + kUs, slow, 1000);
  }
  b.OnData(t = t + kUs, slow, 1000);
  EXPECT_EQ(b.Hint(t), 10'000u);
  // ...then `gone` stops and `slow` sends one packet per 50 us: 160 us later two epochs have
  // ended by time, and `slow` has the whole budget.
  for (int i = 0; i < 8; ++i) b.OnData(t = t + 50 * kUs, slow, 1000);
  EXPECT_EQ(b.Hint(t), 20'000u);
}

TEST(ReceiveBudget_Epochs, SilenceForgetsEveryone) {
  ReceiveBudget b(Config());
  ActivityMark m;
  b.AddConnection(m, 4);
  b.OnData(At(0 * kUs), m, 1000);
  EXPECT_EQ(b.counted_pairs(), 4u);
  EXPECT_EQ(b.Hint(At(2000 * kUs)), 80'000u);  // nothing counted: the whole budget
}

TEST(ReceiveBudget_Offer, IsTheBudgetOverTheConnectionsWithTheNewOne) {
  ReceiveBudget b(Config());
  EXPECT_EQ(b.InitialOffer(), 80'000u);
  ActivityMark m1, m2, m3;
  b.AddConnection(m1, 8);
  b.AddConnection(m2, 8);
  b.AddConnection(m3, 8);
  EXPECT_EQ(b.InitialOffer(), 20'000u);
  b.RemoveConnection(m2);
  EXPECT_EQ(b.connections(), 2u);
  EXPECT_EQ(b.InitialOffer(), 80'000u / 3);
  EXPECT_EQ(b.counted_pairs(), 16u);  // a pending connection removed stops counting at once
}

// congestion.md §6.2: the host granted a connection's first window with its offer, so the pull
// pacer takes no slot for it: up to its share of the budget when its first packet comes.
TEST(ReceiveBudget_Prepaid, AConnectionsFirstWindowIsItsShareWhenItsFirstPacketCame) {
  ReceiveBudget b(Config());
  ActivityMark m1, m2;
  b.AddConnection(m1, 8);
  b.AddConnection(m2, 8);  // two set up together: a share of 40,000 bytes each
  b.OnData(At(1 * kUs), m1, 1000);
  EXPECT_TRUE(b.TakePrepaid(m1, 1000));
  for (int i = 1; i < 40; ++i) {
    b.OnData(At(1 * kUs), m1, 1000);
    EXPECT_TRUE(b.TakePrepaid(m1, 1000)) << i;
  }
  b.OnData(At(2 * kUs), m1, 1000);
  EXPECT_FALSE(b.TakePrepaid(m1, 1000));  // beyond the share: unsolicited
  // The window ends with the first packet beyond it: nothing is saved up.
  EXPECT_FALSE(b.TakePrepaid(m1, 1));
  // A connection's later packets never refill it.
  b.OnData(At(3 * kUs), m1, 1000);
  EXPECT_FALSE(b.TakePrepaid(m1, 1000));
}

}  // namespace
}  // namespace metaroce::core
