#include "daemon/daemon.h"

#include <malloc.h>

#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/build_info.h"
#include "daemon/listing.h"
#include "daemon/params.h"
#include "daemon/preflight.h"
#include "lib/api/stats_json.h"
#include "lib/control/protocol.h"
#include "lib/io/interface_info.h"

#if METAROCE_HAVE_IO_URING_MAJOR_VERSION
#include <liburing.h>
#endif

namespace metaroce::daemon {
namespace {

using control::Json;

constexpr int kTickMs = 5;  // the path manager's period

std::string KernelRelease() {
  utsname u{};
  return uname(&u) == 0 ? std::string(u.release) : std::string("unknown");
}

std::string LiburingVersion() {
#if METAROCE_HAVE_IO_URING_MAJOR_VERSION
  return absl::StrCat(io_uring_major_version(), ".", io_uring_minor_version());
#else
  return METAROCE_LIBURING_VERSION;  // pkg-config's, at build time
#endif
}

Json Versions() {
  Json v = Json::MakeObject();
  v["kernel"] = KernelRelease();
  std::string libbpf = libbpf_version_string();  // "v1.1"
  if (!libbpf.empty() && libbpf.front() == 'v') libbpf.erase(0, 1);
  v["libbpf"] = libbpf;
  v["libxdp"] = METAROCE_LIBXDP_VERSION;  // pkg-config's, at build time: libxdp 1.3 cannot tell
  v["liburing"] = LiburingVersion();
  return v;
}

// Bytes the daemon's heap holds now (malloc's own count): what a leak check compares, where
// the resident size also moves with the allocator's caching.
uint64_t HeapInUseBytes() {
  const struct mallinfo2 heap = mallinfo2();
  return static_cast<uint64_t>(heap.uordblks + heap.hblkhd);
}

absl::string_view XdpModeOf(uint8_t attach_mode) {
  switch (attach_mode) {
    case XDP_ATTACHED_DRV: return "native";
    case XDP_ATTACHED_SKB: return "skb";
    case XDP_ATTACHED_HW: return "hw";
    case XDP_ATTACHED_MULTI: return "multi";
    default: return "none";
  }
}

// What the kernel says is attached to the interface (whoever attached it).
Json XdpOf(int ifindex) {
  Json x = Json::MakeObject();
  LIBBPF_OPTS(bpf_xdp_query_opts, opts);
  if (ifindex <= 0 || bpf_xdp_query(ifindex, 0, &opts) != 0) {
    x["attached"] = false;
    x["prog_id"] = 0;
    x["mode"] = "none";
    return x;
  }
  uint32_t id = opts.prog_id;
  if (id == 0) id = opts.drv_prog_id ? opts.drv_prog_id : opts.skb_prog_id;
  x["attached"] = id != 0;
  x["prog_id"] = id;
  x["mode"] = std::string(XdpModeOf(opts.attach_mode));
  return x;
}

void SumPortStats(io::PortStats& sum, const io::PortStats& s) {
  sum.tx_packets += s.tx_packets;
  sum.tx_bytes += s.tx_bytes;
  sum.rx_packets += s.rx_packets;
  sum.rx_bytes += s.rx_bytes;
  sum.tx_ring_full += s.tx_ring_full;
  sum.tx_unroutable += s.tx_unroutable;
  sum.rx_dropped += s.rx_dropped;
  sum.rx_ring_full += s.rx_ring_full;
  sum.fill_ring_empty += s.fill_ring_empty;
  sum.rx_invalid_descs += s.rx_invalid_descs;
  sum.tx_invalid_descs += s.tx_invalid_descs;
  sum.rx_kernel_dropped += s.rx_kernel_dropped;
  sum.tx_segmented_messages += s.tx_segmented_messages;
}

// The XDP program's counters under their BTF names (struct mr_xdp_counters), prefixed xdp_.
void AddXdpCounters(const io::XdpSteeringCounters& c, Json& out) {
  out["xdp_redirected"] = c.redirected;
  out["xdp_pass_no_socket"] = c.pass_no_socket;
  out["xdp_drop_no_socket"] = c.drop_no_socket;
  out["xdp_drop_truncated"] = c.drop_truncated;
  out["xdp_drop_bad_version"] = c.drop_bad_version;
  out["xdp_pass_not_ip"] = c.pass_not_ip;
  out["xdp_pass_not_udp"] = c.pass_not_udp;
  out["xdp_pass_other_port"] = c.pass_other_port;
  out["xdp_pass_fragment"] = c.pass_fragment;
  out["xdp_pass_malformed"] = c.pass_malformed;
}

void CopyMembers(const Json& from, Json& to, absl::string_view except) {
  for (const auto& [key, value] : from.object()) {
    if (key != except) to[key] = value;
  }
}

}  // namespace

absl::StatusOr<int64_t> ReadLinkSpeedMbps(const std::string& ifname) {
  const std::string path = absl::StrCat("/sys/class/net/", ifname, "/speed");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open ", path));
  }
  char buf[32];
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  // EINVAL here, not at open: the devices without a speed (lo, ifb, some virtual ones).
  if (n < 0) return absl::ErrnoToStatus(err, absl::StrCat("cannot read ", path));
  const absl::string_view text = absl::StripAsciiWhitespace(absl::string_view(buf, n));
  int64_t mbps = 0;
  if (!absl::SimpleAtoi(text, &mbps)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds '", text, "', not a speed in Mb/s"));
  }
  return mbps;
}

