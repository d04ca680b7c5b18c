// RingQueue<T>: a FIFO in one power-of-two array, for the sender's outstanding messages
// (internal to lib/core).
//
// Why not std::deque: Sender::Find indexes the queue ~17 times per message (the tail-probe and
// segmentation checks), and a deque index is ~40 instructions of block arithmetic; here it is an
// add and a mask (docs/performance.md).
//
// Memory contract (docs/architecture.md, "What a connection costs"): storage is allocated on the
// first push and doubles when full; when the queue empties a grown array is released and the
// smallest (kMinCapacity slots) kept, so a connection that never sent holds none, and one that
// sends a message at a time allocates none per message. Popped slots are reset to T{} at once,
// or, for an element type with a `Recycle()` member, recycled: Recycle() must make the element
// read as a value-initialized one while it may keep buffers (its per-packet arrays) for the
// element pushed into that slot next, which emplace_back then hands out as it is.
// Element references stay valid until the element is popped or the queue grows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace metaroce::core {

template <typename T>
concept Recyclable = requires(T& t) { t.Recycle(); };

template <typename T>
class RingQueue {
 public:
  static constexpr size_t kMinCapacity = 4;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }  // slots allocated: 0 or a power of two
  T& operator[](size_t i) { return slots_[(head_ + i) & (capacity_ - 1)]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & (capacity_ - 1)]; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }

  // A new element at the back, value-initialized (or recycled: above).
  T& emplace_back() {
    if (size_ == capacity_) Grow();
    T& slot = (*this)[size_++];
    if constexpr (!Recyclable<T>) slot = T{};  // a recycled slot was reset when popped
    return slot;
  }

  void pop_front() {
    if constexpr (Recyclable<T>) {
      slots_[head_].Recycle();
    } else {
      slots_[head_] = T{};
    }
    head_ = (head_ + 1) & (capacity_ - 1);
    if (--size_ == 0) {
      // Emptied: a grown array goes (a queue that once held many holds nothing idle); the
      // smallest stays, so that a queue emptied after every element (one message at a time)
      // does not allocate for each.
      if (capacity_ > kMinCapacity) {
        slots_.reset();
        capacity_ = 0;
      }
      head_ = 0;
    }
  }

  template <typename Q, typename E>
  class Iterator {
   public:
    Iterator(Q* q, size_t i) : q_(q), i_(i) {}
    E& operator*() const { return (*q_)[i_]; }
    E* operator->() const { return &(*q_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    Q* q_;
    size_t i_;
  };
  Iterator<RingQueue, T> begin() { return {this, 0}; }
  Iterator<RingQueue, T> end() { return {this, size_}; }
  Iterator<const RingQueue, const T> begin() const { return {this, 0}; }
  Iterator<const RingQueue, const T> end() const { return {this, size_}; }

 private:
  void Grow() {
    const size_t capacity = capacity_ == 0 ? kMinCapacity : capacity_ * 2;
    auto slots = std::make_unique<T[]>(capacity);
    for (size_t i = 0; i < size_; ++i) slots[i] = std::move((*this)[i]);
    slots_ = std::move(slots);
    capacity_ = capacity;
    head_ = 0;
  }

  std::unique_ptr<T[]> slots_;
  size_t capacity_ = 0;  // 0 or a power of two
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace metaroce::core
