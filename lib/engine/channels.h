// The rings between the application and the workers that own its connections.
//
//   CompletionChannel  worker -> application: one SPSC ring per worker, so every worker is the
//                      single producer of its own ring whatever connections share the channel;
//                      the application is the single consumer of all of them (Poll).
//   ConnectionChannel  application -> owner worker: a send ring and a receive ring (the queue
//                      pair's SQ and RQ, kept apart so that a full send queue never holds back
//                      receives the peer needs to make progress), and owner worker -> application:
//                      a path event ring and a published state.
//
// Memory: a channel's rings and shared state live in one contiguous *channel block* with no
// pointer in it (layouts below, offsets from the block's start, every part cache-line aligned).
// The block is either
//   - heap memory the channel owns (the public constructors: the embedded engine), or
//   - caller memory the channel does not own (BlockMemory: e.g. a memfd mapped by the daemon and
//     by an application, at different addresses): PlaceAt constructs fresh rings and state in it
//     (the side that creates the channel: the daemon), AttachAt validates and views what another
//     process placed (the application).
// Process-local members stay in the channel object: connection id, owner worker, the completion
// channels, the round-robin cursor of CompletionChannel::Poll, each ring's capacity and mask.
//
//   CompletionChannel block (LayoutFor(workers, depth)):
//     RingOffset(w) = w * ring_bytes   SpscRing<core::Completion> of worker w, w in [0, workers)
//   ConnectionChannel block (LayoutFor(depths)):
//     state_offset  = 0                ConnectionSharedState (one cache line)
//     sends_offset  = 64               SpscRing<core::SendWorkRequest>
//     recvs_offset                     SpscRing<core::RecvWorkRequest>
//     events_offset                    SpscRing<core::PathEvent>
// Both layouts are functions of the depths alone: a process that knows the depths (and the
// worker count) computes the same offsets.
//
// Posted marks: the owner worker does not look at every connection's request rings on every loop
// (it owns thousands, most idle); it looks at those marked posted in a doorbell
// (lib/engine/doorbell.h). A channel's `sends` and `recvs` are RequestRings: their TryPush marks
// the channel's slot after a successful push, once the channel has a mark (SetPostedMark: the
// owner worker sets it on a heap channel when it adds the connection, and on a placed one when it
// is given the application's doorbell; an application sets it on its attached view from what the
// daemon told it). A producer that pushes through the SpscRing base marks nothing: the worker may
// then not see its requests until something else marks the connection.
//
// Threading: each ring has one producer and one consumer thread as stated per member (see
// spsc_ring.h). Ownership: shared (std::shared_ptr) between the api object and the owner worker,
// which drops its reference when the connection is destroyed on the control path. Caller memory
// must stay mapped until the channel is destroyed (BlockMemory::keep_mapped can tie the two).
// Errors: PlaceAt and AttachAt return absl::Status naming what is wrong.
//
// A hostile process sharing a block (an application attached to the daemon) can write any bytes
// into it at any time: it cannot make the other process touch memory outside the block's rings
// (spsc_ring.h) and it is never trusted for anything but its own connection: it can make its
// rings look full or empty, hand the worker garbage work requests (which the worker copies, then
// the core checks like any other request), lose its own completions and events, and write any
// value into its shared state (read by its own side, and by the daemon only as a counter). What
// this header cannot prevent, the daemon must: a process holding the memfd could shrink it and
// make the daemon's next access to a vanished page SIGBUS, so the daemon creates the memfds it
// shares (MFD_ALLOW_SEALING), sizes them and seals them (F_SEAL_SHRINK | F_SEAL_GROW |
// F_SEAL_SEAL) before sending them, and never maps one an application made. In the other
// direction the application trusts the daemon (which already writes into its memory), e.g. for
// the bool in core::Completion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/core/path_state.h"
#include "lib/core/types.h"
#include "lib/engine/doorbell.h"
#include "lib/engine/spsc_ring.h"

