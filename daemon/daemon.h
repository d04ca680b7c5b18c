// metaroced: the daemon that hosts the MetaRoCE engine on a host (daemon/README.md).
//
// It owns the NIC queues and the XDP steering program through an api::Context (AF_XDP or kernel
// UDP ports over the configured interfaces, one per plane), holds the connections made with
// `conn.add` or by peer daemons (ConnectionManager), watches and steers paths (PathManager), and
// serves the control socket (ControlServer) with these methods:
//
//   daemon.show link.show stat.show            here
//   conn.add conn.del conn.show                ConnectionManager, and AppSessions for
//                                              applications' connections (conn.del, conn.show)
//   path.show path.rotate path.events          PathManager (every connection's paths)
//   app.attach mem.* mr.* cq.* qp.*            AppSessions (attached applications)
//
// and, when metrics_listen is set, Prometheus metrics over HTTP (MetricsServer, on a thread of
// its own; CollectMetrics gathers the state the methods above show, RenderMetrics formats it).
//
// The operator sees and manages every connection on the host: conn.show, conn.del, path.*,
// and stat.show's connection counters cover the applications' connections as the daemon's own
// (conn.del of an application's connection aborts it and leaves it to the application to
// destroy: AppSessions::DeleteByOperator).
//
// Start-up (Daemon::Start): preflight checks (daemon/preflight.h), the Context, the connection
// manager (listening for peer daemons), the path manager, the control socket, the metrics
// listener (when configured; its address needs a restart to change), then READY=1 to
// systemd. Any failure undoes what was made (no XDP program, socket file or thread is left)
// and returns one line naming the fix.
//
// Running (Run): signalfd for SIGTERM/SIGINT (stop) and SIGHUP (reload); the path manager
// ticks every 5 ms. The caller blocks those signals before Start (so that no thread the daemon
// starts takes them) and passes the signalfd.
//
// Reload: the config is read again with the same command-line overrides; a file with errors is
// refused whole (the running config stays); limits, paths and log_format take effect; changes
// to other keys are reported as needing a restart and ignored. Connections are kept.
//
// Stop (Stop, or the destructor): STOPPING=1, the metrics listener closes, the control socket
// closes (file unlinked), connections are torn down (goodbye to each peer, outstanding work
// flushed), then the Context goes (XDP programs detached, AF_XDP sockets closed).
//
// Threading: Start, Run, Reload and Stop from the main thread; handlers run on the control
// server's thread, CollectMetrics on the metrics server's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/app_session.h"
#include "daemon/command_line.h"
#include "daemon/config.h"
#include "daemon/connection_manager.h"
#include "daemon/control_server.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/metrics_server.h"
#include "daemon/path_manager.h"
#include "daemon/sd_notify.h"
#include "lib/api/context.h"
#include "lib/control/json.h"
#include "lib/io/packet_port.h"

