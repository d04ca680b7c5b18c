// The simulator's clock and agenda: a priority queue of callbacks ordered by (time, insertion order).
//
// Determinism contract: two events due at the same instant run in the order they were scheduled,
// so a run depends only on its inputs, never on heap layout or addresses. Time never goes back:
// scheduling an event before now() is a caller error and is clamped to now() (and counted).
//
// Cost: a run moves millions of events, so an event is kept cheap. Its callable is built in place
// in a slot of 64 bytes (captures up to kInlineBytes are never allocated; larger ones are, once);
// slots live in fixed blocks that never move and are reused last-freed first, so a callable runs
// where it was built. The heap orders 24-byte keys (time, sequence, slot), 4 children a node, so a
// queue of tens of thousands of pending events stays shallow and small enough to stay in cache.
//
// Thread-safety: none; one simulation, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "lib/core/types.h"

namespace metaroce::sim {

using core::Duration;
using core::Instant;

class EventQueue {
 public:
  // Captures of at most this many bytes (and alignment <= 8) are stored in the event's slot.
  static constexpr size_t kInlineBytes = 56;

  EventQueue() = default;
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;
  ~EventQueue();

  // Schedules `fn` (any callable taking no argument) to run at `at` (clamped to now()). Returns
  // the event's insertion sequence number.
  template <typename F>
  uint64_t Schedule(Instant at, F&& fn);
  template <typename F>
  uint64_t ScheduleAfter(Duration delay, F&& fn) {
    return Schedule(now_ + delay, std::forward<F>(fn));
  }

  // Advances now() to the earliest event and runs it. Returns false (and does nothing) when empty.
  bool RunNext();
  // Runs events until `done()` holds (checked before each), the queue is empty, the next event is
  // after `cap`, or `max_events` have run in all; returns which: "done", "idle",
  // "duration_cap" or "event_cap". `after_each`, if given, runs after every event.
  template <typename Done, typename AfterEach = std::nullptr_t>
  std::string_view RunUntil(Instant cap, uint64_t max_events, Done&& done,
                            AfterEach&& after_each = nullptr) {
    for (;;) {
      if (done()) return "done";
      if (empty()) return "idle";
      if (NextTime() > cap) return "duration_cap";
      if (executed_ >= max_events) return "event_cap";
      RunNext();
      if constexpr (!std::is_same_v<std::decay_t<AfterEach>, std::nullptr_t>) after_each();
    }
  }
  // Time of the earliest pending event, or kNever when empty.
  Instant NextTime() const { return heap_.empty() ? core::kNever : Instant{heap_.front().at}; }

  Instant now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  size_t pending() const { return heap_.size(); }
  uint64_t executed() const { return executed_; }
  // Schedule() calls whose time was before now() (a caller bug; the event ran at now()).
  uint64_t clamped() const { return clamped_; }

 private:
  // One pending event's callable. `op` runs it (run == true) or only destroys it (a queue
  // destroyed with events pending); either way the callable is destroyed when `op` returns.
  struct Slot {
    alignas(8) std::byte storage[kInlineBytes];
    void (*op)(Slot& slot, bool run);
  };
  static_assert(sizeof(Slot) == 64);
  struct Key {
    int64_t at;
    uint64_t seq;
    uint32_t slot;
  };
  // Heap order: true when `a` runs before `b` (seq is unique, so this is a total order).
  static bool RunsBefore(const Key& a, const Key& b) {
    return a.at != b.at ? a.at < b.at : a.seq < b.seq;
  }
  static constexpr uint32_t kBlockBits = 10;  // 1,024 slots (64 KiB) a block

  template <typename Fn>
  static void InlineOp(Slot& slot, bool run) {
    Fn* fn = std::launder(reinterpret_cast<Fn*>(slot.storage));
    struct Destroy {
      Fn* fn;
      ~Destroy() { fn->~Fn(); }
    } destroy{fn};
    if (run) (*fn)();
  }
  template <typename Fn>
  static void HeapOp(Slot& slot, bool run) {
    std::unique_ptr<Fn> fn(*std::launder(reinterpret_cast<Fn**>(slot.storage)));
    if (run) (*fn)();
  }

  Slot& SlotAt(uint32_t index) {
    return blocks_[index >> kBlockBits][index & ((1u << kBlockBits) - 1)];
  }
  uint32_t TakeSlot();
  void Push(Key key);
  void PopFront();

  std::vector<std::unique_ptr<Slot[]>> blocks_;
  std::vector<uint32_t> free_slots_;  // last freed on top
  uint32_t slots_made_ = 0;
  std::vector<Key> heap_;  // 4-ary min-heap by RunsBefore
  Instant now_;
  uint64_t next_seq_ = 0;
  uint64_t executed_ = 0;
  uint64_t clamped_ = 0;
};

template <typename F>
uint64_t EventQueue::Schedule(Instant at, F&& fn) {
  using Fn = std::decay_t<F>;
  if (at < now_) {
    at = now_;
    ++clamped_;
  }
  const uint32_t index = TakeSlot();
  Slot& slot = SlotAt(index);
  if constexpr (sizeof(Fn) <= kInlineBytes && alignof(Fn) <= 8) {
    ::new (static_cast<void*>(slot.storage)) Fn(std::forward<F>(fn));
    slot.op = &InlineOp<Fn>;
  } else {
    Fn* held = new Fn(std::forward<F>(fn));
    ::new (static_cast<void*>(slot.storage)) Fn*(held);
    slot.op = &HeapOp<Fn>;
  }
  const uint64_t seq = next_seq_++;
  Push(Key{at.ns, seq, index});
  return seq;
}

}  // namespace metaroce::sim