PullRate ResolvePullRate(const DaemonSettings& daemon, const LinkSpeedReader& read_speed) {
  if (daemon.pull_rate_gbps) return {*daemon.pull_rate_gbps, "config"};
  int64_t total_mbps = 0;
  std::vector<std::string> parts;
  for (const std::string& ifname : daemon.interfaces) {
    absl::StatusOr<int64_t> mbps = read_speed(ifname);
    if (!mbps.ok()) {
      return {0, absl::StrCat("auto: ", ifname, ": ", mbps.status().message(),
                              ": speed unknown, pulls off")};
    }
    if (*mbps <= 0) {
      return {0, absl::StrCat("auto: ", ifname, " reports speed ", *mbps,
                              " (unknown, e.g. veth or link down): pulls off")};
    }
    total_mbps += *mbps;
    parts.push_back(absl::StrCat(ifname, " ", *mbps, " Mb/s"));
  }
  if (parts.empty()) return {0, "auto: no interfaces: pulls off"};
  return {static_cast<double>(total_mbps) / 1000,
          absl::StrCat("auto: ", absl::StrJoin(parts, " + "))};
}

api::ContextOptions ContextOptionsFrom(const Config& config, const PullRate& pull) {
  api::ContextOptions o;
  const DaemonSettings& d = config.daemon;
  for (size_t p = 0; p < d.interfaces.size(); ++p) {
    api::PlaneOptions plane;
    plane.ifname = d.interfaces[p];
    if (p < d.local_ips.size()) plane.local_ip = d.local_ips[p];
    o.planes.push_back(plane);
  }
  o.port_kind = d.port_kind == PortKindSetting::kUdp ? api::PortKind::kUdp
                                                      : api::PortKind::kAfXdp;
  o.workers = d.workers;
  o.cpus = d.cpus;
  o.udp_port = d.udp_port;
  o.mtu = 0;  // the largest every plane's interface carries
  o.observed_event_depth = ObservedEventDepth(config);
  o.receive_budget_bytes = d.receive_budget_bytes;
  o.pull_rate_gbps = pull.gbps;
  return o;
}

io::PortFeatures FeaturesOfPorts(const std::vector<io::PortFeatures>& ports) {
  io::PortFeatures all{.zero_copy = true, .need_wakeup = true, .busy_poll = true,
                       .multi_buffer = true};
  for (const io::PortFeatures& p : ports) {
    if (!p.af_xdp) continue;
    all.af_xdp = true;
    all.zero_copy &= p.zero_copy;
    all.need_wakeup &= p.need_wakeup;
    all.busy_poll &= p.busy_poll;
    all.multi_buffer &= p.multi_buffer;
  }
  return all.af_xdp ? all : io::PortFeatures{};
}

