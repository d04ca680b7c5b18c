#include "lib/engine/channels.h"

#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace metaroce::engine {
namespace {

std::byte* At(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }

// Caller memory must hold the whole block, cache-line aligned.
absl::Status CheckBlockMemory(const BlockMemory& memory, size_t needed, absl::string_view what) {
  if (memory.base == nullptr || !IsCacheLineAligned(memory.base)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " block at ", absl::Hex(reinterpret_cast<uintptr_t>(memory.base)),
        " is not aligned to ", kCacheLineBytes, " bytes: place blocks at multiples of ",
        kCacheLineBytes, " from a page-aligned mapping"));
  }
  if (memory.bytes < needed) {
    return absl::InvalidArgumentError(absl::StrCat(what, " block needs ", needed, " bytes; ",
                                                   memory.bytes, " given"));
  }
  return absl::OkStatus();
}

// A ring another process placed at `offset` of the block, with exactly `capacity` slots.
template <typename T>
absl::StatusOr<SpscRing<T>> AttachRing(void* base, size_t offset, size_t capacity,
                                       absl::string_view what) {
  absl::StatusOr<SpscRing<T>> ring =
      SpscRing<T>::AttachAt(At(base, offset), SpscRing<T>::BytesFor(capacity));
  if (!ring.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ring at offset ", offset, ": ", ring.status().message()));
  }
  if (ring->capacity() != capacity) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ring at offset ", offset, " holds ",
                                                   ring->capacity(), " elements; the layout says ",
                                                   capacity, " (different depths on each side?)"));
  }
  return ring;
}

// Placement in memory already checked against the layout cannot fail.
template <typename T>
SpscRing<T> PlaceRing(void* base, size_t offset, size_t capacity) {
  return *SpscRing<T>::PlaceAt(At(base, offset), SpscRing<T>::BytesFor(capacity), capacity);
}

}  // namespace

// ---- CompletionChannel ----

CompletionChannel::Layout CompletionChannel::LayoutFor(int workers, size_t depth) {
  Layout l;
  l.workers = workers;
  l.capacity = SpscRing<core::Completion>::CapacityFor(depth);
  l.ring_bytes = SpscRing<core::Completion>::BytesFor(l.capacity);
  l.total_bytes = l.RingOffset(workers);
  return l;
}

CompletionChannel::CompletionChannel(int workers, size_t depth) {
  const Layout layout = LayoutFor(workers, depth);
  owned_block_ = AllocateCacheAligned(layout.total_bytes);
  rings_.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    rings_.push_back(
        PlaceRing<core::Completion>(owned_block_.get(), layout.RingOffset(w), layout.capacity));
  }
}

CompletionChannel::CompletionChannel(std::vector<SpscRing<core::Completion>> rings,
                                     CacheAlignedBytes owned_block,
                                     std::shared_ptr<const void> keep_mapped)
    : owned_block_(std::move(owned_block)),
      keep_mapped_(std::move(keep_mapped)),
      rings_(std::move(rings)) {}

// The layout of a completion channel in `memory`, refused when the shape or the memory is wrong.
absl::StatusOr<CompletionChannel::Layout> CompletionChannel::CheckedLayout(
    const BlockMemory& memory, int workers, size_t depth) {
  if (workers < 1 || workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("a completion channel serves 1..", kMaxWorkers, " workers, not ", workers));
  }
  const Layout layout = LayoutFor(workers, depth);
  if (absl::Status s = CheckBlockMemory(memory, layout.total_bytes, "completion channel");
      !s.ok()) {
    return s;
  }
  return layout;
}

absl::StatusOr<std::shared_ptr<CompletionChannel>> CompletionChannel::PlaceAt(BlockMemory memory,
                                                                              int workers,
                                                                              size_t depth) {
  absl::StatusOr<Layout> checked = CheckedLayout(memory, workers, depth);
  if (!checked.ok()) return checked.status();
  const Layout layout = *checked;
  std::vector<SpscRing<core::Completion>> rings;
  rings.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    rings.push_back(
        PlaceRing<core::Completion>(memory.base, layout.RingOffset(w), layout.capacity));
  }
  return std::shared_ptr<CompletionChannel>(
      new CompletionChannel(std::move(rings), nullptr, std::move(memory.keep_mapped)));
}

absl::StatusOr<std::shared_ptr<CompletionChannel>> CompletionChannel::AttachAt(BlockMemory memory,
                                                                               int workers,
                                                                               size_t depth) {
  absl::StatusOr<Layout> checked = CheckedLayout(memory, workers, depth);
  if (!checked.ok()) return checked.status();
  const Layout layout = *checked;
  std::vector<SpscRing<core::Completion>> rings;
  rings.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    absl::StatusOr<SpscRing<core::Completion>> ring = AttachRing<core::Completion>(
        memory.base, layout.RingOffset(w), layout.capacity,
        absl::StrCat("completion channel worker ", w));
    if (!ring.ok()) return ring.status();
    rings.push_back(*std::move(ring));
  }
  return std::shared_ptr<CompletionChannel>(
      new CompletionChannel(std::move(rings), nullptr, std::move(memory.keep_mapped)));
}

// ---- ConnectionChannel ----

// Everything a channel views in its block, and who owns the block.
struct ConnectionChannel::Parts {
  CacheAlignedBytes owned_block;
  std::shared_ptr<const void> keep_mapped;
  Layout layout;
  ConnectionSharedState* shared = nullptr;
  SpscRing<core::SendWorkRequest> sends;
  SpscRing<core::RecvWorkRequest> recvs;
  SpscRing<core::PathEvent> events;

