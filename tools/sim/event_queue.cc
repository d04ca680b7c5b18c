#include "tools/sim/event_queue.h"

#include <utility>

namespace metaroce::sim {

EventQueue::~EventQueue() {
  for (const Key& key : heap_) {
    if (key.lane != kNoLane) continue;  // destroyed with its lane
    Slot& slot = SlotAt(key.slot);
    slot.op(slot, /*run=*/false);
  }
  for (LaneQueue& q : lanes_) {
    for (; q.count > 0; q.pop_front()) {
      Slot& slot = SlotAt(q.front().slot);
      slot.op(slot, /*run=*/false);
    }
  }
}

EventQueue::Lane EventQueue::AddLane() {
  lanes_.emplace_back();
  return static_cast<Lane>(lanes_.size() - 1);
}

void EventQueue::LaneQueue::push_back(const Key& key) {
  if (count == ring.size()) {  // full (or never used): double, keeping the order
    std::vector<Key> bigger(ring.empty() ? 64 : 2 * ring.size());
    for (size_t i = 0; i < count; ++i) bigger[i] = ring[(head + i) & (ring.size() - 1)];
    ring = std::move(bigger);
    head = 0;
  }
  ring[(head + count) & (ring.size() - 1)] = key;
  ++count;
}

uint32_t EventQueue::TakeSlot() {
  if (!free_slots_.empty()) {
    const uint32_t index = free_slots_.back();
    free_slots_.pop_back();
    return index;
  }
  if ((slots_made_ >> kBlockBits) == blocks_.size()) {
    blocks_.push_back(std::make_unique<Slot[]>(size_t{1} << kBlockBits));
  }
  return slots_made_++;
}

void EventQueue::Push(Key key) {
  // Sift up: move parents down into the hole until the key's place is found.
  size_t hole = heap_.size();
  heap_.push_back(key);
  while (hole > 0) {
    const size_t parent = (hole - 1) / 4;
    if (!RunsBefore(key, heap_[parent])) break;
    heap_[hole] = heap_[parent];
    hole = parent;
  }
  heap_[hole] = key;
}

void EventQueue::PopFront() {
  const Key last = heap_.back();
  heap_.pop_back();
  if (!heap_.empty()) SiftDown(0, last);
}

void EventQueue::SiftDown(size_t hole, Key key) {
  // Move the earliest child up into the hole until `key` fits there.
  const size_t n = heap_.size();
  for (;;) {
    const size_t first = 4 * hole + 1;
    if (first >= n) break;
    const size_t end = first + 4 < n ? first + 4 : n;
    size_t best = first;
    for (size_t c = first + 1; c < end; ++c) {
      if (RunsBefore(heap_[c], heap_[best])) best = c;
    }
    if (!RunsBefore(heap_[best], key)) break;
    heap_[hole] = heap_[best];
    hole = best;
  }
  heap_[hole] = key;
}

bool EventQueue::RunNext() {
  if (heap_.empty()) return false;
  const Key front = heap_.front();
  if (front.lane == kNoLane) {
    PopFront();
  } else {
    // The lane's first event leaves; its next one (if any) takes its place in the heap.
    LaneQueue& q = lanes_[front.lane];
    q.pop_front();
    if (q.count > 0) {
      SiftDown(0, q.front());
    } else {
      PopFront();
    }
  }
  --pending_;
  now_ = Instant{front.at};
  ++executed_;
  // The callable runs in its slot (blocks never move) and may schedule further events; its slot
  // is reused only after it has returned and been destroyed.
  Slot& slot = SlotAt(front.slot);
  slot.op(slot, /*run=*/true);
  free_slots_.push_back(front.slot);
  return true;
}

}  // namespace metaroce::sim