control::Json FeaturesJson(const io::PortFeatures& f) {
  control::Json j = control::Json::MakeObject();
  j["zero_copy"] = f.zero_copy;
  j["need_wakeup"] = f.need_wakeup;
  j["busy_poll"] = f.busy_poll;
  j["multi_buffer"] = f.multi_buffer;
  return j;
}

PathPolicy PathPolicyFrom(const PathSettings& paths) {
  PathPolicy p;
  p.rotation_holddown = absl::Milliseconds(paths.rotation_holddown_ms);
  p.degraded_hold = absl::Milliseconds(paths.degraded_hold_ms);
  p.rotations_per_second = paths.rotations_per_second;
  p.rotation_burst = paths.rotation_burst;
  return p;
}

AppLimits AppLimitsFrom(const LimitSettings& limits) {
  AppLimits l;
  l.max_connections = limits.max_connections;
  l.max_paths = limits.max_paths;
  l.max_memory_bytes = limits.max_memory_bytes;
  return l;
}

ConnectionLimits ConnectionLimitsFrom(const LimitSettings& limits) {
  ConnectionLimits l;
  l.max_connections = limits.max_connections;
  l.max_paths = limits.max_paths;
  return l;
}

Daemon::Daemon(const ConfigSource& source, Config config, Logger& log, SdNotifier& notifier)
    : source_(source), config_(std::move(config)), log_(log), notifier_(notifier) {}

Daemon::~Daemon() { Stop(); }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const ConfigSource& source, Config config,
                                                      Logger& log, SdNotifier& notifier) {
  std::unique_ptr<Daemon> d(new Daemon(source, std::move(config), log, notifier));
  if (absl::Status s = d->StartParts(); !s.ok()) {
    d->stopped_ = true;  // undo quietly: nothing was announced
    d->metrics_.reset();
    d->server_.reset();
    d->paths_.reset();
    d->apps_.reset();
    if (d->connections_) d->connections_->Stop();
    d->connections_.reset();
    d->context_.reset();
    return s;
  }
  return d;
}

