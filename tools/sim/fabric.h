// The simulated network between host A (requester) and host B (responder): P physical paths, each
// a pair of one-way links (A->B carries data, B->A carries acknowledgements).
//
// Link model (all of it deterministic):
//  - Wire size of a packet = UDP payload + kWireOverheadBytes (Ethernet header 14, IPv4 20, UDP 8,
//    FCS 4, preamble+SFD 8, inter-frame gap 12 = 66). Link rates are line rates, so capacity and
//    goodput figures include every byte a real port would spend.
//  - FIFO output queue served at the link rate: a packet offered at `now` starts serializing at
//    max(now, busy_until), leaves at start + wire_bits/rate, and arrives one propagation delay later.
//    Time is tracked in picoseconds internally so that serialization does not drift; arrivals are
//    rounded up to the next nanosecond.
//  - Backlog at enqueue = bytes not yet serialized (including the packet on the wire). Tail drop
//    when backlog + packet > queue capacity (the packet takes no link time); CE mark when the
//    backlog exceeds the ECN threshold.
//  - Random loss models corruption on the wire: the lost packet has consumed link time and is
//    discarded at the far end. One xoshiro stream per link, one draw per serialized packet.
//  - Injected CE marking (a spine that marks persistently): a delivered packet offered while an
//    injection window is open is CE-marked with that window's probability, drawn from a second
//    xoshiro stream (the loss stream stays aligned with runs without injection).
//  - Blackhole windows [begin, end): the link is down. A packet offered inside a window is dropped
//    at once (no link time); a packet already queued or in flight when a window opens
//    ([offer, arrival) overlaps the window) is lost too.
//  - ECMP: physical path = (src_port + dst_port) % P, an idealized hash that lets a sender choose
//    its path through its UDP source port; a rotated port moves a logical path.
//
// Thread-safety: none. The fabric schedules arrivals on the EventQueue given at construction, each
// link's on a lane of its own (a link's arrivals are in time order).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "lib/core/packet_sink.h"
#include "lib/core/receive_budget.h"
#include "lib/core/types.h"
#include "tools/sim/event_queue.h"
#include "tools/sim/packet_buffer_pool.h"
#include "tools/sim/rng.h"

namespace metaroce::sim {

inline constexpr uint32_t kWireOverheadBytes = 14 + 20 + 8 + 4 + 8 + 12;  // = 66

// A simulated host's receive budget and pull pacer as the core takes them, in this fabric's
// wire bytes (both models).
core::ReceiveBudgetConfig SimHostBudget(uint64_t budget_bytes, uint32_t mtu, double pull_gbps);

// The default budget of a host that receives at `gbps`: what is in flight while a packet goes
// out and its ACK comes back, the base RTT and the responder's ACK delay (ack_every packets or
// delayed_ack, whichever first: a budget of the base RTT alone left a lone sender's share a
// fifth short of the link, congestion.md §5.2).
uint64_t SimDefaultBudgetBytes(double gbps, Duration base_rtt);
inline constexpr uint64_t WireBytes(size_t udp_payload_bytes) {
  return udp_payload_bytes + kWireOverheadBytes;
}

// Half-open interval [begin, end) of simulated time.
struct TimeWindow {
  Instant begin;
  Instant end;
  bool Contains(Instant t) const { return begin <= t && t < end; }
};

enum class Direction : uint8_t { kAToB = 0, kBToA = 1 };

enum class DropCause : uint8_t { kNone, kRandomLoss, kTailDrop, kBlackhole };

struct LinkConfig {
  double rate_gbps = 100;  // line rate, Gbit/s (= bits per ns)
  Duration delay = std::chrono::microseconds(2);  // one-way propagation
  uint64_t queue_bytes = 512 * 1024;              // output queue capacity
  uint64_t ecn_threshold_bytes = 64 * 1024;       // CE-mark when the backlog exceeds this
  double loss_probability = 0;                    // per serialized packet
  std::vector<TimeWindow> blackholes;
  struct CeInjection {
    double probability = 0;
    TimeWindow window;  // offer times
  };
  std::vector<CeInjection> ce_injections;
  uint64_t seed = 1;     // random-loss stream
  uint64_t ce_seed = 2;  // injected-marking stream
};

struct LinkCounters {
  uint64_t offered_packets = 0;
  uint64_t tx_packets = 0;  // serialized (took link time), including those lost on the wire
  uint64_t tx_bytes = 0;    // wire bytes serialized
  uint64_t delivered_packets = 0;
  uint64_t dropped_random = 0;
  uint64_t dropped_tail = 0;
  uint64_t dropped_blackhole = 0;
  uint64_t ce_marked = 0;  // of the delivered packets (queue or injection)
  uint64_t ce_injected = 0;  // of those, marked by an injection and not by the queue
  int64_t busy_ps = 0;     // total serialization time
  uint64_t max_backlog_bytes = 0;
  uint64_t dropped() const { return dropped_random + dropped_tail + dropped_blackhole; }
};

// Fate of one offered packet.
struct Transmission {
  DropCause drop = DropCause::kNone;
  Instant arrival;  // valid when drop == kNone
  bool ce = false;
};

// One direction of one physical path.
class Link {
 public:
  explicit Link(const LinkConfig& config);

