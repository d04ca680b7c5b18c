// The responder's host-wide receive budget: the bytes in flight toward this host that it lets its
// requesters have, shared fairly among the (connection, path) pairs that are sending to it
// (docs/spec/congestion.md §5). Every ACK carries the current share as its `window_hint`; a new
// connection is offered its share of the budget at set-up, before its first ACK can.
//
// One budget per Endpoint (the host, or one engine shard with its share of the host's budget).
// Connections register at creation and report their data arrivals; ACKs read the share back.
// It also holds the host's pull pacer (pull_pacer.h), which clocks the requesters whose share is
// below one packet per path (congestion.md §6).
//
// Which pairs count (local policy, congestion.md §5):
// - The pairs of a connection count together: a data packet on any path of a connection counts
//   all of its paths. A requester whose share is below one packet per path sends on its paths in
//   turn, one packet per path every several RTTs (congestion.md §1); counting paths one by one as
//   each sends for the first time would take that long, while the shares of the pairs counted so
//   far (the budget divided among too few) let everyone send too much.
// - A connection counts from its set-up until its first data packet, for at most `active_window`
//   after the first event that follows its set-up: connections set up together for an incast are
//   counted before they have sent anything, so the first ACKs already carry the share of the
//   whole incast; one set up and never used stops counting soon.
// - Activity is counted per epoch, in O(1) per packet with no timer: a connection is active in an
//   epoch when a data packet of it arrived then, and the active count is the larger of the
//   current and the previous epoch's: a connection stays counted for at least one whole epoch
//   after its last packet, and the count never drops to nothing at an epoch's start.
// - An epoch is clocked by the bytes received: it ends once the host has received
//   max(budget, 2 x mtu x connections registered) bytes in it (not the connections counted: a
//   falling count would shorten the epochs and miss more of the paced connections), or after
//   twice the previous epoch's duration (when most connections stop, those still sending are not
//   held to the shares of those gone), or after `active_window` at most. A connection still
//   sending at its share sends at least one packet in that many bytes (when everyone is paced
//   below one packet per RTT, N connections send one packet each per N mtu received), so it is
//   not taken for idle between its packets, and one that stopped stops counting within two such
//   epochs. Known limit: at thousands of connections the `active_window` cap (1 ms) is shorter
//   than a paced connection's packet interval (docs/incast-evaluation.md).
//
// Sans-I/O, single-threaded, deterministic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>

#include "lib/core/pull_pacer.h"
#include "lib/core/types.h"

namespace metaroce::core {

struct ReceiveBudgetConfig {
  // Bytes in flight toward this host that its requesters may have together. 0: no hint (every
  // ACK says window_hint 0, and connections are offered no initial share).
  uint64_t budget_bytes = 1u << 20;
  Duration active_window = std::chrono::milliseconds(1);  // longest epoch
  uint32_t mtu = 4096;                                    // for the epoch's length in bytes
  // The pull pacer of requesters paced below one packet per path (pull_pacer.h); off unless
  // its rate is set: the host's receive rate is its owner's to know.
  PullPacerConfig pull;
};

// A connection's registration, kept by its responder half.
struct ActivityMark {
  uint64_t epoch = 0;     // 0: not active yet; otherwise 1 + the epoch of its latest packet
  uint64_t serial = 0;    // order of registration (1, 2, ...): finds its set-up group
  uint16_t pairs = 0;     // paths it sprays on
  bool pending = false;   // counted from set-up, no data packet yet
  // What is left of its first window: its share of the budget when its first data packet came
  // (what the set-up offered it, congestion.md §5.3), in payload bytes.
  uint64_t prepaid_bytes = 0;
};

class ReceiveBudget {
 public:
  explicit ReceiveBudget(const ReceiveBudgetConfig& config = {})
      : config_(config), pacer_(config.pull) {}

  const ReceiveBudgetConfig& config() const { return config_; }
  bool enabled() const { return config_.budget_bytes > 0; }