absl::Status Daemon::StartParts() {
  const Config c = config();
  std::vector<std::string> refusals = PreflightRefusals(c, GatherPreflightFacts(c));
  if (!refusals.empty()) return absl::FailedPreconditionError(absl::StrJoin(refusals, "\n"));

  pull_rate_ = ResolvePullRate(c.daemon);
  absl::StatusOr<std::unique_ptr<api::Context>> context =
      api::Context::Create(ContextOptionsFrom(c, pull_rate_));
  if (!context.ok()) return context.status();
  context_ = *std::move(context);
  port_descriptions_.assign(c.daemon.interfaces.size(), {});
  port_features_.assign(c.daemon.interfaces.size(), {});
  std::vector<io::PortFeatures> all;
  for (const engine::WorkerStats& w : context_->Stats()) {
    for (size_t p = 0; p < w.port_descriptions.size() && p < port_descriptions_.size(); ++p) {
      port_descriptions_[p].push_back(w.port_descriptions[p]);
    }
    for (size_t p = 0; p < w.port_features.size() && p < port_features_.size(); ++p) {
      port_features_[p].push_back(w.port_features[p]);
    }
    all.insert(all.end(), w.port_features.begin(), w.port_features.end());
  }
  features_ = FeaturesOfPorts(all);

  const PathPolicy policy = PathPolicyFrom(c.paths);
  ConnectionManagerOptions cm;
  cm.control_port = c.daemon.control_port;
  cm.bind_address = c.daemon.control_bind;
  cm.limits = ConnectionLimitsFrom(c.limits);
  cm.started = started_;
  cm.tuning = policy.Apply(api::HostTuning());
  cm.log = [this](std::string_view line) { log_.Info(absl::string_view(line.data(), line.size())); };
  connections_ = std::make_unique<ConnectionManager>(*context_, std::move(cm));
  if (absl::Status s = connections_->Start(); !s.ok()) return s;
  AppSessionsOptions ao;
  ao.limits = AppLimitsFrom(c.limits);
  ao.tuning = policy.Apply(api::HostTuning());
  ao.started = started_;
  ao.other_connections = [this] { return connections_->size(); };
  ao.log = [this](std::string_view line) {
    log_.Info(absl::string_view(line.data(), line.size()));
  };
  apps_ = std::make_unique<AppSessions>(*context_, std::move(ao));
  paths_ = std::make_unique<PathManager>(*connections_, *apps_, policy, started_);

  ControlServerOptions so;
  so.path = c.daemon.socket;
  so.group = c.daemon.socket_group;
  so.log = &log_;
  server_ = std::make_unique<ControlServer>(std::move(so));
  RegisterHandlers();
  apps_->Serve(*server_);
  if (absl::Status s = server_->Start(); !s.ok()) return s;
  if (!c.daemon.metrics_listen.empty()) {
    MetricsServerOptions mo;
    mo.listen = c.daemon.metrics_listen;
    mo.render = [this] { return RenderMetrics(CollectMetrics()); };
    absl::StatusOr<std::unique_ptr<MetricsServer>> m = MetricsServer::Start(std::move(mo));
    if (!m.ok()) return m.status();
    metrics_ = *std::move(m);
  }

  std::vector<std::string> planes;
  for (size_t p = 0; p < c.daemon.interfaces.size(); ++p) {
    planes.push_back(absl::StrCat(c.daemon.interfaces[p], " ",
                                  context_->datapath()->planes()[p].local_ip.ToString()));
  }
  const Json versions = Versions();
  log_.Info(absl::StrCat(
      "metaroced ", METAROCE_VERSION, " started (pid ", getpid(), "): planes ",
      absl::StrJoin(planes, ", "), "; ports ",
      port_descriptions_.empty() || port_descriptions_[0].empty() ? std::string("?")
                                                                  : port_descriptions_[0][0],
      "; ", absl::StrJoin(context_->datapath()->SteeringDescriptions(), ", "),
      context_->datapath()->SteeringDescriptions().empty() ? "" : "; ", "workers ",
      c.daemon.workers, ", udp port ", c.daemon.udp_port, ", control port ",
      connections_->control_port(), ", socket ", c.daemon.socket, ", config ",
      c.path.empty() ? "none (defaults and flags)" : c.path, "; kernel ",
      std::string(*versions.Find("kernel")->AsString()), ", libbpf ", std::string(*versions.Find("libbpf")->AsString()),
      ", libxdp ", std::string(*versions.Find("libxdp")->AsString()), ", liburing ",
      std::string(*versions.Find("liburing")->AsString())));
  if (pull_rate_.gbps > 0) {
    log_.Info(absl::StrCat("pull pacer at ", pull_rate_.gbps, " Gb/s (", pull_rate_.source,
                           "), ", pull_rate_.gbps / std::max(c.daemon.workers, 1),
                           " Gb/s per worker"));
  } else if (c.daemon.pull_rate_gbps) {
    log_.Info("pull pacer off (pull_rate_gbps = 0)");
  } else {
    // The incasts the pacer holds at the links' rate run into the host's queues instead.
    log_.Warning(absl::StrCat("pull_rate_gbps ", pull_rate_.source,
                              "; set it in [daemon] to the host's receive rate (Gb/s, every "
                              "interface together) to pace many senders"));
  }
  if (metrics_ != nullptr) {
    absl::StatusOr<ListenAddress> a = ParseListenAddress(c.daemon.metrics_listen);
    log_.Info(absl::StrCat("metrics at http://", metrics_->address(), "/metrics"));
    if (a.ok() && !IsLoopback(*a)) {
      log_.Warning(absl::StrCat("metrics_listen ", c.daemon.metrics_listen,
                                " is not a loopback address: whoever reaches it reads every "
                                "connection's peer and counters (no authentication)"));
    }
  }
  if (absl::Status s = notifier_.Ready(StatusLine()); !s.ok()) {
    log_.Warning(absl::StrCat("cannot notify systemd: ", s.message()));
  }
  return absl::OkStatus();
}

