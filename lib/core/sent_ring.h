// The packets outstanding on one path of a requester (internal to Sender): what each PSN in
// [snd_una, next_psn) carries and when it was sent.
//
// Memory contract (docs/architecture.md, "What a connection costs"): a path holds storage only
// while it has packets outstanding. The ring grows with the window in flight, in powers of two
// from kMinCapacity up to one SACK window (wire::kSackBits, the most a path may have
// outstanding), and is released when the path is idle, so an idle connection costs no ring at
// all and a latency-bound one a few hundred bytes per path.
//
// Indexing contract: at(psn) is valid only for PSNs in the live range [snd_una, next_psn) the
// caller last passed to Reserve() and not yet passed by Release(). Entries outside it are not
// kept across a growth; callers check the range before reading (SeqLessEq(snd_una, psn) &&
// SeqLess(psn, next_psn)).
#pragma once

#include <cstdint>
#include <memory>

#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

// Data identity of one packet: which message, which MTU-sized piece of it.
struct PacketRef {
  uint32_t msg_seq = 0;
  uint32_t index = 0;
};

// A PSN outstanding on a path.
struct SentPacket {
  PacketRef ref;
  uint64_t first_tx_order = 0;  // path-local transmission counter at first / latest transmission
  uint64_t last_tx_order = 0;
  Instant sent_at{0};
  uint32_t bytes = 0;
  uint8_t transmissions = 0;  // every transmission of this PSN (Karn's rule, [R5])
  uint8_t counted = 0;  // those counted against max_transmissions: not RNR retries or GBN resends
  bool acked = false;
  bool hedged = false;   // [R5b] its data unit was also queued for another path
  bool ack_requested = false;  // its latest transmission carried ACK_REQ: no delayed ACK
  Instant rnr_until{0};  // after an RNR NAK: do not retransmit before this
};

class SentRing {
 public:
  static constexpr uint32_t kMinCapacity = 8;
  static constexpr uint32_t kMaxCapacity = wire::kSackBits;

  // Makes room for the live range [snd_una, end), keeping the entries of [snd_una, next_psn).
  // Precondition: end - snd_una <= kMaxCapacity, next_psn within [snd_una, end].
  // An empty ring that needs the smallest storage takes `spare` when there is one (Release).
  void Reserve(uint32_t snd_una, uint32_t next_psn, uint32_t end,
               std::unique_ptr<SentPacket[]>* spare = nullptr) {
    const uint32_t needed = end - snd_una;
    if (needed <= capacity_) return;
    if (capacity_ == 0 && needed <= kMinCapacity && spare != nullptr && *spare != nullptr) {
      slots_ = std::move(*spare);  // its entries are stale: each PSN's is set when it is sent
      capacity_ = kMinCapacity;
      return;
    }
    uint32_t capacity = capacity_ == 0 ? kMinCapacity : capacity_;
    while (capacity < needed) capacity *= 2;
    auto slots = std::make_unique<SentPacket[]>(capacity);
    for (uint32_t psn = snd_una; psn != next_psn; ++psn) {
      slots[psn & (capacity - 1)] = slots_[psn & (capacity_ - 1)];
    }
    slots_ = std::move(slots);
    capacity_ = capacity;
  }
  // Frees the storage. Precondition: nothing outstanding (snd_una == next_psn). The smallest
  // storage goes to `spare` instead when that holds none: a sender keeps one for the next path
  // that starts sending, so that a connection with one message at a time (each on another path,
  // each path emptied before the next message) allocates none per message.
  void Release(std::unique_ptr<SentPacket[]>* spare = nullptr) {
    if (spare != nullptr && *spare == nullptr && capacity_ == kMinCapacity) {
      *spare = std::move(slots_);
    }
    slots_.reset();
    capacity_ = 0;
  }

  SentPacket& at(uint32_t psn) { return slots_[psn & (capacity_ - 1)]; }
  const SentPacket& at(uint32_t psn) const { return slots_[psn & (capacity_ - 1)]; }
  uint32_t capacity() const { return capacity_; }
  size_t heap_bytes() const { return capacity_ * sizeof(SentPacket); }

 private:
  std::unique_ptr<SentPacket[]> slots_;
  uint32_t capacity_ = 0;  // 0 or a power of two in [kMinCapacity, kMaxCapacity]
};

}  // namespace metaroce::core
