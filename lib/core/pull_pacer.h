// The responder's pull pacer: the host clocks the requesters whose share of its receive budget is
// below one packet per path (docs/spec/congestion.md §6). Such a requester, once it has seen a
// pull, sends new data only on pulls and within a small allowance of pulls owed to it; the
// responder answers each data packet that asks for one (flags::kWantsPull) and brought new data
// with one pull (an ACK with flags::kPull), released at the host's receive rate. The bytes in
// flight toward the host are then what its link drains in an RTT, however many requesters there
// are and whatever their RTT estimates: the loop closes here, at the host's own rate, not at
// thousands of senders that each hear from it once a millisecond.
//
// Accounting, O(1) per packet:
// - A slot clock at the receive rate: releasing a pull takes one packet's slot (the packet it
//   pulls, a full one); a data packet that arrives without having been pulled (a retransmission,
//   a requester not paced) takes the slot of its own size on arrival: it used the link without
//   the pacer's leave, so the pulls after it wait for the link time it took. (The owner reports a
//   connection's first window as pulled: the host granted it with its offer at set-up.)
//   The clock never runs behind `now`: idle time is not saved up for a burst.
// - A CE-marked arrival delays the pulls by a fraction of a slot (config), so the pacer drains
//   a queue that unsolicited packets built instead of holding it.
// - Waiting pulls are served round robin over the connections that wait: one pull per
//   connection per round, however many it asked for, so a requester that keeps more packets in
//   flight gets no larger share of the host.
// - A pull goes with the ACK of the packet that asked for it when nothing waits and the slot is
//   free (the requester reads that as "the host has room": congestion.md §6); otherwise it
//   waits and the owner releases it when NextRelease() comes, in an ACK of its own
//   (flags::kDelayedAck: no RTT sample).
// - Pulls are numbered in the order they go (their turn): the owner sends a waiting pull on
//   path turn mod paths (the next that has a port to answer to), so the ACKs spread over the
//   reverse routes, and the requester sends the pulled packet on the pull's path (once it has
//   sent on every path: the owner can only pull on paths it has heard from), so the host's
//   links and planes take the pulled packets in turn.
//
// Sans-I/O, single-threaded, deterministic. Disabled (rate 0): RequestPull never pulls.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_map.h"
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
  uint64_t pulls_deferred = 0;     // waited, then released on their own
  uint64_t unsolicited_bytes = 0;  // wire bytes of arrivals that took their own slot
  uint64_t ce_arrivals = 0;        // CE-marked arrivals (each delayed the pulls)
  uint64_t pulls_cancelled = 0;    // waiting pulls of requesters that had nothing more to send
};

class PullPacer {
 public:
  explicit PullPacer(const PullPacerConfig& config = {});

  bool enabled() const { return slot_ns_per_byte_ > 0; }
  const PullPacerConfig& config() const { return config_; }

  // A data packet of `datagram_bytes` (its UDP payload: headers and data) arrived at `now`
  // (monotonic across calls). `pulled`: it carried flags::kPulled; `ce`: it was CE-marked.
  void OnArrival(Instant now, uint32_t datagram_bytes, bool pulled, bool ce);
  // A packet that arrived at `now` for the connection `conn` (its local id) asks for a pull
  // (flags::kWantsPull) and brought new data. Returns true when the pull goes now, with that
  // packet's ACK; false when it waits for ReleaseDue. Call after OnArrival for the packet.
  bool RequestPull(Instant now, uint32_t conn);
  // A packet of the connection `conn` arrived that asks for no pull: it has nothing more to
  // send. Its waiting pulls are dropped before they spend a slot (a requester that kept several
  // in flight has as many still waiting when its data runs out).
  void CancelPulls(uint32_t conn);
  // When the next waiting pull may go; kNever when none waits.
  Instant NextRelease() const { return waiting_ == 0 ? kNever : SlotInstant(); }
  // Releases every pull due at `now`: send(conn, turn) for each, round robin over the
  // connections. A pull for a connection gone is dropped by the owner (its slot is spent: the
  // pacer cannot tell).
  template <typename Send>
  void ReleaseDue(Instant now, Send&& send) {
    while (!rotation_.empty() && SlotInstant() <= now) {
      const uint32_t conn = rotation_.front();
      rotation_.pop_front();
      auto it = waiting_by_conn_.find(conn);
      if (it->second.count == 0) {  // cancelled
        waiting_by_conn_.erase(it);
        continue;
      }
      if (--it->second.count > 0) {
        rotation_.push_back(conn);
      } else {
        waiting_by_conn_.erase(it);
      }
      --waiting_;
      TakeSlot(now, config_.pulled_packet_wire_bytes);
      ++counters_.pulls_deferred;
      send(conn, turn_++);
    }
  }

  uint64_t waiting() const { return waiting_; }  // pulls waiting, all connections
  const PullPacerCounters& counters() const { return counters_; }

 private:
  struct Waiting {
    uint32_t count = 0;  // pulls waiting for the connection
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
  absl::flat_hash_map<uint32_t, Waiting> waiting_by_conn_;
  std::deque<uint32_t> rotation_;  // connections with pulls waiting, each once, in turn
  uint64_t waiting_ = 0;
  uint64_t turn_ = 0;  // pulls released so far
  PullPacerCounters counters_;
};

}  // namespace metaroce::core