void Daemon::RegisterHandlers() {
  using Params = const Json&;
  using Client = const ClientInfo&;
  server_->Register("daemon.show", [this](Params p, Client) { return ShowDaemon(p); });
  server_->Register("link.show", [this](Params p, Client) { return ShowLinks(p); });
  server_->Register("stat.show", [this](Params p, Client) { return ShowStats(p); });
  // conn.add waits for the peer daemon (up to exchange_timeout): on a thread of its own, so that
  // every other request is answered meanwhile.
  server_->Register(
      "conn.add", [this](Params p, Client) { return connections_->Add(p); }, HandlerThread::kOwn);
  server_->Register("conn.del", [this](Params p, Client) { return DeleteConnection(p); });
  server_->Register("conn.show", [this](Params p, Client) { return ShowConnections(p); });
  server_->Register("path.show", [this](Params p, Client) { return paths_->Show(p); });
  server_->Register("path.rotate", [this](Params p, Client) { return paths_->Rotate(p); });
  server_->Register("path.events", [this](Params p, Client) { return paths_->Events(p); });
}

Config Daemon::config() const {
  absl::MutexLock lock(&config_mu_);
  return config_;
}

std::string Daemon::StatusLine() {
  const Config c = config();
  std::string mode = std::string(PortKindSettingName(c.daemon.port_kind));
  if (c.daemon.port_kind == PortKindSetting::kAfXdp) {
    absl::StrAppend(&mode, features_.zero_copy ? " zero-copy" : " copy-mode");
  }
  return absl::StrCat("serving ", absl::StrJoin(c.daemon.interfaces, ","), " (", mode,
                      "), ", connections_ ? connections_->size() : 0, " connection(s)");
}

void Daemon::Run(int signal_fd) {
  pollfd p{signal_fd, POLLIN, 0};
  while (true) {
    const int n = poll(&p, 1, kTickMs);
    if (n > 0 && (p.revents & POLLIN)) {
      signalfd_siginfo si{};
      if (read(signal_fd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        if (si.ssi_signo == SIGHUP) {
          Reload();
        } else {
          const char* name = sigabbrev_np(static_cast<int>(si.ssi_signo));
          log_.Info(absl::StrCat("SIG", name != nullptr ? name : "?", " from pid ", si.ssi_pid,
                                 ": stopping"));
          return;
        }
      }
    }
    paths_->Tick();
    CheckObservedEventDepth();
  }
}

void Daemon::CheckObservedEventDepth() {
  const absl::Time now = absl::Now();
  if (now < next_depth_check_) return;
  next_depth_check_ = now + absl::Seconds(1);
  const uint64_t paths = connections_->paths_held() + apps_->paths_held();
  const uint32_t needed = ObservedEventDepthForPaths(paths);
  const uint32_t depth = context_->options().observed_event_depth;
  if (needed <= depth) {
    depth_short_ = false;
    return;
  }
  if (depth_short_) return;
  depth_short_ = true;
  log_.Warning(absl::StrCat(
      "the connections hold ", paths, " paths, whose state changes in a fabric failure (",
      kAutoEventsPerPath, " each) need observer rings of ", needed, " events; they hold ", depth,
      " a worker (observed_event_depth, sized at start for max_connections x ",
      kAutoPathsPerConnection, " paths): path.events may lose events of such a burst "
      "(metaroce_worker_observed_events_dropped_total). Set observed_event_depth = ", needed,
      " in [daemon] and restart"));
}

void Daemon::Reload() {
  notifier_.Reloading().IgnoreError();
  log_.Info(absl::StrCat("SIGHUP: reloading ", source_.path,
                         source_.path_required ? "" : " (if present)", " and the flags"));
  const LoadedConfig next = LoadConfig(source_);
  if (!next.ok()) {
    for (const std::string& e : next.errors) log_.Error(absl::StrCat("reload: ", e));
    log_.Error(absl::StrCat("reload refused: ", next.errors.size(),
                            " error(s); the running configuration is kept"));
    notifier_.Ready(StatusLine()).IgnoreError();
    return;
  }
  size_t applied = 0, ignored = 0;
  for (const ConfigChange& change : DiffConfig(config(), next.config)) {
    if (change.reloadable) {
      ++applied;
      log_.Info(absl::StrCat("reload: ", change.key, " ", change.from, " -> ", change.to));
    } else {
      ++ignored;
      log_.Warning(absl::StrCat(change.key, " changed (", change.from, " -> ", change.to,
                                "): restart metaroced to apply"));
    }
  }
  const Config merged = ApplyReloadable(config(), next.config);
  {
    absl::MutexLock lock(&config_mu_);  // handlers read it on the control server's thread
    config_ = merged;
  }
  log_.set_format(merged.daemon.log_format);
  connections_->SetLimits(ConnectionLimitsFrom(merged.limits));
  const PathPolicy policy = PathPolicyFrom(merged.paths);
  connections_->SetTuning(policy.Apply(api::HostTuning()));
  apps_->SetLimits(AppLimitsFrom(merged.limits));
  apps_->SetTuning(policy.Apply(api::HostTuning()));
  paths_->SetPolicy(policy);
  log_.Info(absl::StrCat("reloaded ", merged.path.empty() ? "(no config file)" : merged.path,
                         ": ", applied, " change(s) applied, ", ignored,
                         " need a restart; connections kept"));
  notifier_.Ready(StatusLine()).IgnoreError();
}

void Daemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  notifier_.Stopping().IgnoreError();
  metrics_.reset();  // its renders read everything below
  if (server_) server_->Stop();  // the socket file goes first: no new requests
  if (apps_) apps_->CloseAll();  // Stop() closed every session already; nothing is left
  if (connections_) connections_->Stop();
  paths_.reset();
  apps_.reset();
  connections_.reset();
  server_.reset();
  context_.reset();  // detaches the XDP programs, closes the AF_XDP sockets
  log_.Info("metaroced stopped");
}