  // Fresh state and rings in `base`, which holds layout.total_bytes aligned bytes.
  static Parts Place(void* base, const Layout& layout) {
    return Parts{nullptr,
                 nullptr,
                 layout,
                 new (At(base, layout.state_offset)) ConnectionSharedState,
                 PlaceRing<core::SendWorkRequest>(base, layout.sends_offset, layout.send_capacity),
                 PlaceRing<core::RecvWorkRequest>(base, layout.recvs_offset, layout.recv_capacity),
                 PlaceRing<core::PathEvent>(base, layout.events_offset, layout.event_capacity)};
  }
};

ConnectionChannel::Layout ConnectionChannel::LayoutFor(const Depths& depths) {
  Layout l;
  l.send_capacity = SpscRing<core::SendWorkRequest>::CapacityFor(depths.send);
  l.recv_capacity = SpscRing<core::RecvWorkRequest>::CapacityFor(depths.recv);
  l.event_capacity = SpscRing<core::PathEvent>::CapacityFor(depths.event);
  l.state_offset = 0;
  l.sends_offset = l.state_offset + sizeof(ConnectionSharedState);
  l.recvs_offset = l.sends_offset + SpscRing<core::SendWorkRequest>::BytesFor(l.send_capacity);
  l.events_offset = l.recvs_offset + SpscRing<core::RecvWorkRequest>::BytesFor(l.recv_capacity);
  l.total_bytes = l.events_offset + SpscRing<core::PathEvent>::BytesFor(l.event_capacity);
  return l;
}

ConnectionChannel::ConnectionChannel(uint32_t conn_id, int owner, size_t send_depth,
                                     size_t recv_depth, size_t event_depth,
                                     std::shared_ptr<CompletionChannel> send_cq,
                                     std::shared_ptr<CompletionChannel> recv_cq)
    : ConnectionChannel(
          [&] {
            const Layout layout = LayoutFor({send_depth, recv_depth, event_depth});
            CacheAlignedBytes block = AllocateCacheAligned(layout.total_bytes);
            Parts parts = Parts::Place(block.get(), layout);
            parts.owned_block = std::move(block);
            return parts;
          }(),
          conn_id, owner, std::move(send_cq), std::move(recv_cq)) {}

ConnectionChannel::ConnectionChannel(Parts parts, uint32_t conn_id, int owner,
                                     std::shared_ptr<CompletionChannel> send_cq,
                                     std::shared_ptr<CompletionChannel> recv_cq)
    : owned_block_(std::move(parts.owned_block)),
      keep_mapped_(std::move(parts.keep_mapped)),
      sends(std::move(parts.sends), &posted_mark_),
      recvs(std::move(parts.recvs), &posted_mark_),
      events(std::move(parts.events)),
      shared_(parts.shared),
      layout_(parts.layout),
      conn_id_(conn_id),
      owner_(owner),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)) {}

absl::StatusOr<std::shared_ptr<ConnectionChannel>> ConnectionChannel::PlaceAt(
    BlockMemory memory, const Depths& depths, uint32_t conn_id, int owner,
    std::shared_ptr<CompletionChannel> send_cq, std::shared_ptr<CompletionChannel> recv_cq) {
  if (owner < 0) return absl::InvalidArgumentError("owner worker must be >= 0");
  if (send_cq == nullptr || recv_cq == nullptr) {
    return absl::InvalidArgumentError(
        "the worker's end of a connection needs a send and a receive completion channel");
  }
  const Layout layout = LayoutFor(depths);
  if (absl::Status s = CheckBlockMemory(memory, layout.total_bytes, "connection channel");
      !s.ok()) {
    return s;
  }
  Parts parts = Parts::Place(memory.base, layout);
  parts.keep_mapped = std::move(memory.keep_mapped);
  return std::shared_ptr<ConnectionChannel>(new ConnectionChannel(
      std::move(parts), conn_id, owner, std::move(send_cq), std::move(recv_cq)));
}

absl::StatusOr<std::shared_ptr<ConnectionChannel>> ConnectionChannel::AttachAt(
    BlockMemory memory, const Depths& depths, uint32_t conn_id, int owner) {
  const Layout layout = LayoutFor(depths);
  if (absl::Status s = CheckBlockMemory(memory, layout.total_bytes, "connection channel");
      !s.ok()) {
    return s;
  }
  auto* shared = reinterpret_cast<ConnectionSharedState*>(At(memory.base, layout.state_offset));
  if (const uint64_t magic = ReadOnce(shared->magic); magic != ConnectionSharedState::kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no connection channel here: magic ", absl::Hex(magic), ", expected ",
        absl::Hex(ConnectionSharedState::kMagic),
        " (wrong offset, or a peer built with another channel layout version)"));
  }
  absl::StatusOr<SpscRing<core::SendWorkRequest>> sends = AttachRing<core::SendWorkRequest>(
      memory.base, layout.sends_offset, layout.send_capacity, "send");
  if (!sends.ok()) return sends.status();
  absl::StatusOr<SpscRing<core::RecvWorkRequest>> recvs = AttachRing<core::RecvWorkRequest>(
      memory.base, layout.recvs_offset, layout.recv_capacity, "receive");
  if (!recvs.ok()) return recvs.status();
  absl::StatusOr<SpscRing<core::PathEvent>> events = AttachRing<core::PathEvent>(
      memory.base, layout.events_offset, layout.event_capacity, "event");
  if (!events.ok()) return events.status();
  Parts parts{nullptr,          std::move(memory.keep_mapped), layout,
              shared,           *std::move(sends),             *std::move(recvs),
              *std::move(events)};
  return std::shared_ptr<ConnectionChannel>(
      new ConnectionChannel(std::move(parts), conn_id, owner, nullptr, nullptr));
}

}  // namespace metaroce::engine
