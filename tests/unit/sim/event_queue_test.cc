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

TEST(EventQueue_RunUntil, StopsForTheFirstReasonThatHolds) {
  // An event every 10 ns forever (each schedules the next).
  struct Tick {
    EventQueue* q;
    void operator()() const { q->ScheduleAfter(Duration(10), *this); }
  };
  auto ticking = [](EventQueue& q) {
    q.Schedule(Instant{0}, Tick{&q});
    return 0;
  };
  {
    EventQueue q;
    auto keep = ticking(q);
    int after = 0;
    EXPECT_EQ(q.RunUntil(Instant{1000}, 1'000'000, [&] { return q.now().ns >= 300; },
                         [&] { ++after; }),
              "done");
    EXPECT_EQ(q.now().ns, 300);
    EXPECT_EQ(after, 31);  // events at 0, 10, ..., 300
  }
  {
    EventQueue q;
    auto keep = ticking(q);
    EXPECT_EQ(q.RunUntil(Instant{95}, 1'000'000, [] { return false; }), "duration_cap");
    EXPECT_EQ(q.now().ns, 90);
  }
  {
    EventQueue q;
    auto keep = ticking(q);
    EXPECT_EQ(q.RunUntil(Instant{1'000'000}, 5, [] { return false; }), "event_cap");
    EXPECT_EQ(q.executed(), 5u);
  }
  EventQueue q;
  q.Schedule(Instant{3}, [] {});
  EXPECT_EQ(q.RunUntil(Instant{1'000'000}, 5, [] { return false; }), "idle");
}

}  // namespace
}  // namespace metaroce::sim