absl::StatusOr<std::vector<int>> Daemon::SelectPlanes(const Json& params) {
  absl::StatusOr<std::string> name = params.GetStringOr("name", "");
  if (!name.ok()) return name.status();
  std::vector<int> planes;
  const std::vector<std::string> ifs = config().daemon.interfaces;
  for (size_t p = 0; p < ifs.size(); ++p) {
    if (name->empty() || ifs[p] == *name) planes.push_back(static_cast<int>(p));
  }
  if (planes.empty()) {
    return absl::NotFoundError(absl::StrCat("no link '", *name, "': metaroced serves ",
                                            absl::StrJoin(ifs, ", ")));
  }
  return planes;
}

absl::StatusOr<Json> Daemon::ShowDaemon(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {}); !s.ok()) return s;
  const Config c = config();
  Json j = Json::MakeObject();
  j["metaroced_version"] = METAROCE_VERSION;
  j["protocol"] = control::kProtocolVersion;
  j["pid"] = static_cast<int64_t>(getpid());
  j["uptime_s"] = absl::ToDoubleSeconds(absl::Now() - started_);
  j["heap_in_use_bytes"] = HeapInUseBytes();
  j["config_path"] = c.path;
  j["port_kind"] = std::string(PortKindSettingName(c.daemon.port_kind));
  j["udp_port"] = c.daemon.udp_port;
  j["control_port"] = connections_->control_port();
  j["workers"] = c.daemon.workers;
  j["observed_event_depth"] = context_->options().observed_event_depth;
  const uint64_t paths = connections_->paths_held() + apps_->paths_held();
  j["paths_held"] = paths;
  j["observed_event_depth_needed"] = ObservedEventDepthForPaths(paths);
  j["receive_budget_bytes"] = context_->options().receive_budget_bytes;
  j["pull_rate_gbps"] = context_->options().pull_rate_gbps;
  j["pull_rate_source"] = pull_rate_.source;
  j["versions"] = Versions();
  j["features"] = FeaturesJson(features_);
  Json& l = j["limits"] = Json::MakeObject();
  l["max_connections"] = c.limits.max_connections;
  l["max_paths"] = c.limits.max_paths;
  l["max_memory_bytes"] = c.limits.max_memory_bytes;
  j["connections"] = connections_->size();
  j["applications"] = apps_->Summary();
  return j;
}

