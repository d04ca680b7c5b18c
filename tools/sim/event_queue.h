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
// Events that come in time order anyway (the arrivals of one FIFO link) can go on a lane, of which
// only the earliest event is in the heap: then the heap does not grow with the packets in flight.
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

  // A lane: a FIFO of events scheduled in time order, each at or after the one scheduled on the
  // lane before it (what a FIFO link's arrivals are). Only its earliest event is in the heap. An
  // event scheduled on a lane earlier than the lane's last goes into the heap like any other;
  // events run in (time, insertion) order whichever way they went.
  using Lane = uint32_t;
  Lane AddLane();
  template <typename F>
  uint64_t ScheduleOnLane(Lane lane, Instant at, F&& fn);

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
  bool empty() const { return heap_.empty(); }  // a non-empty lane has its first in the heap
  size_t pending() const { return pending_; }
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
  static constexpr uint32_t kNoLane = UINT32_MAX;
  struct Key {
    int64_t at;
    uint64_t seq;
    uint32_t slot;
    uint32_t lane;  // kNoLane: the event is in the heap alone; else its lane's first event
  };
  // A lane's events in order: a ring of keys whose capacity is a power of two.
  struct LaneQueue {
    std::vector<Key> ring;
    size_t head = 0;
    size_t count = 0;
    const Key& front() const { return ring[head]; }
    const Key& back() const { return ring[(head + count - 1) & (ring.size() - 1)]; }
    void push_back(const Key& key);
    void pop_front() {
      head = (head + 1) & (ring.size() - 1);
      --count;
    }
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
  // Builds `fn` in a free slot; returns the slot's index.
  template <typename F>
  uint32_t Emplace(F&& fn);
  uint32_t TakeSlot();
  void Push(Key key);
  void PopFront();
  // Puts `key` in the hole at `hole` (the front: in place of the front) and restores heap order.
  void SiftDown(size_t hole, Key key);

  std::vector<std::unique_ptr<Slot[]>> blocks_;
  std::vector<uint32_t> free_slots_;  // last freed on top
  uint32_t slots_made_ = 0;
  std::vector<Key> heap_;  // 4-ary min-heap by RunsBefore
  std::vector<LaneQueue> lanes_;
  size_t pending_ = 0;
  Instant now_;
  uint64_t next_seq_ = 0;
  uint64_t executed_ = 0;
  uint64_t clamped_ = 0;
};

template <typename F>
uint32_t EventQueue::Emplace(F&& fn) {
  using Fn = std::decay_t<F>;
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
  return index;
}

template <typename F>
uint64_t EventQueue::Schedule(Instant at, F&& fn) {
  if (at < now_) {
    at = now_;
    ++clamped_;
  }
  const uint32_t index = Emplace(std::forward<F>(fn));
  const uint64_t seq = next_seq_++;
  Push(Key{at.ns, seq, index, kNoLane});
  ++pending_;
  return seq;
}

template <typename F>
uint64_t EventQueue::ScheduleOnLane(Lane lane, Instant at, F&& fn) {
  if (at < now_) {
    at = now_;
    ++clamped_;
  }
  const uint32_t index = Emplace(std::forward<F>(fn));
  const uint64_t seq = next_seq_++;
  LaneQueue& q = lanes_[lane];
  const Key key{at.ns, seq, index, lane};
  if (q.count == 0) {
    q.push_back(key);
    Push(key);
  } else if (at.ns >= q.back().at) {
    q.push_back(key);
  } else {
    Push(Key{at.ns, seq, index, kNoLane});
  }
  ++pending_;
  return seq;
}

}  // namespace metaroce::sim
