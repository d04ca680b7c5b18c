// metaroced's configuration: an INI file (/etc/metaroce/metaroced.conf by default) with command-
// line overrides, and what a reload (SIGHUP) changes.
//
//   [daemon]  interfaces, local_ips, port_kind, udp_port, control_port, control_bind, socket,
//             socket_group, workers, cpus, log_format, metrics_listen, observed_event_depth,
//             receive_budget_bytes, pull_rate_gbps
//   [limits]  max_connections, max_paths, max_memory
//   [paths]   rotation_holddown_ms, degraded_hold_ms, rotations_per_second, rotation_burst
//
// Every key, its default and whether a reload applies it: daemon/metaroced.conf and
// daemon/README.md. Syntax: `key = value` lines under `[section]` headers; `#` and `;` start a
// comment at the start of a line or after whitespace; blank lines are ignored; a value may be
// wrapped in double quotes. Unknown sections and keys, repeated keys and bad values are errors.
//
// Loading never stops at the first error: LoadConfig returns every error, each one line naming
// where it is ("FILE:LINE: KEY: what is wrong" or "--flag: ..."), so that --check-config can
// print them all. A file with any error is refused as a whole (a reload keeps the running
// configuration).
//
// Reload: DiffConfig lists the keys whose values differ; limits, paths and log_format are
// reloadable (ApplyReloadable takes them), the other keys need a restart.
//
// Threading: plain values and pure functions (LoadConfig reads the file and the group database).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace metaroce::daemon {

inline constexpr absl::string_view kDefaultConfigPath = "/etc/metaroce/metaroced.conf";

enum class PortKindSetting : uint8_t { kAfXdp, kUdp };
enum class LogFormat : uint8_t { kText, kJson };
absl::string_view PortKindSettingName(PortKindSetting kind);  // "af_xdp", "udp"
absl::string_view LogFormatName(LogFormat format);            // "text", "json"

// [daemon]: what the daemon runs on. Only log_format is reloadable.
struct DaemonSettings {
  std::vector<std::string> interfaces;  // one per plane; required
  std::vector<std::string> local_ips;   // empty, or one per interface
  PortKindSetting port_kind = PortKindSetting::kAfXdp;
  uint16_t udp_port = 4792;
  uint16_t control_port = 4793;         // 0: any free port (daemon.show reports it)
  std::string control_bind = "::";  // every address, IPv4 and IPv6
  std::string socket = "/run/metaroce/metaroced.sock";
  std::string socket_group;             // empty: root and the daemon's uid only
  int workers = 1;
  std::vector<int> cpus;                // worker i on cpus[i % size]; empty: not pinned
  LogFormat log_format = LogFormat::kText;
  // Prometheus metrics over HTTP (daemon/metrics_server.h): "IP:PORT" or "[IPv6]:PORT"; empty:
  // off (the default; `off` in the file means the same).
  std::string metrics_listen;
  // Path events each worker's observer ring holds between two path manager ticks
  // (api::ContextOptions::observed_event_depth); 0: `auto`, ObservedEventDepth() below.
  uint32_t observed_event_depth = 0;
  // The host's receive budget (api::ContextOptions::receive_budget_bytes): bytes in flight
  // toward this host its requesters share as window hints (docs/spec/congestion.md §5.2); 0: off.
  uint64_t receive_budget_bytes = 1u << 20;
  // The host's receive rate for its pull pacer (api::ContextOptions::pull_rate_gbps), Gb/s;
  // 0: no pulls. Unset: `auto`, the speed of the interfaces served, read when the daemon starts
  // (daemon.h, ResolvePullRate): the host's rate is its links', which the kernel knows and an
  // administrator should not have to repeat.
  std::optional<double> pull_rate_gbps;
};

// [limits]: reloadable.
struct LimitSettings {
  uint32_t max_connections = 4096;
  uint16_t max_paths = 256;
  uint64_t max_memory_bytes = uint64_t{1} << 30;
};

// [paths]: the path manager's policy; reloadable (new connections take it).
struct PathSettings {
  uint32_t rotation_holddown_ms = 5;
  uint32_t degraded_hold_ms = 50;
  double rotations_per_second = 50;
  uint32_t rotation_burst = 8;
};

struct Config {
  std::string path;  // the file read; empty when none was (the default file is missing)
  DaemonSettings daemon;
  LimitSettings limits;
  PathSettings paths;
};