  // A connection with `pairs` paths was set up (it counts as pending) / is going away.
  void AddConnection(ActivityMark& mark, uint16_t pairs);
  void RemoveConnection(ActivityMark& mark);
  // This host posted work on the connection: every operation moves data from the poster to its
  // peer, so the connection sends from here and stops counting as about to send to this host
  // (it counts again, as active, when a data packet of it arrives).
  void OnLocalPost(ActivityMark& mark);

  // A data packet of `bytes` payload bytes, of the connection marked by `mark`, arrived at `now`
  // (monotonic across calls).
  void OnData(Instant now, ActivityMark& mark, uint32_t bytes);
  // An unpulled data packet of `bytes` payload bytes of the connection arrived (after OnData):
  // true when it is within the connection's first window, which the host granted when it
  // offered the share (congestion.md §6.2: the pull pacer takes no slot for it); the first packet
  // beyond ends the window.
  bool TakePrepaid(ActivityMark& mark, uint32_t bytes) {
    if (mark.prepaid_bytes < bytes) {
      mark.prepaid_bytes = 0;
      return false;
    }
    mark.prepaid_bytes -= bytes;
    return true;
  }

  // The window_hint for an ACK sent at `now`: the budget divided among the counted pairs, at
  // least 1 (a hint of 0 would mean "no hint"). 0 when the budget is disabled.
  uint32_t Hint(Instant now);

  // The share offered to a new connection at set-up, for all of its paths together: the budget
  // divided among the connections this host already has and those being set up: `arriving`
  // set-up requests answered together, this one included. Every one of them may start sending
  // at once (an incast of connections set up beforehand), and none has an ACK yet to learn
  // better from; answering a burst of requests one by one would offer the first the whole
  // budget, the second half of it, and so on: together the budget times the burst's harmonic
  // number, all in the first RTT. 0 when the budget is disabled.
  uint64_t InitialOffer(uint64_t arriving = 1) const {
    if (!enabled()) return 0;
    return std::max<uint64_t>(1, config_.budget_bytes / (connections_ + std::max<uint64_t>(1, arriving)));
  }

  // The host's pull pacer (congestion.md §6): the receivers of its connections report their
  // arrivals to it; the Endpoint releases the pulls that wait.
  PullPacer& pacer() { return pacer_; }
  const PullPacer& pacer() const { return pacer_; }

  // Pairs counted now (as of the latest event): active and pending.
  uint64_t counted_pairs() const;
  uint64_t connections() const { return connections_; }

 private:
  // A group of connections set up between two events, pending until their first data packet.
  struct SetupGroup {
    uint64_t last_serial = 0;  // serials (previous group's last, last_serial]
    Instant stamped_at{0};     // the first event after the set-up
    bool stamped = false;
    uint64_t pending_pairs = 0;
  };
  // Ends the epoch when its time or bytes are up, stamps the newest set-up group, expires old
  // ones. Called for every data packet and every hint: it returns at once while nothing of that
  // can happen (before roll_check_at_, below roll_check_bytes_).
  void Roll(Instant now);
  // How long the current epoch may last: active_window, or less after an epoch its bytes ended.
  Duration EpochLimit() const;
  SetupGroup* GroupOf(const ActivityMark& mark);

  ReceiveBudgetConfig config_;
  PullPacer pacer_;
  uint64_t epoch_ = 0;                   // epochs begun (the first is 0)
  Instant epoch_start_{0};
  Duration previous_length_{0};          // of the previous epoch, if it ended by its bytes
  uint64_t epoch_bytes_ = 0;             // received in the current epoch
  uint64_t current_ = 0, previous_ = 0;  // pairs active in the current and the previous epoch
  std::deque<SetupGroup> groups_;        // oldest first; at most three live
  uint64_t next_serial_ = 1;
  uint64_t expired_below_ = 0;           // serials up to this one belong to expired groups
  uint64_t connections_ = 0;
  // Roll has nothing to do before this instant (the epoch's time limit, the oldest group's
  // expiry) while the epoch has fewer bytes than roll_check_bytes_; a connection added (a group
  // to stamp) or removed (fewer bytes end the epoch) sets it back, so that the next call checks.
  Instant roll_check_at_{INT64_MIN};
  uint64_t roll_check_bytes_ = 0;
};

}  // namespace metaroce::core