namespace metaroce::daemon {

// The features of packet ports together (daemon.show `features`: the host's; link.show's: a
// plane's, one port per worker): af_xdp when any port is AF_XDP, and each other field only when
// every AF_XDP port has it (ports of other kinds have none of them and do not count); all false
// without AF_XDP ports.
io::PortFeatures FeaturesOfPorts(const std::vector<io::PortFeatures>& ports);
// {"zero_copy", "need_wakeup", "busy_poll", "multi_buffer"}: booleans, as both commands show them.
control::Json FeaturesJson(const io::PortFeatures& features);

// The policy a config's [paths] section sets.
PathPolicy PathPolicyFrom(const PathSettings& paths);
ConnectionLimits ConnectionLimitsFrom(const LimitSettings& limits);
// The rate the host's pull pacer runs at ([daemon] pull_rate_gbps, `auto` resolved) and where
// it came from, as the start-up log and daemon.show say it.
struct PullRate {
  double gbps = 0;     // the host's, all workers together; 0: no pulls
  std::string source;  // "config", "auto: eth0 100000 Mb/s", "auto: veth0 reports speed -1 ..."
};
// An interface's link speed in Mb/s as the kernel reports it (/sys/class/net/IF/speed). Errors:
// the file cannot be read (no such interface in the namespace that mounted sysfs; EINVAL from
// devices without a speed, such as lo) or holds no integer. -1 (unknown: veth in some kernels,
// a link that is down) is returned as read: the caller judges it.
absl::StatusOr<int64_t> ReadLinkSpeedMbps(const std::string& ifname);
using LinkSpeedReader = std::function<absl::StatusOr<int64_t>(const std::string& ifname)>;
// A number in the config is taken as it is. `auto`: the speeds of the interfaces served added
// up (every plane's link receives: two planes of 100 Gb/s are a 200 Gb/s host), read through
// `read_speed`. Any interface whose speed is unreadable or not positive turns pulls off, the
// source saying which and why: a rate made up from the others would pace the host below or
// above its links, and without pulls the host still has its receive budget's hints.
PullRate ResolvePullRate(const DaemonSettings& daemon,
                         const LinkSpeedReader& read_speed = ReadLinkSpeedMbps);
// The daemon's Context: the config's interfaces, port kind, workers, the observer rings' depth
// (ObservedEventDepth), the receive budget, and the pull pacer at `pull` (ResolvePullRate).
api::ContextOptions ContextOptionsFrom(const Config& config, const PullRate& pull);
AppLimits AppLimitsFrom(const LimitSettings& limits);

class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const ConfigSource& source, Config config,
                                                       Logger& log, SdNotifier& notifier);
  ~Daemon();  // Stop()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Until SIGTERM or SIGINT arrives on `signal_fd`; SIGHUP reloads.
  void Run(int signal_fd);
  void Reload();
  // Every second: the depth the paths really held need (ObservedEventDepthForPaths) against the
  // observer rings' (sized at start for max_connections x 8 paths); a warning naming the
  // setting when the rings fall short, once until they suffice again.
  void CheckObservedEventDepth();
  void Stop();

  // Handlers (docs/control-protocol.md).
  absl::StatusOr<control::Json> ShowDaemon(const control::Json& params);
  absl::StatusOr<control::Json> ShowLinks(const control::Json& params);
  absl::StatusOr<control::Json> ShowStats(const control::Json& params);
  // conn.show: the daemon's connections and the applications', in id order, by pages
  // (daemon/listing.h).
  absl::StatusOr<control::Json> ShowConnections(const control::Json& params);
  // conn.del: a daemon connection is torn down on both daemons; an application's is aborted
  // and marked deleted by the operator (AppSessions::DeleteByOperator).
  absl::StatusOr<control::Json> DeleteConnection(const control::Json& params);
  // The state the metrics show (daemon/metrics.h), gathered as the handlers above gather it.
  // Safe from any thread while the daemon runs.
  MetricsSnapshot CollectMetrics();

 private:
  Daemon(const ConfigSource& source, Config config, Logger& log, SdNotifier& notifier);
  absl::Status StartParts();
  void RegisterHandlers();
  // Which planes a `name` filter selects; NotFound naming the daemon's interfaces.
  absl::StatusOr<std::vector<int>> SelectPlanes(const control::Json& params);
  std::string StatusLine();
  Config config() const;  // a copy, for any thread

  const ConfigSource source_;
  mutable absl::Mutex config_mu_;
  Config config_ ABSL_GUARDED_BY(config_mu_);  // written by Reload (main thread)
  Logger& log_;
  SdNotifier& notifier_;
  const absl::Time started_ = absl::Now();
  io::PortFeatures features_;
  PullRate pull_rate_;  // resolved at start (daemon.show)
  std::vector<std::vector<std::string>> port_descriptions_;  // [plane][worker]
  std::vector<std::vector<io::PortFeatures>> port_features_;  // [plane][worker]
  bool stopped_ = false;
  absl::Time next_depth_check_ = absl::InfinitePast();  // main thread
  bool depth_short_ = false;                             // main thread: warned already

  // Declared in start-up order: destroyed in reverse.
  std::unique_ptr<api::Context> context_;
  std::unique_ptr<ConnectionManager> connections_;
  std::unique_ptr<AppSessions> apps_;
  std::unique_ptr<PathManager> paths_;  // uses connections_ and apps_
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<MetricsServer> metrics_;  // null when metrics_listen is off
};

}  // namespace metaroce::daemon