MetricsSnapshot Daemon::CollectMetrics() {
  const Config c = config();
  MetricsSnapshot m;
  const Json versions = Versions();
  auto version = [&](std::string_view key) {
    const Json* v = versions.Find(key);
    std::optional<std::string_view> s = v != nullptr ? v->AsString() : std::nullopt;
    return s ? std::string(*s) : std::string();
  };
  m.build = {METAROCE_VERSION, version("kernel"), version("libbpf"), version("libxdp"),
             version("liburing")};
  m.port_kind = std::string(PortKindSettingName(c.daemon.port_kind));
  m.first_queue = context_->options().first_queue;
  m.start_time_seconds = absl::ToDoubleSeconds(started_ - absl::UnixEpoch());
  m.uptime_seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  m.heap_in_use_bytes = HeapInUseBytes();
  m.app_sessions = apps_->sessions();
  m.app_memory_bytes = apps_->memory_bytes();

  // Links: link.show's XDP attachment, stat.show's XDP program counters.
  const auto steering = context_->datapath()->SteeringCounters();
  for (size_t p = 0; p < c.daemon.interfaces.size(); ++p) {
    LinkMetrics l;
    l.interface = c.daemon.interfaces[p];
    l.plane = static_cast<int>(p);
    l.address = context_->datapath()->planes()[p].local_ip.ToString();
    absl::StatusOr<io::InterfaceInfo> info = io::ReadInterfaceInfo(l.interface);
    const Json xdp = XdpOf(info.ok() ? static_cast<int>(info->index) : 0);
    l.xdp_prog_id = static_cast<uint32_t>(xdp.Find("prog_id")->AsUint().value_or(0));
    l.xdp_mode = std::string(xdp.Find("mode")->AsString().value_or("none"));
    for (const auto& [name, counters] : steering) {
      if (name != l.interface) continue;
      Json named = Json::MakeObject();
      AddXdpCounters(counters, named);
      for (const auto& [key, value] : named.object()) {
        l.xdp_packets.emplace_back(key.substr(key.find('_') + 1), value.AsUint().value_or(0));
      }
    }
    m.links.push_back(std::move(l));
  }
  m.workers = context_->Stats();

  // The daemon's connections: ids and descriptions under the table's lock, snapshots outside it
  // (each is a round trip to the owner worker; a connection deleted meanwhile is left out).
  std::vector<ConnectionMetrics> own;
  connections_->ForEach([&](ManagedConnection& mc) {
    ConnectionMetrics cm;
    cm.id = mc.id;
    cm.peer = mc.peer;
    cm.profile = mc.profile;
    own.push_back(std::move(cm));
  });
  for (ConnectionMetrics& cm : own) {
    absl::StatusOr<api::ConnectionStats> st = context_->engine().Snapshot(cm.id);
    if (!st.ok()) continue;
    cm.stats = *std::move(st);
    m.connections.push_back(std::move(cm));
  }
  // Applications' connections: described as conn.show describes them, snapshot as path.show.
  for (const Json& d : apps_->Describe(std::nullopt, "")) {
    ConnectionMetrics cm;
    cm.application = true;
    cm.id = static_cast<uint32_t>(d.Find("id")->AsUint().value_or(0));
    cm.peer = std::string(d.Find("peer")->AsString().value_or(""));
    cm.profile = std::string(d.Find("profile")->AsString().value_or(""));
    if (const Json* owner = d.Find("owner"); owner != nullptr && owner->is_object()) {
      if (const Json* n = owner->Find("name")) cm.application_name = std::string(n->AsString().value_or(""));
      if (const Json* p = owner->Find("pid")) cm.application_pid = p->AsInt().value_or(0);
    }
    absl::StatusOr<api::ConnectionStats> st = apps_->Snapshot(cm.id);
    if (!st.ok()) continue;
    cm.stats = *std::move(st);
    m.connections.push_back(std::move(cm));
  }
  return m;
}

absl::StatusOr<Json> Daemon::ShowConnections(const Json& params) {
  // The daemon's connections and the applications' share the engine's ids: one listing in id
  // order, by pages (listing.h).
  return ShowConnectionPage(
      params,
      [this](std::string_view peer) {
        std::vector<uint32_t> own = connections_->Ids(peer);
        std::vector<uint32_t> apps = apps_->Ids(peer);
        std::vector<uint32_t> all(own.size() + apps.size());
        std::merge(own.begin(), own.end(), apps.begin(), apps.end(), all.begin());
        return all;
      },
      [this](uint32_t id) {
        std::optional<Json> d = connections_->Describe(id);
        return d ? d : apps_->Describe(id);
      });
}

