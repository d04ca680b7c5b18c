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
// Every connection on the host, the daemon's own (ConnectionManager) and the attached
// applications' (AppSessions), is shown, rotated and recorded alike; an id is looked up among
// the daemon's first, then the applications'. Their path events all reach the record through the
// engine's observer rings (lib/engine/engine.h), drained here through AppSessions::
// PollPathEvents, so that a tick costs what the events do and nothing per connection held:
//   - the daemon's connections are the daemon's: they are made with
//     api::ConnectOptions::path_events_to_observer (engine::ObservePathEvents::kOnly), and their
//     events go to the observer rings only;
//   - an application's connection's event ring is the application's to consume
//     (Connection::PollEvents in its process), so the daemon must not drain it. Instead the
//     daemon creates application connections with engine::ObservePathEvents::kYes: their owner
//     worker puts a copy of every event into its observer ring.
// The record misses nothing but what a full observer ring dropped (counted per worker,
// observed_events_dropped; the rings' depth is the config's observed_event_depth, sized for a
// fabric failure's burst: config.h). Chosen over an engine callback (it would run on the worker
// thread and take the daemon's locks on the data path) and over polling each connection through
// the control queue (a worker wake-up per connection every tick). The records of deleted
// connections are dropped once a second. Each event recorded gets a sequence number, in the
// order of the instants of each tick's events: path.events lists by it, in pages
// (daemon/listing.h).
//
// Threading: Tick() from the daemon's main loop; the methods from the control server's thread;
// internally locked.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/app_session.h"
#include "daemon/connection_manager.h"
#include "daemon/path_event_record.h"
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
  // The record of path events (daemon/path_event_record.h): the last `events_kept` per
  // connection, and at most `events_bytes` of events in all (40 bytes each; the oldest of the
  // whole record go first beyond it).
  size_t events_kept = 1024;
  size_t events_bytes = size_t{32} << 20;
  // The policy as core tunables, on top of `base` (lib/api/host_tuning.h).
  core::ConnectionConfig Apply(core::ConnectionConfig base) const;
};

class PathManager {
 public:
  // `connections` and `apps` must outlive the path manager.
  PathManager(ConnectionManager& connections, AppSessions& apps, PathPolicy policy,
              absl::Time started);

  // Drains every connection's path events (the daemon's and copies of the applications') into
  // the record. Call every few milliseconds.
  void Tick();
  void SetPolicy(const PathPolicy& policy);

  absl::StatusOr<control::Json> Show(const control::Json& params);
  absl::StatusOr<control::Json> Rotate(const control::Json& params);
  // path.events: by pages in sequence order (daemon/listing.h; the cursor is `seq`).
  absl::StatusOr<control::Json> Events(const control::Json& params);

 private:
  static constexpr absl::Duration kPruneEvery = absl::Seconds(1);

  // The connection `id`, the daemon's or an application's: NotFound naming it otherwise.
  absl::StatusOr<api::ConnectionStats> StatsOf(uint32_t id);
  absl::Status RotateOne(uint32_t id, uint16_t path_id);
  bool Exists(uint32_t id);

  ConnectionManager& connections_;
  AppSessions& apps_;
  absl::Mutex mu_;
  PathPolicy policy_ ABSL_GUARDED_BY(mu_);
  absl::Time started_;
  // Every connection's events, compact and bounded in bytes; sequence numbers (the order
  // recorded, never reused) are path.events' order and cursor.
  PathEventRecord record_ ABSL_GUARDED_BY(mu_);
  absl::Time next_prune_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace metaroce::daemon
