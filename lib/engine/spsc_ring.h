// A bounded single-producer single-consumer ring: the only way data crosses threads on the data
// path (application -> owner worker commands, worker -> application completions, worker -> worker
// packet handoff), and, placed in shared memory, the way it crosses processes (an application
// attached to the daemon's engine). Lock-free and wait-free: one acquire load and one release
// store per operation in the common case, because each side caches the other side's index and
// reloads it only when the cached value says the ring looks full (producer) or empty (consumer).
//
// Memory: a ring is one contiguous *block*, position-independent (no pointer in it, so the same
// bytes mapped at two addresses are one ring):
//
//   offset   0  SpscRingHeader line 0: magic, element size, capacity (written once, by the placer)
//   offset  64  line 1, the producer's: tail, the producer's cached copy of head
//   offset 128  line 2, the consumer's: head, the consumer's cached copy of tail
//   offset 192  capacity slots of T
//   ...         padding up to BytesFor(capacity), a multiple of kCacheLineBytes, so that
//               consecutive blocks stay cache-line aligned
//
// An SpscRing<T> object is a process-local *view* of a block: the block's address, and the
// capacity and mask this process placed or validated. Three forms:
//   SpscRing(min_capacity)   heap: the view owns a block it allocated (the embedded engine);
//   PlaceAt(memory, ...)     constructs a fresh block in caller memory (e.g. a mapped memfd) and
//                            views it; the caller keeps the memory mapped while views exist;
//   AttachAt(memory, ...)    views a block another process placed, after validating its header.
// Why a view and not a ring object living in the block: the mask that bounds every slot access
// must come from memory the other process cannot write (see "hostile" below). The view costs the
// hot path what the former object did: it replaces the slots pointer with the block pointer, and
// the slots are at a constant offset from it.
// Placed and attached rings need a trivially copyable T and address-free (lock-free) 64-bit
// atomics, both checked at compile time.
//
// Threading: exactly one producer thread calls TryPush/FreeApprox and exactly one consumer thread
// calls TryPop/PopBatch/Front/PopFront at any time (they may hand over the role with an external
// happens-before, e.g. a mutex or thread start); across processes, one producer thread in one
// process and one consumer thread in one (possibly other) process. SizeApprox/EmptyApprox may be
// called from anyone and are only hints. A view is not copyable; it is movable.
// Capacity: the requested capacity clamped to [2, kMaxCapacity] and rounded up to a power of two,
// fixed for life.
// Elements: T must be default-constructible and movable; slots are constructed up front, so a push
// is an assignment into an existing slot (no allocation on the data path).
// Errors: PlaceAt and AttachAt return absl::Status naming what is wrong; nothing else fails.
//
// A hostile process sharing the block can write any bytes into it at any time. It CANNOT make
// this process read or write outside the block's slots: every slot index is `index & mask_` with
// the mask held in this process's view (set by PlaceAt/AttachAt, never read back from the block;
// the header's capacity is read once, by AttachAt, and validated), so head, tail, the cached
// indices and the header may hold anything. PopBatch moves at most out.size() elements whatever
// the indices say. It CAN: make the ring look full or empty to this side, make this side's
// FreeApprox/SizeApprox wrong (they stay within [0, capacity]), make the consumer pop elements it
// never pushed (garbage, or the same slot again) and the producer overwrite elements not yet
// consumed, and change an element while it is being read (a torn element). So the contents of
// an element from an untrusted producer are untrusted input: a consumer that validates an element
// must copy it out first (TryPop and PopBatch copy; with Front, copy *Front() before checking it)
// and then check every field. A slot may hold any bit pattern, so elements shared with an
// untrusted process should be made of integers and enums with a fixed underlying type.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace metaroce::engine {

// A cache line on the machines we target; spelled out rather than taken from
// std::hardware_destructive_interference_size, whose value GCC warns may change between builds.
inline constexpr size_t kCacheLineBytes = 64;

inline constexpr size_t RoundUpToCacheLine(size_t bytes) {
  return (bytes + kCacheLineBytes - 1) & ~(kCacheLineBytes - 1);
}
inline bool IsCacheLineAligned(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (kCacheLineBytes - 1)) == 0;
}

