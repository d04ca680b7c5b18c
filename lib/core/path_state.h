// Path health states and the observable events of a connection's paths (docs/spec/paths-and-recovery.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "lib/core/types.h"

namespace metaroce::core {

// kActive: carries new data. kSuspect: a probe timeout passed without progress; carries only
// retransmissions and probes. kFailed: declared dead; its outstanding data moved to other paths;
// its source port is rotated at once (or when the hold-down allows). kProbing: on a new source
// port, sending PROBEs; back to kActive after enough replies.
enum class PathState : uint8_t { kActive, kSuspect, kFailed, kProbing };
std::string_view PathStateName(PathState s);

enum class PathEventReason : uint8_t {
  kTimeout,               // probe timeout with nothing acknowledged
  kProgress,              // an acknowledgement arrived
  kFailed,                // too many timeouts without delivery
  kPersistentCongestion,  // marked or delayed for longer than degraded_hold
  kProbeReply,            // the probe on a new port was answered
  kProbeTimeout,          // the probe on the new port was not answered: try another port
  kManual,                // RequestRotation() from the caller (operator)
  kSilence,               // the whole connection silent beyond the recovery cap [R5c]
};
std::string_view PathEventReasonName(PathEventReason r);

struct PathEvent {
  enum class Kind : uint8_t { kStateChange, kPortRotated };
  Instant at;
  uint32_t conn_id = 0;
  uint16_t path_id = 0;
  Kind kind = Kind::kStateChange;
  PathState from = PathState::kActive;
  PathState to = PathState::kActive;
  uint16_t old_port = 0;
  uint16_t new_port = 0;
  PathEventReason reason = PathEventReason::kTimeout;
};

// Telemetry of one path, as a snapshot.
struct PathStats {
  uint16_t path_id = 0;
  uint16_t src_port = 0;
  uint8_t plane = 0;
  PathState state = PathState::kActive;
  Duration srtt{0}, rttvar{0}, min_rtt{0};
  uint32_t cwnd_bytes = 0;
  uint32_t inflight_bytes = 0;
  uint32_t window_hint_bytes = 0;  // last fair-share hint from the receiver (0: none)
  double ecn_fraction = 0;         // EWMA of the fraction of CE-marked packets
  double utilization = 0;          // inflight / cwnd averaged over the last RTT, 0..1
  uint64_t tx_packets = 0, tx_bytes = 0;
  uint64_t acked_packets = 0;
  uint64_t retransmits = 0;        // gap-triggered and timeout-triggered
  uint64_t timeouts = 0;
  uint64_t rotations = 0;
  uint64_t ce_marks = 0;
  uint64_t rx_packets = 0;         // receiver side: data packets accepted on this path
};

}  // namespace metaroce::core
