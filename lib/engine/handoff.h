// Worker-to-worker packet handoff: a received datagram for a connection that another worker owns
// is copied into a slot of a preallocated slab and its slot index passed through an SPSC ring to
// the owner, which returns the slot through a second ring once it has processed the packet. No
// allocation and no lock on the data path.
//
// Why it exists: the worker that receives a packet is chosen by the network (RSS, or on veth the
// sender's TX queue), not by connection ownership; the owner is the only thread that may touch a
// connection's state.
//
// Threading: one channel per ordered pair (from, to) of workers. TryPush runs on `from`, Drain on
// `to` only. Construction (which fills the free ring) must happen before either thread starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "lib/core/packet_sink.h"
#include "lib/engine/spsc_ring.h"

namespace metaroce::engine {

class HandoffChannel {
 public:
  // `slots` datagrams of at most `slot_bytes` bytes each may be in transit at once.
  HandoffChannel(size_t slots, size_t slot_bytes)
      : slot_bytes_(slot_bytes),
        slab_(std::make_unique<std::byte[]>(slots * slot_bytes)),
        full_(slots),
        free_(slots) {
    for (uint32_t i = 0; i < slots; ++i) free_.TryPush(i);
  }

  enum class PushResult : uint8_t { kQueued, kNoSlot, kTooLarge };

  // Producer (`from` worker): copies the datagram. Nothing is queued unless kQueued.
  PushResult TryPush(std::span<const std::byte> datagram, const core::RxMeta& meta) {
    if (datagram.size() > slot_bytes_) return PushResult::kTooLarge;
    uint32_t slot = 0;
    if (!free_.TryPop(slot)) return PushResult::kNoSlot;
    std::memcpy(slab_.get() + size_t{slot} * slot_bytes_, datagram.data(), datagram.size());
    // Cannot fail: there are exactly as many entries in `full_` as slots taken from `free_`.
    full_.TryPush(Entry{slot, static_cast<uint32_t>(datagram.size()), meta});
    return PushResult::kQueued;
  }

  // Consumer (`to` worker): calls fn(std::span<const std::byte>, const core::RxMeta&) for up to
  // `max` datagrams, oldest first; the span is valid during the call only. Returns how many.
  template <typename Fn>
  size_t Drain(size_t max, Fn&& fn) {
    size_t n = 0;
    while (n < max) {
      Entry* e = full_.Front();
      if (e == nullptr) break;
      fn(std::span<const std::byte>(slab_.get() + size_t{e->slot} * slot_bytes_, e->length),
         e->meta);
      const uint32_t slot = e->slot;
      full_.PopFront();
      free_.TryPush(slot);  // cannot fail: the slot came from this ring's capacity
      ++n;
    }
    return n;
  }

  bool EmptyApprox() const { return full_.EmptyApprox(); }

 private:
  struct Entry {
    uint32_t slot = 0;
    uint32_t length = 0;
    core::RxMeta meta;
  };
  const size_t slot_bytes_;
  const std::unique_ptr<std::byte[]> slab_;
  SpscRing<Entry> full_;     // from -> to
  SpscRing<uint32_t> free_;  // to -> from
};

}  // namespace metaroce::engine