// Cache-line aligned heap memory: the blocks of heap-form rings and channels.
struct CacheAlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kCacheLineBytes}); }
};
using CacheAlignedBytes = std::unique_ptr<std::byte[], CacheAlignedDelete>;
inline CacheAlignedBytes AllocateCacheAligned(size_t bytes) {
  return CacheAlignedBytes(
      static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{kCacheLineBytes})));
}

// One read of a field that another process may be changing (as the kernel's READ_ONCE): the value
// checked is the value used, the compiler cannot load it twice.
template <typename U>
U ReadOnce(const U& field) {
  return *static_cast<const volatile U*>(&field);
}

// The first three cache lines of every ring block (layout above). Fixed-width fields, no pointers.
struct SpscRingHeader {
  // "MRSPSC" and the layout version (1): a block placed by another layout version is refused.
  static constexpr uint64_t kMagic = 0x4d52'5350'5343'0001;

  // Line 0: written by the placer before the block is shared; read once by AttachAt.
  alignas(kCacheLineBytes) uint64_t magic = kMagic;
  uint64_t element_bytes = 0;
  uint64_t capacity = 0;
  // Line 1, the producer's: its index and its cache of the consumer's.
  alignas(kCacheLineBytes) std::atomic<uint64_t> tail{0};
  uint64_t producer_cached_head = 0;
  // Line 2, the consumer's.
  alignas(kCacheLineBytes) std::atomic<uint64_t> head{0};
  uint64_t consumer_cached_tail = 0;
};
static_assert(sizeof(SpscRingHeader) == 3 * kCacheLineBytes);
static_assert(offsetof(SpscRingHeader, magic) == 0);
static_assert(offsetof(SpscRingHeader, element_bytes) == 8);
static_assert(offsetof(SpscRingHeader, capacity) == 16);
static_assert(offsetof(SpscRingHeader, tail) == 64);
static_assert(offsetof(SpscRingHeader, producer_cached_head) == 72);
static_assert(offsetof(SpscRingHeader, head) == 128);
static_assert(offsetof(SpscRingHeader, consumer_cached_tail) == 136);
static_assert(std::is_standard_layout_v<SpscRingHeader>);
// Lock-free atomics are address-free: the same atomic mapped at two addresses in two processes
// is one atomic.
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

template <typename T>
class SpscRing {
 public:
  static_assert(alignof(T) <= kCacheLineBytes, "slots are cache-line aligned, not more");

  static constexpr size_t kMaxCapacity = size_t{1} << 31;
  // Where the slots start in the block.
  static constexpr size_t kSlotsOffset = sizeof(SpscRingHeader);

  // The capacity a ring asked for `min_capacity` elements gets.
  static constexpr size_t CapacityFor(size_t min_capacity) {
    return std::bit_ceil(std::clamp(min_capacity, size_t{2}, kMaxCapacity));
  }
  // Bytes of the block of such a ring: header and slots, rounded up to a cache line.
  static constexpr size_t BytesFor(size_t min_capacity) {
    return RoundUpToCacheLine(kSlotsOffset + CapacityFor(min_capacity) * sizeof(T));
  }

  // Heap form: allocates and owns its block.
  explicit SpscRing(size_t min_capacity)
      : header_(nullptr),
        capacity_(CapacityFor(min_capacity)),
        mask_(capacity_ - 1),
        owned_(AllocateCacheAligned(BytesFor(capacity_))) {
    header_ = Construct(owned_.get(), capacity_);
  }