// The observer ring's depth `auto` gives (and the ring's bounds): every path of max_connections
// connections of kAutoPathsPerConnection paths (conn.add's default) changing kAutoEventsPerPath
// times within one tick, rounded up to a power of two, within [kMinAutoObservedEventDepth,
// kMaxObservedEventDepth]. Why that much: the daemon's own connections' path events reach it
// through these rings only (the path manager drains them every 5 ms, daemon.h), and a fabric
// failure is a burst: a spine that fails under 4,000 connections of 8 paths moves every path
// behind it at once, and a failing path says 3 things in the same instant (failed, the port
// rotated, probing; suspect shortly before), then active again after its probe. With the old
// fixed 1,024 such a burst lost most of its record (observed_events_dropped). A ring is 24 bytes
// an event, allocated and touched at start: 3 MiB a worker for the default 4,096 connections.
// Simpler than draining more often when a ring fills (the worker would have to wake the path
// manager, which runs on the daemon's main thread), and sound as long as one tick's events fit.
// Taken from max_connections at start: a reload that raises max_connections does not resize
// the rings (observed_event_depth needs a restart).
inline constexpr uint32_t kAutoPathsPerConnection = 8;
inline constexpr uint32_t kAutoEventsPerPath = 4;
inline constexpr uint32_t kMinAutoObservedEventDepth = 1024;
inline constexpr uint32_t kMaxObservedEventDepth = uint32_t{1} << 24;
// pull_rate_gbps's bounds, other than 0 (off): 10 Mb/s to 100 Tb/s, every plane together. A
// rate far below the links' would starve the requesters it clocks.
inline constexpr double kMinPullRateGbps = 0.01;
inline constexpr double kMaxPullRateGbps = 100000;
// The depth the daemon asks for: observed_event_depth, or `auto`'s.
uint32_t ObservedEventDepth(const Config& config);
// The depth that `paths` paths held on the host need by the same rule (kAutoEventsPerPath each,
// a power of two within the bounds). `auto` takes it for max_connections x
// kAutoPathsPerConnection, since the rings are sized at start, before any connection says its
// path count; the daemon then compares it with the paths really held (daemon.show
// observed_event_depth_needed, and a warning naming the setting when the rings fall short).
uint32_t ObservedEventDepthForPaths(uint64_t paths);

// One command-line flag that sets a config key, e.g. {"--workers", "workers", "2"}.
struct ConfigOverride {
  std::string flag;
  std::string key;
  std::string value;
};

struct ConfigSource {
  std::string path = std::string(kDefaultConfigPath);
  bool path_required = false;  // --config given: a missing file is an error
  std::vector<ConfigOverride> overrides;  // applied after the file, in order
};

struct LoadedConfig {
  Config config;
  std::vector<std::string> errors;  // one line each; empty: config is valid
  bool ok() const { return errors.empty(); }
};

// Reads the file (when present), applies the overrides, then checks the whole (interfaces given,
// one local IP per interface). `source.path` names the file in messages as given.
LoadedConfig LoadConfig(const ConfigSource& source);
// The same over text already read (`origin` is the file name used in messages).
LoadedConfig ParseConfigText(absl::string_view text, absl::string_view origin,
                             const std::vector<ConfigOverride>& overrides = {});

// A key whose value differs between two configs.
struct ConfigChange {
  std::string key;   // e.g. "interfaces", "max_connections"
  std::string from;  // values as written in the file (lists comma-separated)
  std::string to;
  bool reloadable = false;
};
std::vector<ConfigChange> DiffConfig(const Config& running, const Config& next);
// `running` with the reloadable keys of `next` (and next's path).
Config ApplyReloadable(const Config& running, const Config& next);

// A listening address "IP:PORT" or "[IPv6]:PORT": the IP literal (no brackets) and the port.
// InvalidArgument naming what is wrong; the port must be in 1..65535 unless `allow_port_zero`.
struct ListenAddress {
  std::string ip;
  uint16_t port = 0;
  bool v6 = false;
};
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text,
                                                 bool allow_port_zero = false);
// True for 127.0.0.0/8 and ::1.
bool IsLoopback(const ListenAddress& address);

// Every key with its section, default value, and whether a reload applies it (documentation and
// tests).
struct ConfigKeyInfo {
  absl::string_view section;
  absl::string_view key;
  bool reloadable;
};
std::vector<ConfigKeyInfo> ConfigKeys();
// The value of `key` in `config`, formatted as in the file; empty for an unknown key.
std::string FormatConfigValue(const Config& config, absl::string_view key);

}  // namespace metaroce::daemon
