// The responder's pull pacer: the host clocks the requesters whose share of its receive budget is
// below one packet per path (docs/spec/congestion.md §6). Such a requester, once it has seen a
// pull, sends a new data packet only on a pull; the responder answers each of its data packets
// that asks for one (flags::kWantsPull) with one pull (an ACK with flags::kPull), released at the
// host's receive rate in arrival order. The bytes in flight toward the host are then what its
// link drains in an RTT, however many requesters there are and whatever their RTT estimates:
// the loop closes here, at the host's own rate, not at thousands of senders that each hear from
// it once a millisecond.
//
// Accounting, per packet in O(1):
// - A slot clock at the receive rate: releasing a pull takes one packet's slot (the packet it
//   pulls, a full one); a data packet that arrives without having been pulled (a first packet,
//   a retransmission, a requester not paced) takes the slot of its own size on arrival: it used
//   the link without the pacer's leave, so the pulls after it wait for the link time it took.
//   The clock never runs behind `now`: idle time is not saved up for a burst.
// - Pulls wait in one FIFO: a requester with one packet in flight has at most about one pull
//   waiting, so arrival order serves the requesters in turn.
// - A pull goes with the ACK of the packet that asked for it when the queue is empty and the
//   slot is free; otherwise it waits and the owner releases it when NextRelease() comes (it
//   then goes in an ACK of its own on the path the asking packet came on).
//
// Sans-I/O, single-threaded, deterministic. Disabled (rate 0): OnArrival never pulls.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>

#include "lib/core/types.h"

namespace metaroce::core {

struct PullPacerConfig {
  // The host's receive rate in Gb/s (all of its links together), counted in wire bytes: 0
  // disables pulling. The pacer runs at this rate, less what unsolicited packets take.
  double rate_gbps = 0;
  // A CE-marked arrival delays the pulls after it by this fraction of a pulled packet's slot:
  // the pacer alone keeps the arrivals at the link's rate, so a queue that unsolicited packets
  // built (a burst of first packets, retransmissions) would stand for as long as the pulls
  // last; while the marks say it is there, the pulls drain it (at a quarter: a fifth of the
  // link, so that the RTT of pulls already out when the marks stop cannot empty the queue
  // below the marking threshold and idle the link).
  double ce_slot_fraction = 0.25;
  // Wire bytes of the full packet a pull lets through: payload, MetaRoCE headers and the
  // link's own (Ethernet, IP, UDP, preamble and gap: 66 bytes).
  uint32_t pulled_packet_wire_bytes = 4096 + 56 + 66;
  // Wire bytes a packet costs beyond its UDP payload, added to an unsolicited arrival's size.
  uint32_t wire_overhead_bytes = 66;
};

struct PullPacerCounters {
  uint64_t pulls_with_ack = 0;     // released at once, in the ACK of the asking packet
  uint64_t pulls_deferred = 0;     // queued, then released on their own
  uint64_t unsolicited_bytes = 0;  // wire bytes of arrivals that took their own slot
  uint64_t ce_arrivals = 0;        // CE-marked arrivals (each delayed the pulls)
};

class PullPacer {
 public:
  explicit PullPacer(const PullPacerConfig& config = {});

  bool enabled() const { return slot_ns_per_byte_ > 0; }
  const PullPacerConfig& config() const { return config_; }

  // A data packet of `datagram_bytes` (its UDP payload: headers and data) arrived at `now`
  // (monotonic across calls). `pulled`: it carried flags::kPulled; `ce`: it was CE-marked (a
  // queue on its way was above its marking threshold: the pulls after it wait a quarter slot
  // more, until the queue is back under the threshold).
  void OnArrival(Instant now, uint32_t datagram_bytes, bool pulled, bool ce);
  // A packet that arrived at `now` on `path` of the connection `conn` (its local id) asks for a
  // pull (flags::kWantsPull) and brought new data. Returns true when the pull goes now, with
  // that packet's ACK; false when it waits for ReleaseDue. Call after OnArrival for the packet.
  bool RequestPull(Instant now, uint32_t conn, uint16_t path);
  // When the first waiting pull may go; kNever when none waits.
  Instant NextRelease() const { return queue_.empty() ? kNever : SlotInstant(); }
  // Releases every pull due at `now`, in order: send(conn, path) for each. A pull for a
  // connection gone is dropped by the owner (its slot is spent: the pacer cannot tell).
  template <typename Send>
  void ReleaseDue(Instant now, Send&& send) {
    while (!queue_.empty() && SlotInstant() <= now) {
      const Waiting w = queue_.front();
      queue_.pop_front();
      TakeSlot(now, config_.pulled_packet_wire_bytes);
      ++counters_.pulls_deferred;
      send(w.conn, w.path);
    }
  }

  size_t waiting() const { return queue_.size(); }
  const PullPacerCounters& counters() const { return counters_; }

 private:
  struct Waiting {
    uint32_t conn;
    uint16_t path;
  };
  void TakeSlot(Instant now, uint64_t wire_bytes);
  // The next slot's start, rounded up to a whole ns.
  Instant SlotInstant() const { return Instant{static_cast<int64_t>(std::ceil(slot_ns_))}; }

  PullPacerConfig config_;
  double slot_ns_per_byte_ = 0;  // 8 / rate_gbps
  // When the next slot is free, in ns, kept exact: slots rounded to whole ns (168 ns for
  // 168.72) would run the pacer half a percent fast, a queue that grows for as long as the
  // incast lasts.
  double slot_ns_ = -1e18;
  std::deque<Waiting> queue_;
  PullPacerCounters counters_;
};

}  // namespace metaroce::core