  // Constructs a fresh, empty ring in [memory, memory + bytes) and returns a view of it (which
  // does not own the memory). Fails if `memory` is not cache-line aligned or `bytes` is less than
  // BytesFor(min_capacity).
  static absl::StatusOr<SpscRing> PlaceAt(void* memory, size_t bytes, size_t min_capacity) {
    RequireShareable();
    const size_t capacity = CapacityFor(min_capacity);
    if (memory == nullptr || !IsCacheLineAligned(memory)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ring memory at ", absl::Hex(reinterpret_cast<uintptr_t>(memory)),
          " is not aligned to ", kCacheLineBytes, " bytes: place blocks at multiples of ",
          kCacheLineBytes, " from a page-aligned mapping"));
    }
    if (bytes < BytesFor(capacity)) {
      return absl::InvalidArgumentError(absl::StrCat("a ring of ", capacity, " elements of ",
                                                     sizeof(T), " bytes needs ", BytesFor(capacity),
                                                     " bytes; ", bytes, " given"));
    }
    return SpscRing(Construct(memory, capacity), capacity, nullptr);
  }

  // The view of a ring that another process placed in [memory, memory + bytes): validates its
  // header (magic, element size, capacity a power of two within kMaxCapacity, BytesFor(capacity)
  // <= bytes) and refuses the block, naming the first mismatch, when it does not hold. The
  // header's capacity is read once, here; the view never trusts the block's header again.
  static absl::StatusOr<SpscRing> AttachAt(void* memory, size_t bytes) {
    RequireShareable();
    if (memory == nullptr || !IsCacheLineAligned(memory)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ring memory at ", absl::Hex(reinterpret_cast<uintptr_t>(memory)),
          " is not aligned to ", kCacheLineBytes, " bytes"));
    }
    if (bytes < kSlotsOffset) {
      return absl::InvalidArgumentError(
          absl::StrCat("ring block of ", bytes, " bytes is smaller than a ring header (",
                       kSlotsOffset, " bytes)"));
    }
    const auto* header = static_cast<const SpscRingHeader*>(memory);
    const uint64_t magic = ReadOnce(header->magic);
    const uint64_t element_bytes = ReadOnce(header->element_bytes);
    const uint64_t capacity = ReadOnce(header->capacity);
    if (magic != SpscRingHeader::kMagic) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no ring here: magic ", absl::Hex(magic), ", expected ",
          absl::Hex(SpscRingHeader::kMagic),
          " (wrong offset, or a peer built with another ring layout version)"));
    }
    if (element_bytes != sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("ring elements are ", element_bytes,
                                                     " bytes; this side's are ", sizeof(T),
                                                     " (peer built from another version?)"));
    }
    if (capacity < 2 || capacity > kMaxCapacity || !std::has_single_bit(capacity)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ring capacity ", capacity, " is not a power of two in [2, ", kMaxCapacity, "]"));
    }
    if (BytesFor(capacity) > bytes) {
      return absl::InvalidArgumentError(absl::StrCat("a ring of ", capacity, " elements needs ",
                                                     BytesFor(capacity), " bytes; the block has ",
                                                     bytes));
    }
    return SpscRing(static_cast<SpscRingHeader*>(memory), capacity, nullptr);
  }

  ~SpscRing() { DestroySlotsIfOwned(); }
  SpscRing(SpscRing&& other) noexcept
      : header_(std::exchange(other.header_, nullptr)),
        capacity_(other.capacity_),
        mask_(other.mask_),
        owned_(std::move(other.owned_)) {}
  SpscRing& operator=(SpscRing&& other) noexcept {
    if (this != &other) {
      DestroySlotsIfOwned();
      header_ = std::exchange(other.header_, nullptr);
      capacity_ = other.capacity_;
      mask_ = other.mask_;
      owned_ = std::move(other.owned_);
    }
    return *this;
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return capacity_; }
  // The block this view reads and writes (its header's address).
  const void* block() const { return header_; }

  // Producer. Returns false (and leaves `value` untouched) when the ring is full.
  bool TryPush(const T& value) {
    T copy = value;
    return TryPush(std::move(copy));
  }
  bool TryPush(T&& value) {
    const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
    if (tail - header_->producer_cached_head == capacity_) {
      header_->producer_cached_head = header_->head.load(std::memory_order_acquire);
      if (tail - header_->producer_cached_head == capacity_) return false;
    }
    slots()[tail & mask_] = std::move(value);
    header_->tail.store(tail + 1, std::memory_order_release);
    return true;
  }
  // Producer: slots certainly free now (the consumer may free more concurrently). In [0,
  // capacity] even if a hostile consumer wrote a head beyond the tail.
  size_t FreeApprox() {
    header_->producer_cached_head = header_->head.load(std::memory_order_acquire);
    const uint64_t used =
        header_->tail.load(std::memory_order_relaxed) - header_->producer_cached_head;
    return used >= capacity_ ? 0 : capacity_ - used;
  }

  // Consumer. Returns false when the ring is empty.
  bool TryPop(T& out) {
    T* front = Front();
    if (front == nullptr) return false;
    out = std::move(*front);
    PopFront();
    return true;
  }
  // Consumer: moves up to out.size() elements into `out`; returns how many (never more than
  // out.size(), whatever the tail says).
  size_t PopBatch(std::span<T> out) {
    const uint64_t head = header_->head.load(std::memory_order_relaxed);
    uint64_t available = header_->consumer_cached_tail - head;
    if (available < out.size()) {
      header_->consumer_cached_tail = header_->tail.load(std::memory_order_acquire);
      available = header_->consumer_cached_tail - head;
    }
    const size_t n = available < out.size() ? static_cast<size_t>(available) : out.size();
    for (size_t i = 0; i < n; ++i) out[i] = std::move(slots()[(head + i) & mask_]);
    if (n > 0) header_->head.store(head + n, std::memory_order_release);
    return n;
  }
  // Consumer: the oldest element without removing it (nullptr when empty). It stays valid and
  // owned by the consumer until PopFront(): lets the consumer leave work in the ring when the
  // next stage is full (back-pressure instead of dropping). A shared ring's producer can still
  // write it: copy it before validating it.
  T* Front() {
    const uint64_t head = header_->head.load(std::memory_order_relaxed);
    if (head == header_->consumer_cached_tail) {
      header_->consumer_cached_tail = header_->tail.load(std::memory_order_acquire);
      if (head == header_->consumer_cached_tail) return nullptr;
    }
    return &slots()[head & mask_];
  }
  // Consumer: removes the element Front() returned. Precondition: Front() != nullptr.
  void PopFront() {
    header_->head.store(header_->head.load(std::memory_order_relaxed) + 1,
                        std::memory_order_release);
  }

  // Any thread; a hint only, in [0, capacity].
  size_t SizeApprox() const {
    const uint64_t head = header_->head.load(std::memory_order_acquire);
    const uint64_t tail = header_->tail.load(std::memory_order_acquire);
    if (tail < head) return 0;
    return tail - head > capacity_ ? capacity_ : static_cast<size_t>(tail - head);
  }
  bool EmptyApprox() const { return SizeApprox() == 0; }

 private:
  static constexpr void RequireShareable() {
    static_assert(std::is_trivially_copyable_v<T>,
                  "a ring in shared memory holds trivially copyable elements only");
  }
  static T* SlotsOf(SpscRingHeader* header) {
    return reinterpret_cast<T*>(reinterpret_cast<std::byte*>(header) + kSlotsOffset);
  }
  // A fresh header and `capacity` value-initialized slots at `memory`.
  static SpscRingHeader* Construct(void* memory, size_t capacity) {
    auto* header = new (memory) SpscRingHeader;
    header->element_bytes = sizeof(T);
    header->capacity = capacity;
    T* slots = SlotsOf(header);
    for (size_t i = 0; i < capacity; ++i) new (slots + i) T();
    return header;
  }

  SpscRing(SpscRingHeader* header, size_t capacity, CacheAlignedBytes owned)
      : header_(header), capacity_(capacity), mask_(capacity - 1), owned_(std::move(owned)) {}

  // The slots: a constant offset from the block's start.
  T* slots() const { return SlotsOf(header_); }

  void DestroySlotsIfOwned() {
    if constexpr (!std::is_trivially_destructible_v<T>) {
      if (owned_ != nullptr) std::destroy_n(slots(), capacity_);
    }
  }

  // Process-local: nothing below is ever read from the block.
  SpscRingHeader* header_;
  size_t capacity_;
  uint64_t mask_;
  CacheAlignedBytes owned_;  // the heap form's block; null for placed and attached views
};

}  // namespace metaroce::engine