absl::StatusOr<Json> Daemon::DeleteConnection(const Json& params) {
  const Json* v = params.Find("id");
  const std::optional<uint64_t> id = v != nullptr ? v->AsUint() : std::nullopt;
  if (id && *id <= UINT32_MAX && apps_->HasConnection(static_cast<uint32_t>(*id))) {
    if (absl::Status s = OnlyKeys(params, {"id"}); !s.ok()) return s;
    if (absl::Status s = apps_->DeleteByOperator(static_cast<uint32_t>(*id)); !s.ok()) return s;
    return Json::MakeObject();
  }
  return connections_->Delete(params);  // validates; NotFound for an id that is no one's
}

absl::StatusOr<Json> Daemon::ShowLinks(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"name"}); !s.ok()) return s;
  absl::StatusOr<std::vector<int>> planes = SelectPlanes(params);
  if (!planes.ok()) return planes.status();
  const Config c = config();
  const bool af_xdp = c.daemon.port_kind == PortKindSetting::kAfXdp;
  Json out = Json::MakeObject();
  Json& links = out["links"] = Json::MakeArray();
  for (int p : *planes) {
    const api::PlaneInfo& pi = context_->datapath()->planes()[p];
    absl::StatusOr<io::InterfaceInfo> info = io::ReadInterfaceInfo(pi.ifname);
    Json l = Json::MakeObject();
    l["name"] = pi.ifname;
    l["ifindex"] = info.ok() ? info->index : 0u;
    l["plane"] = p;
    l["address"] = pi.local_ip.ToString();
    l["mac"] = info.ok() ? info->mac.ToString() : std::string();
    l["mtu"] = info.ok() ? info->mtu : pi.if_mtu;
    const std::vector<std::string>& ports = port_descriptions_[p];
    l["port"] = ports.empty() ? std::string() : ports.front();
    Json& all = l["ports"] = Json::MakeArray();  // one per worker
    for (const std::string& d : ports) all.Push(d);
    l["features"] = FeaturesJson(FeaturesOfPorts(port_features_[p]));  // this plane's ports
    l["xdp"] = XdpOf(info.ok() ? static_cast<int>(info->index) : 0);
    Json& queues = l["queues"] = Json::MakeArray();
    if (af_xdp) {
      const uint32_t first = context_->options().first_queue;
      for (int w = 0; w < c.daemon.workers; ++w) queues.Push(first + w);
    }
    links.Push(std::move(l));
  }
  return out;
}

absl::StatusOr<Json> Daemon::ShowStats(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"name"}); !s.ok()) return s;
  absl::StatusOr<std::vector<int>> planes = SelectPlanes(params);
  if (!planes.ok()) return planes.status();
  const Config c = config();
  const std::vector<engine::WorkerStats> workers = context_->Stats();
  const auto steering = context_->datapath()->SteeringCounters();
  // Connection counters over every connection on the host now: the daemon's and the
  // applications'.
  Json conn_sum = api::CountersJson(core::ConnectionCounters{});
  connections_->ForEach([&](ManagedConnection& mc) {
    if (mc.conn == nullptr) return;
    absl::StatusOr<api::ConnectionStats> s = mc.conn->Stats();
    if (s.ok()) api::AddCounters(s->counters, conn_sum);
  });
  apps_->AddCounters(conn_sum);
  Json out = Json::MakeObject();
  Json& links = out["links"] = Json::MakeArray();
  for (int p : *planes) {
    const std::string& ifname = c.daemon.interfaces[p];
    io::PortStats sum;
    for (const engine::WorkerStats& w : workers) {
      if (static_cast<size_t>(p) < w.ports.size()) SumPortStats(sum, w.ports[p]);
    }
    Json l = Json::MakeObject();
    l["name"] = ifname;
    CopyMembers(api::PortStatsJson(sum, ""), l, "description");
    for (const auto& [name, counters] : steering) {
      if (name == ifname) AddXdpCounters(counters, l);
    }
    CopyMembers(conn_sum, l, "");
    links.Push(std::move(l));
  }
  return out;
}

}  // namespace metaroce::daemon
