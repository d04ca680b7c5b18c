// The path manager: sees every path's health and telemetry and steers degraded paths off their
// route by rotating their source port, with hysteresis and a rate limit; records each change
// (`path.show`, `path.rotate`, `path.events`; docs/control-protocol.md).
//
// Division of labour with the core (docs/architecture.md): the core detects failure and
// persistent congestion on a path within a few RTTs and rotates its port at once (rules [R5]-[R7]),
// because a daemon polling telemetry could not react within the 20 base RTTs a dead spine allows.
// The policy is the daemon's and the core applies it at the point of decision: the hysteresis
// (rotation_holddown between two rotations of a path, degraded_hold before congestion counts as
// persistent) and a per-connection rate limit on rotations (a token bucket, so that a flapping
// fabric cannot cause a rotation storm: a rotation without a token waits for one), all set from
// the config into every connection the daemon makes. The path manager keeps the record of every
// state change and rotation with its reason (read from the connections' path events), serves
// telemetry, and runs operator rotations (subject to the same bucket).
//
// Threading: Tick() from the daemon's main loop; the methods from the control server's thread;
// internally locked.
#pragma once

#include <cstdint>
#include <deque>
#include <map>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/connection_manager.h"
#include "lib/control/json.h"
#include "lib/core/config.h"
#include "lib/core/path_state.h"

namespace metaroce::daemon {

struct PathPolicy {
  absl::Duration rotation_holddown = absl::Milliseconds(5);  // per path, between two rotations
  absl::Duration degraded_hold = absl::Milliseconds(50);     // congestion before it persists
  // Token bucket per connection: at most `rotation_burst` rotations at once, refilled at
  // `rotations_per_second`.
  double rotations_per_second = 50;
  uint32_t rotation_burst = 8;
  size_t events_kept = 1024;  // per connection
  // The policy as core tunables, on top of `base` (lib/api/host_tuning.h).
  core::ConnectionConfig Apply(core::ConnectionConfig base) const;
};

class PathManager {
 public:
  PathManager(ConnectionManager& connections, PathPolicy policy, absl::Time started);

  // Drains every connection's path events into the record. Call every few milliseconds.
  void Tick();
  void SetPolicy(const PathPolicy& policy);

  absl::StatusOr<control::Json> Show(const control::Json& params);
  absl::StatusOr<control::Json> Rotate(const control::Json& params);
  absl::StatusOr<control::Json> Events(const control::Json& params);

 private:
  void Record(const core::PathEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ConnectionManager& connections_;
  absl::Mutex mu_;
  PathPolicy policy_ ABSL_GUARDED_BY(mu_);
  absl::Time started_;
  std::map<uint32_t, std::deque<control::Json>> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaroce::daemon
