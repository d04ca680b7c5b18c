// The requester's state of one logical path (SenderPath) and of a data unit moved between paths
// (Reroute): what the sender's units share. The Sender owns the paths; the spray (spray.h) reads
// them to choose a new packet's path and writes only their pacing schedule; loss detection and
// path health (sender.h, sender_loss.cc, path_health.cc) keep the rest.
// docs/spec/paths-and-recovery.md is the normative description; comments cite its rules as [R#].
#pragma once

#include <cstdint>
#include <vector>

#include "lib/core/config.h"
#include "lib/core/path_congestion.h"
#include "lib/core/path_state.h"
#include "lib/core/rtt_estimator.h"
#include "lib/core/sent_ring.h"
#include "lib/core/sequence.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

// A data unit waiting for a new transmission on another path: moved off a failed path [R5], or
// hedged off an overtaken one [R5b], which keeps its PSN there as well.
struct Reroute {
  PacketRef ref;
  uint16_t from_path = 0;
  bool hedge = false;
};

// The requester's view of one logical path.
// The fields a pick of the path reads (Spray::Pick: Open and Window, for every path, about
// twice per packet sent) come first, in one cache line: between two packets the copies of a
// jumbo frame's payload evict the path state, and these fields had been spread over four lines.
struct alignas(64) SenderPath {
  SenderPath(uint16_t id, const CongestionParams& cc, Duration initial_rtt)
      : id(id), congestion(cc), rtt(initial_rtt) {}

  uint16_t id;
  uint16_t port = 0;
  uint8_t plane = 0;
  PathState state = PathState::kActive;
  // Go-back-N: resend everything in [gbn_resend, next_psn) before new data.
  bool gbn_resending = false;
  uint32_t snd_una = 0;   // lowest PSN neither acknowledged nor abandoned
  uint32_t next_psn = 0;  // next PSN to assign
  uint32_t inflight_bytes = 0;
  uint32_t window_hint = 0;
  PathCongestion congestion;  // its cwnd first
  SentRing ring;          // PSNs [snd_una, next_psn); storage only while some are outstanding
  uint64_t tx_order = 0;                 // transmissions made on this path
  Instant last_tx_at{0};                 // ... the latest of them
  uint64_t delivered_order = 0;          // highest transmission known to have arrived [R4]
  uint64_t ack_request_order = 0;        // last transmission that asked for an ACK as the window filled
  // [R4] loss detection examines each transmission once, in transmission order: first
  // transmissions in PSN order (those of PSNs below loss_scan_psn are done) and retransmissions
  // in the order made (retransmits[retransmits_head..]). Each ACK then costs the losses it
  // reveals, not a walk of the window. Storage only while retransmissions are outstanding.
  struct Retransmission {
    uint64_t tx_order;
    uint32_t psn;
  };
  uint32_t loss_scan_psn = 0;
  std::vector<Retransmission> retransmits;
  size_t retransmits_head = 0;
  uint32_t last_ce_count = 0;  // highest cumulative CE count echoed so far
  // A window below one packet is a rate (congestion.md §1): one new packet per
  // srtt * bytes / window, the first at a random phase within that interval. The spray's
  // schedule (spray.h): nothing else writes these.
  bool pace_started = false;
  Instant pace_due{0};        // when the next paced packet may go
  Duration pace_interval{0};  // the interval pace_due was computed with
  Duration pace_rtt{0};       // ... from this PacingRtt, packet size and window
  uint32_t pace_bytes = 0;
  uint32_t pace_window = 0;
  RttEstimator rtt;
  // Tail loss / health [R5].
  Instant pto_deadline = kNever;
  uint32_t timeouts_without_progress = 0;  // PTO expiries since the last progress: the backoff
  uint32_t attributed_timeouts = 0;  // ... of which evidence against this path: toward failure
  Instant last_timeout_at{INT64_MIN / 2};  // latest PTO expiry: evidence must be newer [R5a]
  bool overtaken = false;  // [R5a] siblings delivered later packets; no progress here since
  // [R5d] the deadline armed is the tail probe's; and how many went since the path's last
  // progress.
  bool tail_probe_armed = false;
  uint8_t tail_probes = 0;
  // ... and, for a clocked connection with more to send, the probe armed is a loss query: a PROBE
  // whose reply tells whether the overdue packets arrived (loss_query_order: transmissions up to
  // it, overdue by loss_query_at, are judged by the reply; 0: none pending).
  bool loss_query_armed = false;
  uint8_t loss_queries = 0;  // since the path's last progress
  uint64_t loss_query_order = 0;
  Instant loss_query_at{0};
  // [R5a] the stall gate set the overtaken evidence aside then: until the path's plane makes
  // progress again, only the ordinary timer judges the path.
  Instant stall_suspected_at{INT64_MIN / 2};
  // Rotation and probing [R7].
  Instant last_rotation{INT64_MIN / 2};
  Instant rotate_at = kNever;  // a rotation is pending (hold-down)
  PathEventReason rotate_reason = PathEventReason::kFailed;
  Instant next_probe_at = kNever;
  uint32_t probe_psn = 0;
  Instant probe_started_at{0};  // first probe not yet answered: its reply is an RTT sample
  bool probe_unanswered = false;
  uint32_t probe_backoff = 0;    // doublings of the probe interval since the last reply
  uint32_t probe_replies = 0;
  uint32_t probe_timeouts = 0;
  Instant degraded_since = kNever;
  uint32_t gbn_resend = 0;  // go-back-N (gbn_resending above)
  Instant gbn_last_goback{INT64_MIN / 2};
  double utilization = 0;
  PathStats stats;

  // Precondition: psn in [snd_una, next_psn) (sent_ring.h).
  SentPacket& at(uint32_t psn) { return ring.at(psn); }
  const SentPacket& at(uint32_t psn) const { return ring.at(psn); }
  bool IsOutstanding(uint32_t psn) const {
    return SeqLessEq(snd_una, psn) && SeqLess(psn, next_psn);
  }
  uint32_t outstanding() const { return next_psn - snd_una; }
  // Active: new data, hedges and rerouted data may go on it.
  bool Usable() const { return state == PathState::kActive; }
};

}  // namespace metaroce::core