namespace metaroce::engine {

// Caller memory holding a channel block: [base, base + bytes), cache-line aligned, mapped
// read-write for as long as the channel exists. `keep_mapped`, if set, is held by the channel
// until it is destroyed (e.g. the mapping's RAII owner): the owner worker's reference to a
// channel can outlive the caller's.
struct BlockMemory {
  void* base = nullptr;
  size_t bytes = 0;
  std::shared_ptr<const void> keep_mapped;
};

class CompletionChannel {
 public:
  static constexpr int kMaxWorkers = 256;

  struct Layout {
    int workers = 0;
    size_t capacity = 0;     // completions per worker ring (a power of two)
    size_t ring_bytes = 0;   // SpscRing<core::Completion>::BytesFor(capacity)
    size_t total_bytes = 0;  // workers * ring_bytes
    size_t RingOffset(int w) const { return static_cast<size_t>(w) * ring_bytes; }
  };
  // `depth` completions per worker ring (rounded up as SpscRing does).
  static Layout LayoutFor(int workers, size_t depth);
  static size_t BytesFor(int workers, size_t depth) {
    return LayoutFor(workers, depth).total_bytes;
  }

  // Embedded: a heap block owned by the channel. `workers` >= 1.
  CompletionChannel(int workers, size_t depth);
  // Daemon side: fresh rings for `workers` workers (the engine's worker count) in `memory`.
  // Fails if workers is outside [1, kMaxWorkers] or the memory is misaligned or too small.
  static absl::StatusOr<std::shared_ptr<CompletionChannel>> PlaceAt(BlockMemory memory,
                                                                    int workers, size_t depth);
  // Application side: the rings another process placed with the same workers and depth; every
  // ring header is validated (spsc_ring.h) and must have the capacity the layout says.
  static absl::StatusOr<std::shared_ptr<CompletionChannel>> AttachAt(BlockMemory memory,
                                                                     int workers, size_t depth);

  // Application thread (one at a time): moves up to out.size() completions into `out`, taking
  // from the worker rings in turn so that no worker starves another. Returns how many.
  size_t Poll(std::span<core::Completion> out) {
    size_t n = 0;
    const size_t workers = rings_.size();
    for (size_t i = 0; i < workers && n < out.size(); ++i) {
      const size_t w = (next_ + i) % workers;
      n += rings_[w].PopBatch(out.subspan(n));
    }
    next_ = (next_ + 1) % workers;
    return n;
  }

  // Worker `w` only: its ring.
  SpscRing<core::Completion>& ring(int w) { return rings_[w]; }
  size_t depth() const { return rings_[0].capacity(); }
  int workers() const { return static_cast<int>(rings_.size()); }

 private:
  static absl::StatusOr<Layout> CheckedLayout(const BlockMemory& memory, int workers,
                                              size_t depth);
  CompletionChannel(std::vector<SpscRing<core::Completion>> rings, CacheAlignedBytes owned_block,
                    std::shared_ptr<const void> keep_mapped);

