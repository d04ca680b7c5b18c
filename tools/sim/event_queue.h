// The simulator's clock and agenda: a priority queue of callbacks ordered by (time, insertion order).
//
// Determinism contract: two events due at the same instant run in the order they were scheduled,
// so a run depends only on its inputs, never on heap layout or addresses. Time never goes back:
// scheduling an event before now() is a caller error and is clamped to now() (and counted).
//
// Thread-safety: none; one simulation, one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "lib/core/types.h"

namespace metaroce::sim {

using core::Duration;
using core::Instant;

class EventQueue {
 public:
  using Callback = std::function<void()>;

  // Schedules `fn` to run at `at` (clamped to now()). Returns the event's insertion sequence number.
  uint64_t Schedule(Instant at, Callback fn);
  uint64_t ScheduleAfter(Duration delay, Callback fn) { return Schedule(now_ + delay, std::move(fn)); }

  // Advances now() to the earliest event and runs it. Returns false (and does nothing) when empty.
  bool RunNext();
  // Runs events until `done()` holds (checked before each), the queue is empty, the next event is
  // after `cap`, or `max_events` have run in all; returns which: "done", "idle",
  // "duration_cap" or "event_cap". `after_each`, if given, runs after every event.
  std::string_view RunUntil(Instant cap, uint64_t max_events, const std::function<bool()>& done,
                            const std::function<void()>& after_each = {});
  // Time of the earliest pending event, or kNever when empty.
  Instant NextTime() const { return heap_.empty() ? core::kNever : heap_.front().at; }

  Instant now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  size_t pending() const { return heap_.size(); }
  uint64_t executed() const { return executed_; }
  // Schedule() calls whose time was before now() (a caller bug; the event ran at now()).
  uint64_t clamped() const { return clamped_; }

 private:
  struct Event {
    Instant at;
    uint64_t seq;
    Callback fn;
  };
  // Heap comparator: true when `a` must run after `b`.
  static bool RunsAfter(const Event& a, const Event& b) {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }

  std::vector<Event> heap_;
  Instant now_;
  uint64_t next_seq_ = 0;
  uint64_t executed_ = 0;
  uint64_t clamped_ = 0;
};

}  // namespace metaroce::sim
