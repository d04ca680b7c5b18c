#include "tools/sim/event_queue.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::sim {
namespace {

using ::testing::ElementsAre;

TEST(EventQueue_Ordering, RunsInTimeOrder) {
  EventQueue q;
  std::vector<int64_t> seen;
  for (int64_t t : {30, 10, 20}) q.Schedule(Instant{t}, [&, t] { seen.push_back(t); });
  while (q.RunNext()) EXPECT_EQ(q.now().ns, seen.back());
  EXPECT_THAT(seen, ElementsAre(10, 20, 30));
  EXPECT_EQ(q.executed(), 3u);
}

TEST(EventQueue_Ties, RunInInsertionOrder) {
  EventQueue q;
  std::string order;
  for (char c : std::string("abcdefgh")) q.Schedule(Instant{5}, [&, c] { order += c; });
  while (q.RunNext()) {
  }
  EXPECT_EQ(order, "abcdefgh");
}

TEST(EventQueue_Ties, EventScheduledForNowRunsAfterThoseAlreadyDue) {
  EventQueue q;
  std::string order;
  q.Schedule(Instant{1}, [&] {
    order += 'a';
    q.Schedule(q.now(), [&] { order += 'c'; });
  });
  q.Schedule(Instant{1}, [&] { order += 'b'; });
  while (q.RunNext()) {
  }
  EXPECT_EQ(order, "abc");
}

TEST(EventQueue_Past, ClampsToNowAndCounts) {
  EventQueue q;
  int64_t ran_at = -1;
  q.Schedule(Instant{100}, [&] { q.Schedule(Instant{50}, [&] { ran_at = q.now().ns; }); });
  while (q.RunNext()) {
  }
  EXPECT_EQ(ran_at, 100);
  EXPECT_EQ(q.clamped(), 1u);
}

TEST(EventQueue_Empty, RunNextReturnsFalse) {
  EventQueue q;
  EXPECT_FALSE(q.RunNext());
  EXPECT_EQ(q.NextTime(), core::kNever);
  q.ScheduleAfter(Duration(7), [] {});
  EXPECT_EQ(q.NextTime().ns, 7);
  EXPECT_TRUE(q.RunNext());
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace metaroce::sim