  CacheAlignedBytes owned_block_;            // embedded only
  std::shared_ptr<const void> keep_mapped_;  // caller memory only, optional
  std::vector<SpscRing<core::Completion>> rings_;
  size_t next_ = 0;  // application thread only
};

// Where the posters of one connection mark it posted: a doorbell and the connection's slot in it
// (lib/engine/doorbell.h). Process-local (it points into this process's mapping of the doorbell).
// Set before the channel is posted to (by the owner worker while it adds the connection, before
// the creator gets the channel back; by an attaching application before it posts); read by the
// posters. Unset: Mark() does nothing.
class PostedMark {
 public:
  void Set(Doorbell* doorbell, uint32_t slot) {
    slot_.store(slot, std::memory_order_relaxed);
    doorbell_.store(doorbell, std::memory_order_release);
  }
  void Clear() { doorbell_.store(nullptr, std::memory_order_release); }
  // The poster, after a push.
  void Mark() const {
    if (Doorbell* d = doorbell_.load(std::memory_order_acquire); d != nullptr) {
      d->MarkPosted(slot_.load(std::memory_order_relaxed));
    }
  }
  Doorbell* doorbell() const { return doorbell_.load(std::memory_order_acquire); }
  // Doorbell::kNoSlot when unset.
  uint32_t slot() const {
    return doorbell() == nullptr ? Doorbell::kNoSlot : slot_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<Doorbell*> doorbell_{nullptr};
  std::atomic<uint32_t> slot_{Doorbell::kNoSlot};
};

// An application's request ring (a connection's send or receive queue): an SpscRing whose
// producer marks the connection posted (PostedMark::Mark) after every successful push, so that
// the owner worker looks at it. The consumer side is SpscRing's.
template <typename Wr>
class RequestRing : public SpscRing<Wr> {
 public:
  RequestRing(SpscRing<Wr> ring, const PostedMark* mark)
      : SpscRing<Wr>(std::move(ring)), mark_(mark) {}

  // Producer: as SpscRing::TryPush, then marks the connection posted.
  bool TryPush(const Wr& value) {
    if (!SpscRing<Wr>::TryPush(value)) return false;
    mark_->Mark();
    return true;
  }
  bool TryPush(Wr&& value) {
    if (!SpscRing<Wr>::TryPush(std::move(value))) return false;
    mark_->Mark();
    return true;
  }

 private:
  const PostedMark* mark_;  // the channel's; lives as long as the channel
};

// Connection state as published by the owner worker (readable from any thread).
struct PublishedState {
  bool error = false;
  core::WcStatus error_status = core::WcStatus::kSuccess;
};

// The part of a connection block that is not a ring. Written by the owner worker, read by the
// application (and events_dropped by the daemon, as telemetry).
struct ConnectionSharedState {
  // "MRCONN" and the layout version (1).
  static constexpr uint64_t kMagic = 0x4d52'434f'4e4e'0001;

  alignas(kCacheLineBytes) uint64_t magic = kMagic;
  std::atomic<uint64_t> events_dropped{0};
  // PublishedState: bit 7 error, bits 0-6 the WcStatus. Any byte decodes to some state.
  std::atomic<uint8_t> state{0};
};
static_assert(sizeof(ConnectionSharedState) == kCacheLineBytes);
static_assert(offsetof(ConnectionSharedState, events_dropped) == 8);
static_assert(offsetof(ConnectionSharedState, state) == 16);
static_assert(std::is_standard_layout_v<ConnectionSharedState>);
static_assert(std::atomic<uint8_t>::is_always_lock_free);

class ConnectionChannel {
 public:
  // Requested ring depths (each rounded up as SpscRing does).
  struct Depths {
    size_t send = 0;
    size_t recv = 0;
    size_t event = 0;
  };
  struct Layout {
    size_t state_offset = 0;    // ConnectionSharedState
    size_t sends_offset = 0;    // SpscRing<core::SendWorkRequest>
    size_t recvs_offset = 0;    // SpscRing<core::RecvWorkRequest>
    size_t events_offset = 0;   // SpscRing<core::PathEvent>
    size_t send_capacity = 0;   // elements, powers of two
    size_t recv_capacity = 0;
    size_t event_capacity = 0;
    size_t total_bytes = 0;     // a multiple of kCacheLineBytes
  };
  static Layout LayoutFor(const Depths& depths);
  static size_t BytesFor(const Depths& depths) { return LayoutFor(depths).total_bytes; }

