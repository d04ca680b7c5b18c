// A bounded single-producer single-consumer ring: the only way data crosses threads on the data
// path (application -> owner worker commands, worker -> application completions, worker -> worker
// packet handoff). Lock-free and wait-free: one acquire load and one release store per operation
// in the common case, because each side caches the other side's index and reloads it only when
// the cached value says the ring looks full (producer) or empty (consumer).
//
// Threading: exactly one producer thread calls TryPush/FreeApprox and exactly one consumer thread
// calls TryPop/PopBatch/Front/PopFront at any time (they may hand over the role with an external
// happens-before, e.g. a mutex or thread start). SizeApprox/EmptyApprox may be called from anyone
// and are only hints.
// Capacity: the requested capacity rounded up to a power of two (at least 2), fixed for life.
// Elements: T must be default-constructible and movable; slots are constructed up front, so a push
// is an assignment into an existing slot (no allocation on the data path).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace metaroce::engine {

// A cache line on the machines we target; spelled out rather than taken from
// std::hardware_destructive_interference_size, whose value GCC warns may change between builds.
inline constexpr size_t kCacheLineBytes = 64;

template <typename T>
class SpscRing {
 public:
  explicit SpscRing(size_t min_capacity)
      : capacity_(std::bit_ceil(min_capacity < 2 ? size_t{2} : min_capacity)),
        mask_(capacity_ - 1),
        slots_(std::make_unique<T[]>(capacity_)) {}
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return capacity_; }

  // Producer. Returns false (and leaves `value` untouched) when the ring is full.
  bool TryPush(const T& value) {
    T copy = value;
    return TryPush(std::move(copy));
  }
  bool TryPush(T&& value) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - producer_cached_head_ == capacity_) {
      producer_cached_head_ = head_.load(std::memory_order_acquire);
      if (tail - producer_cached_head_ == capacity_) return false;
    }
    slots_[tail & mask_] = std::move(value);
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }
  // Producer: slots certainly free now (the consumer may free more concurrently).
  size_t FreeApprox() {
    producer_cached_head_ = head_.load(std::memory_order_acquire);
    return capacity_ - (tail_.load(std::memory_order_relaxed) - producer_cached_head_);
  }

  // Consumer. Returns false when the ring is empty.
  bool TryPop(T& out) {
    T* front = Front();
    if (front == nullptr) return false;
    out = std::move(*front);
    PopFront();
    return true;
  }
  // Consumer: moves up to out.size() elements into `out`; returns how many.
  size_t PopBatch(std::span<T> out) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    uint64_t available = consumer_cached_tail_ - head;
    if (available < out.size()) {
      consumer_cached_tail_ = tail_.load(std::memory_order_acquire);
      available = consumer_cached_tail_ - head;
    }
    const size_t n = available < out.size() ? static_cast<size_t>(available) : out.size();
    for (size_t i = 0; i < n; ++i) out[i] = std::move(slots_[(head + i) & mask_]);
    if (n > 0) head_.store(head + n, std::memory_order_release);
    return n;
  }
  // Consumer: the oldest element without removing it (nullptr when empty). It stays valid and
  // owned by the consumer until PopFront(): lets the consumer leave work in the ring when the
  // next stage is full (back-pressure instead of dropping).
  T* Front() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == consumer_cached_tail_) {
      consumer_cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head == consumer_cached_tail_) return nullptr;
    }
    return &slots_[head & mask_];
  }
  // Consumer: removes the element Front() returned. Precondition: Front() != nullptr.
  void PopFront() {
    head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Any thread; a hint only.
  size_t SizeApprox() const {
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    return tail >= head ? static_cast<size_t>(tail - head) : 0;
  }
  bool EmptyApprox() const { return SizeApprox() == 0; }

 private:
  const size_t capacity_;
  const uint64_t mask_;
  const std::unique_ptr<T[]> slots_;
  // Producer's line: its index and its cache of the consumer's.
  alignas(kCacheLineBytes) std::atomic<uint64_t> tail_{0};
  uint64_t producer_cached_head_ = 0;
  // Consumer's line.
  alignas(kCacheLineBytes) std::atomic<uint64_t> head_{0};
  uint64_t consumer_cached_tail_ = 0;
  // Keeps whatever follows the ring off the consumer's line.
  alignas(kCacheLineBytes) char end_pad_[1] = {};
};

}  // namespace metaroce::engine
