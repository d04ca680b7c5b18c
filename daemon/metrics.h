// What metaroced exposes to Prometheus, and how (the families: docs/metrics.md).
//
// MetricsSnapshot is the daemon's state at one instant, in the types the daemon already
// collects for its control methods (daemon.show's versions and heap, link.show's XDP
// attachment, stat.show's port, AF_XDP ring and XDP program counters, the engine's worker
// counters, conn.show's and path.show's connection snapshots); Daemon::CollectMetrics fills it.
// RenderMetrics turns it into the text exposition format (daemon/prometheus_text.h), without
// I/O, so that the unit tests render any state they like.
//
// Naming (Prometheus conventions): prefix metaroce_, base units (seconds, bytes), _total on
// counters, _ratio on fractions 0..1, an _info gauge of value 1 carrying the descriptive labels
// of a thing (build, link, port, connection, path) so that the other series of that thing carry
// only its identifying labels. Identifying labels: `interface`, `queue` (the NIC receive queue
// of an AF_XDP socket; with kernel UDP ports, the worker index), `worker`, `conn` (the
// connection id, as in conn.show), `path` (the path id 0..N-1). A path's source port is a gauge
// value, never a label: ports rotate, a label would make a new series at each rotation.
//
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/api/connection.h"
#include "lib/engine/worker.h"

namespace metaroce::daemon {

struct BuildInfoMetrics {
  std::string version;  // metaroced's
  std::string kernel, libbpf, libxdp, liburing;
};

// One plane's interface.
struct LinkMetrics {
  std::string interface;
  int plane = 0;
  std::string address;       // this host's address on the plane
  uint32_t xdp_prog_id = 0;  // attached to the interface now (whoever attached it); 0: none
  std::string xdp_mode;      // "native", "skb", "hw", "multi", "none"
  // The XDP steering program's counters by outcome (its BTF names without the xdp_ prefix:
  // redirected, pass_*, drop_*); empty when the daemon runs no steering program (udp ports).
  std::vector<std::pair<std::string, uint64_t>> xdp_packets;
};

// One connection the daemon holds: its own (conn.add) or an attached application's.
struct ConnectionMetrics {
  uint32_t id = 0;
  std::string peer;
  bool application = false;     // false: the daemon's own
  std::string application_name;  // the application's, as it attached (any bytes)
  int64_t application_pid = 0;
  std::string profile;
  api::ConnectionStats stats;   // counters, state and paths, taken on the owner worker
};

struct MetricsSnapshot {
  BuildInfoMetrics build;
  std::string port_kind;        // "af_xdp" or "udp"
  uint32_t first_queue = 0;     // worker w's AF_XDP sockets are on queue first_queue + w
  double start_time_seconds = 0;  // since the Unix epoch
  double uptime_seconds = 0;
  uint64_t heap_in_use_bytes = 0;
  uint64_t app_sessions = 0;
  uint64_t app_memory_bytes = 0;  // shared memory counted against max_memory
  std::vector<LinkMetrics> links;  // index = plane
  std::vector<engine::WorkerStats> workers;  // each with its ports, one per plane
  std::vector<ConnectionMetrics> connections;
};

// The exposition text of `snapshot`. Each sample the format could not carry is described in
// `problems` when given (a bug: the unit tests require none).
std::string RenderMetrics(const MetricsSnapshot& snapshot,
                          std::vector<std::string>* problems = nullptr);

}  // namespace metaroce::daemon