  // Offers a packet of `wire_bytes` at `now` (now must not decrease between calls).
  Transmission Send(Instant now, uint64_t wire_bytes);
  // Bytes queued or being serialized at `now`.
  uint64_t BacklogBytes(Instant now) const;

  const LinkConfig& config() const { return config_; }
  const LinkCounters& counters() const { return counters_; }

 private:
  bool OverlapsBlackhole(int64_t from_ps, int64_t to_ps) const;

  LinkConfig config_;
  LinkCounters counters_;
  int64_t busy_until_ps_ = 0;
  Xoshiro256 rng_;
  Xoshiro256 ce_rng_;
};

// A datagram in flight, as the receiving host sees it.
struct Datagram {
  Direction direction = Direction::kAToB;
  uint16_t physical_path = 0;
  core::RxMeta meta;
  std::vector<std::byte> bytes;  // the UDP payload
};

struct PhysicalPathConfig {
  LinkConfig a_to_b;
  LinkConfig b_to_a;
};

class Fabric {
 public:
  // Called from the event loop when a datagram arrives at its destination host.
  using DeliverFn = std::function<void(Datagram&)>;

  // `queue` must outlive the fabric. Needs at least one path.
  Fabric(std::vector<PhysicalPathConfig> paths, EventQueue& queue, DeliverFn deliver);

  // The fabric's ECMP hash.
  uint16_t PhysicalPathFor(uint16_t src_port, uint16_t dst_port) const {
    return static_cast<uint16_t>((uint32_t{src_port} + dst_port) % links_.size());
  }

  // Sends one UDP payload at the queue's now() over the path ECMP picks for meta's ports. A packet
  // that survives is handed to the DeliverFn by an arrival event.
  struct SendResult {
    uint16_t physical_path = 0;
    Transmission transmission;
  };
  SendResult Send(Direction direction, const core::TxMeta& meta, std::vector<std::byte> udp_payload);
  // An empty byte buffer for the next packet, recycled from delivered or dropped ones (a run
  // moves millions of packets; allocating each one's bytes cost more than its journey).
  std::vector<std::byte> TakeBuffer() { return buffers_.Take(); }

  uint16_t path_count() const { return static_cast<uint16_t>(links_.size()); }
  const Link& link(uint16_t physical_path, Direction direction) const {
    return links_[physical_path][static_cast<size_t>(direction)];
  }

 private:
  std::vector<std::array<Link, 2>> links_;  // [path][direction]
  // A link is FIFO (its arrivals are in time order): each has its lane of the event queue.
  std::vector<std::array<EventQueue::Lane, 2>> lanes_;
  EventQueue& queue_;
  DeliverFn deliver_;
  PacketBufferPool buffers_;
};

}  // namespace metaroce::sim
