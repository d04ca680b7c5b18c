#include "tools/sim/event_queue.h"

#include <algorithm>
#include <utility>

namespace metaroce::sim {

uint64_t EventQueue::Schedule(Instant at, Callback fn) {
  if (at < now_) {
    at = now_;
    ++clamped_;
  }
  const uint64_t seq = next_seq_++;
  heap_.push_back(Event{at, seq, std::move(fn)});
  std::push_heap(heap_.begin(), heap_.end(), RunsAfter);
  return seq;
}

bool EventQueue::RunNext() {
  if (heap_.empty()) return false;
  std::pop_heap(heap_.begin(), heap_.end(), RunsAfter);
  Event event = std::move(heap_.back());
  heap_.pop_back();
  now_ = event.at;
  ++executed_;
  // The callback may schedule further events; it owns nothing in heap_ any more.
  event.fn();
  return true;
}

std::string_view EventQueue::RunUntil(Instant cap, uint64_t max_events,
                                      const std::function<bool()>& done,
                                      const std::function<void()>& after_each) {
  for (;;) {
    if (done()) return "done";
    if (empty()) return "idle";
    if (NextTime() > cap) return "duration_cap";
    if (executed_ >= max_events) return "event_cap";
    RunNext();
    if (after_each) after_each();
  }
}

}  // namespace metaroce::sim