  // Embedded: a heap block owned by the channel.
  ConnectionChannel(uint32_t conn_id, int owner, size_t send_depth, size_t recv_depth,
                    size_t event_depth, std::shared_ptr<CompletionChannel> send_cq,
                    std::shared_ptr<CompletionChannel> recv_cq);
  // Daemon side (the worker's end): fresh rings and state in `memory`. Fails if the memory is
  // misaligned or too small, `owner` is negative or a completion channel is missing.
  static absl::StatusOr<std::shared_ptr<ConnectionChannel>> PlaceAt(
      BlockMemory memory, const Depths& depths, uint32_t conn_id, int owner,
      std::shared_ptr<CompletionChannel> send_cq, std::shared_ptr<CompletionChannel> recv_cq);
  // Application side: the block another process placed with the same depths; the shared state's
  // magic and every ring header are validated and the capacities must match the layout. An
  // attached channel has no completion channels (the application polls its own attached
  // CompletionChannels); send_cq()/recv_cq() must not be called on it.
  static absl::StatusOr<std::shared_ptr<ConnectionChannel>> AttachAt(BlockMemory memory,
                                                                     const Depths& depths,
                                                                     uint32_t conn_id, int owner);

  uint32_t conn_id() const { return conn_id_; }
  int owner() const { return owner_; }
  bool has_completion_channels() const { return send_cq_ != nullptr && recv_cq_ != nullptr; }
  CompletionChannel& send_cq() { return *send_cq_; }
  CompletionChannel& recv_cq() { return *recv_cq_; }
  // The block (its first byte) and layout, e.g. to check where a placed channel lives.
  const void* block() const { return shared_; }
  const Layout& layout() const { return layout_; }

 private:
  struct Parts;
  ConnectionChannel(Parts parts, uint32_t conn_id, int owner,
                    std::shared_ptr<CompletionChannel> send_cq,
                    std::shared_ptr<CompletionChannel> recv_cq);

  // Declared before the rings, which view it and mark it.
  CacheAlignedBytes owned_block_;            // embedded only
  std::shared_ptr<const void> keep_mapped_;  // caller memory only, optional
  PostedMark posted_mark_;

 public:
  // Producer: the application thread posting sends (TryPush marks the connection posted).
  // Consumer: the owner worker.
  RequestRing<core::SendWorkRequest> sends;
  // Producer: the application thread posting receives. Consumer: the owner worker.
  RequestRing<core::RecvWorkRequest> recvs;
  // Producer: the owner worker. Consumer: the application thread reading events. When full, new
  // events are dropped and counted in events_dropped() (they are telemetry, not work).
  SpscRing<core::PathEvent> events;

  // Where this view's pushes mark the connection posted (PostedMark, lib/engine/doorbell.h):
  // set by the owner worker (heap channels, and placed channels given a doorbell) or, on an
  // attached view, by the application, before anyone posts; cleared by the owner worker when the
  // doorbell goes. posted_slot() is what the daemon tells the application.
  void SetPostedMark(Doorbell* doorbell, uint32_t slot) { posted_mark_.Set(doorbell, slot); }
  void ClearPostedMark() { posted_mark_.Clear(); }
  uint32_t posted_slot() const { return posted_mark_.slot(); }

  // Owner worker: counts an event `events` had no room for. Anyone: how many were dropped.
  void CountDroppedEvent() { shared_->events_dropped.fetch_add(1, std::memory_order_relaxed); }
  uint64_t events_dropped() const {
    return shared_->events_dropped.load(std::memory_order_relaxed);
  }

  // Written by the owner worker, read by anyone.
  PublishedState state() const {
    const uint8_t v = shared_->state.load(std::memory_order_acquire);
    return {(v & 0x80) != 0, static_cast<core::WcStatus>(v & 0x7f)};
  }
  void Publish(PublishedState s) {
    shared_->state.store(
        static_cast<uint8_t>((s.error ? 0x80 : 0) | static_cast<uint8_t>(s.error_status)),
        std::memory_order_release);
  }

 private:
  ConnectionSharedState* const shared_;
  const Layout layout_;
  const uint32_t conn_id_;
  const int owner_;
  const std::shared_ptr<CompletionChannel> send_cq_;
  const std::shared_ptr<CompletionChannel> recv_cq_;
};

}  // namespace metaroce::engine
