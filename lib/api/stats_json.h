// Telemetry as JSON, one schema for every tool that prints it (mrperf's result documents, the
// daemon's conn.show / path.show / stat.show; docs/control-protocol.md): counters keep their
// Soft-RoCE names, times are microseconds in keys ending in _us, fractions are 0..1.
//
// Threading: pure functions. Errors: absl::Status naming the key.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

#include "lib/api/connection.h"
#include "lib/control/json.h"
#include "lib/core/connection.h"
#include "lib/core/path_state.h"
#include "lib/io/packet_port.h"

namespace metaroce::api {

// ConnectionCounters under their names ("sent_pkts", "retry_exceeded_err", ...).
control::Json CountersJson(const core::ConnectionCounters& c);
// Adds every counter of `c` into the same-named members of `sum` (for totals).
void AddCounters(const core::ConnectionCounters& c, control::Json& sum);
// One path: path_id, src_port, plane, state, RTT (srtt_us, rttvar_us, min_rtt_us), ecn_fraction,
// utilization, window (cwnd_bytes, inflight_bytes, window_hint_bytes) and its counters.
control::Json PathStatsJson(const core::PathStats& p);
// A connection snapshot: conn_id, owner_worker, state, error_status(_name), counters,
// outstanding_sends, posted_receives, events_dropped, paths.
control::Json ConnectionStatsJson(const ConnectionStats& s);
// The inverse of ConnectionStatsJson (an attached context reads qp.stats with it): every key it
// writes is required, with its type; InvalidArgument names the first that is missing or wrong.
// Times come back to the nanosecond (they travel as microseconds in doubles).
absl::StatusOr<ConnectionStats> ConnectionStatsFromJson(const control::Json& j);
// A packet port's counters and its description.
control::Json PortStatsJson(const io::PortStats& s, std::string_view description);

}  // namespace metaroce::api
