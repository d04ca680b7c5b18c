#include "tools/sim/event_queue.h"

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/sim/rng.h"

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

TEST(EventQueue_Ordering, ManyEventsRunSortedByTimeThenInsertion) {
  // Thousands of events at few distinct times, a third of them scheduled by running events (some
  // for the instant being run, some before it), on three lanes or none (mostly out of order for
  // a lane, so both of a lane's ways are taken): they must run exactly in (time, sequence) order.
  EventQueue q;
  const std::array<EventQueue::Lane, 3> lanes = {q.AddLane(), q.AddLane(), q.AddLane()};
  Xoshiro256 rng(7);
  struct Scheduled {
    int64_t at;  // after clamping
    uint64_t seq;
  };
  std::vector<Scheduled> scheduled;  // by event id
  std::vector<size_t> ran;           // event ids in the order they ran
  std::function<void(int64_t)> add = [&](int64_t at) {
    const size_t id = scheduled.size();
    const bool spawns = rng.Next() % 3 == 0;
    scheduled.push_back({std::max(at, q.now().ns), 0});
    auto fn = [&, id, spawns] {
      ran.push_back(id);
      EXPECT_EQ(q.now().ns, scheduled[id].at);
      if (spawns) add(q.now().ns + static_cast<int64_t>(rng.Next() % 4) * 10 - 10);
    };
    const uint64_t lane = rng.Next() % 4;
    scheduled[id].seq = lane == 3 ? q.Schedule(Instant{at}, fn)
                                  : q.ScheduleOnLane(lanes[lane], Instant{at}, fn);
    EXPECT_EQ(q.pending(), scheduled.size() - ran.size());
  };
  for (int i = 0; i < 3000; ++i) add(static_cast<int64_t>(rng.Next() % 50) * 10);
  while (q.RunNext()) {
  }
  std::vector<size_t> expected(scheduled.size());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = i;
  std::sort(expected.begin(), expected.end(), [&](size_t a, size_t b) {
    return std::tie(scheduled[a].at, scheduled[a].seq) < std::tie(scheduled[b].at, scheduled[b].seq);
  });
  EXPECT_GT(scheduled.size(), 3500u);
  EXPECT_EQ(ran, expected);
  EXPECT_GT(q.clamped(), 0u);
}

TEST(EventQueue_Captures, LargeCapturesRunAndPendingOnesAreDestroyed) {
  auto token = std::make_shared<int>(0);
  {
    EventQueue q;
    std::array<uint64_t, 32> big{};  // 256 bytes: held outside the event's slot
    big[31] = 42;
    uint64_t seen = 0;
    q.Schedule(Instant{1}, [&seen, big, token] { seen = big[31]; });
    q.Schedule(Instant{2}, [token] {});               // small, never run
    q.Schedule(Instant{3}, [big, token] { (void)big; });  // large, never run
    EXPECT_EQ(token.use_count(), 4);
    EXPECT_TRUE(q.RunNext());
    EXPECT_EQ(seen, 42u);
    EXPECT_EQ(token.use_count(), 3);  // a callable is destroyed once it has run
  }
  EXPECT_EQ(token.use_count(), 1);  // the queue destroyed the two it never ran
}

TEST(EventQueue_Lanes, ALaneKeepsOnlyItsFirstEventInTheHeap) {
  // A FIFO link's arrivals: in order on the lane, interleaved with heap events at the same times.
  EventQueue q;
  const EventQueue::Lane link = q.AddLane();
  std::string order;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>('a' + i);
    q.ScheduleOnLane(link, Instant{10 * (i + 1)}, [&, c] { order += c; });
  }
  q.Schedule(Instant{20}, [&] { order += 'X'; });  // after 'b' (scheduled later, same time)
  q.Schedule(Instant{5}, [&] { order += 'Y'; });
  q.ScheduleOnLane(link, Instant{15}, [&] { order += 'Z'; });  // before the lane's last: heap
  EXPECT_EQ(q.pending(), 7u);
  EXPECT_EQ(q.NextTime().ns, 5);
  while (q.RunNext()) {
  }
  EXPECT_EQ(order, "YaZbXcd");
  EXPECT_EQ(q.pending(), 0u);
  // An emptied lane takes events again, from any time on.
  q.ScheduleOnLane(link, Instant{100}, [&] { order += 'e'; });
  EXPECT_TRUE(q.RunNext());
  EXPECT_EQ(order, "YaZbXcde");
}

TEST(EventQueue_Lanes, PendingLaneEventsAreDestroyedWithTheQueue) {
  auto token = std::make_shared<int>(0);
  {
    EventQueue q;
    const EventQueue::Lane lane = q.AddLane();
    for (int i = 0; i < 200; ++i) q.ScheduleOnLane(lane, Instant{i}, [token] {});  // grows the ring
    EXPECT_EQ(token.use_count(), 201);
    for (int i = 0; i < 150; ++i) EXPECT_TRUE(q.RunNext());
    EXPECT_EQ(token.use_count(), 51);
  }
  EXPECT_EQ(token.use_count(), 1);
}

TEST(EventQueue_Captures, ARunningEventMayScheduleManyMore) {
  // Slots come in blocks; scheduling thousands of events from inside one must not move it.
  EventQueue q;
  std::string log;
  q.Schedule(Instant{0}, [&, text = std::string("first")] {
    for (int i = 0; i < 5000; ++i) q.Schedule(Instant{1 + i}, [] {});
    log = text;  // the capture is still intact
  });
  while (q.RunNext()) {
  }
  EXPECT_EQ(log, "first");
  EXPECT_EQ(q.executed(), 5001u);
}

}  // namespace
}  // namespace metaroce::sim
