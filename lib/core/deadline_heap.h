// The timer structure of an endpoint: its connections ordered by their next deadline, so that the
// earliest is found in O(1) and a change costs O(log n), whatever the number of connections.
//
// An indexed binary min-heap: each item records its own position (a HeapSlot reached through
// item.deadline_slot()), so Update() and Remove() need no search. Items with the same deadline
// come out in order of item.local_id(): the order due timers run in is a function of the
// deadlines alone, never of the history of the heap (mrsim's runs stay reproducible).
//
// Contract: an item is in the heap exactly when its last Update() gave a deadline other than
// kNever and it was not removed since; the heap does not own its items, and an item must be
// removed before it is destroyed. T needs `HeapSlot& deadline_slot()` and `uint32_t local_id()`.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lib/core/types.h"

namespace metaroce::core {

// Where an item sits in a DeadlineHeap; opaque to the item.
struct HeapSlot {
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t index = kNone;
};

template <typename T>
class DeadlineHeap {
 public:
  // Inserts, moves or (deadline kNever) removes `item`.
  void Update(T& item, Instant deadline) {
    if (deadline == kNever) {
      Remove(item);
      return;
    }
    uint32_t& at = item.deadline_slot().index;
    if (at == HeapSlot::kNone) {
      at = static_cast<uint32_t>(heap_.size());
      heap_.push_back({deadline, &item});
      SiftUp(at);
      return;
    }
    const Instant old = heap_[at].deadline;
    heap_[at].deadline = deadline;
    if (deadline < old) {
      SiftUp(at);
    } else {
      SiftDown(at);
    }
  }
  void Remove(T& item) {
    const uint32_t at = item.deadline_slot().index;
    if (at == HeapSlot::kNone) return;
    item.deadline_slot().index = HeapSlot::kNone;
    const uint32_t last = static_cast<uint32_t>(heap_.size() - 1);
    if (at != last) {
      Place(at, heap_[last]);
      heap_.pop_back();
      SiftDown(at);
      SiftUp(at);
    } else {
      heap_.pop_back();
    }
  }
  bool Contains(T& item) const { return item.deadline_slot().index != HeapSlot::kNone; }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // The earliest deadline, or kNever when empty.
  Instant top_deadline() const { return heap_.empty() ? kNever : heap_.front().deadline; }
  // The item with the earliest deadline. Precondition: !empty().
  T& top() const { return *heap_.front().item; }

 private:
  struct Entry {
    Instant deadline;
    T* item;
  };
  static bool Before(const Entry& a, const Entry& b) {
    if (a.deadline != b.deadline) return a.deadline < b.deadline;
    return a.item->local_id() < b.item->local_id();
  }
  void Place(uint32_t at, const Entry& e) {
    heap_[at] = e;
    e.item->deadline_slot().index = at;
  }
  void SiftUp(uint32_t at) {
    const Entry e = heap_[at];
    while (at > 0) {
      const uint32_t parent = (at - 1) / 2;
      if (!Before(e, heap_[parent])) break;
      Place(at, heap_[parent]);
      at = parent;
    }
    Place(at, e);
  }
  void SiftDown(uint32_t at) {
    const Entry e = heap_[at];
    const uint32_t n = static_cast<uint32_t>(heap_.size());
    while (true) {
      uint32_t child = 2 * at + 1;
      if (child >= n) break;
      if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
      if (!Before(heap_[child], e)) break;
      Place(at, heap_[child]);
      at = child;
    }
    Place(at, e);
  }

  std::vector<Entry> heap_;
};

}  // namespace metaroce::core
