#include "tools/perf/options.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/control/protocol.h"
#include "tools/common/byte_size.h"

namespace metaroce::perf {
namespace {

constexpr std::pair<std::string_view, TestKind> kTests[] = {
    {"write_bw", TestKind::kWriteBw}, {"write_lat", TestKind::kWriteLat},
    {"send_bw", TestKind::kSendBw},   {"send_lat", TestKind::kSendLat},
    {"raw_bw", TestKind::kRawBw},     {"raw_lat", TestKind::kRawLat},
    {"udp_bw", TestKind::kUdpBw},     {"udp_lat", TestKind::kUdpLat},
};

absl::Status Bad(std::string_view flag, std::string_view value, std::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(flag), " ", std::string(value), ": expected ", std::string(want)));
}

// Unsigned integer with an optional K/M/G (x1024) suffix.
absl::StatusOr<uint64_t> ParseSize(std::string_view flag, std::string_view text) {
  const std::optional<uint64_t> v = tools::ParseByteSize(text);
  if (!v) return Bad(flag, text, "a non-negative integer (K/M/G suffix allowed)");
  return *v;
}

absl::StatusOr<int64_t> ParseInt(std::string_view flag, std::string_view text, int64_t lo,
                                 int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v) || v < lo || v > hi) {
    return Bad(flag, text, absl::StrCat("an integer in ", lo, "..", hi));
  }
  return v;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                                               absl::SkipEmpty())) {
    out.emplace_back(part);
  }
  return out;
}

}  // namespace

std::string_view TestName(TestKind kind) {
  for (const auto& [name, k] : kTests) {
    if (k == kind) return name;
  }
  return "?";
}

bool IsLatency(TestKind k) {
  return k == TestKind::kWriteLat || k == TestKind::kSendLat || k == TestKind::kRawLat ||
         k == TestKind::kUdpLat;
}

bool IsStack(TestKind k) {
  return k == TestKind::kWriteBw || k == TestKind::kWriteLat || k == TestKind::kSendBw ||
         k == TestKind::kSendLat;
}

std::string_view PortKindName(PortKindFlag kind) {
  switch (kind) {
    case PortKindFlag::kXdp: return "xdp";
    case PortKindFlag::kUdp: return "udp";
    case PortKindFlag::kMemory: return "memory";
  }
  return "?";
}

std::string_view TransportName(Transport t) {
  switch (t) {
    case Transport::kMetaRoce: return "metaroce";
    case Transport::kGoBackN: return "gbn";
    case Transport::kReorder: return "reorder";
  }
  return "?";
}

std::vector<uint64_t> PerfOptions::Sizes() const {
  if (!all_sizes) return {size};
  std::vector<uint64_t> out;
  for (uint64_t s = 2; s <= (uint64_t{1} << 23); s *= 2) out.push_back(s);
  return out;
}

std::string Usage() {
  return R"(usage: mrperf TEST [flags] [SERVER]
  TEST    write_bw write_lat send_bw send_lat   through the MetaRoCE stack
          raw_bw raw_lat                        same frames, same ports, no protocol (ceiling)
          udp_bw udp_lat                        kernel UDP sockets, sendmmsg/recvmmsg (baseline)
  SERVER  the server's address (client); none: run as the server
perftest flags:
  -s, --size SIZE        message size (bw 65536, lat 2; K/M/G suffixes)
  -n, --iters N          iterations (bw 5000, lat 1000)
  -a, --all              all sizes 2..2^23
  -D, --duration SEC     run for SEC seconds instead of -n iterations
  -q, --qp NUM           connections (queue pairs), spread over the workers
  -p, --port PORT        TCP control port (18515)
  -t, --tx-depth N       sends outstanding per connection (128)
  -r, --rx-depth N       receives posted per connection (512)
      --report_gbits     Gb/sec instead of MiB/sec
      --out_json FILE    write the JSON result document to FILE
      --json             print the JSON result document on stdout (after the table)
datapath flags:
      --interface IF[,IF...]   one interface per plane
      --local-ip IP[,IP...]    this host's address per plane (default: the interface's)
      --planes P               planes (default: one per interface; memory ports: 1)
      --paths N                logical paths per connection (8; gbn 1)
      --transport metaroce|gbn|reorder
      --port-kind xdp|udp|memory   AF_XDP, kernel UDP (sendmmsg/recvmmsg), in-process pair
      --workers N              engine worker threads (AF_XDP queue = worker index); 0: no
                               engine thread, the app thread drives the engine (inline;
                               default of the stack tests; raw/udp: 1)
      --mtu BYTES              payload bytes per packet (default: from the interface MTU)
      --verify                 check the data pattern of every message at the receiver
      --spin                   engine workers busy-poll instead of sleeping when idle
      --cpus LIST              pin engine worker i to the i-th CPU of LIST
      --udp-port PORT          MetaRoCE UDP port (4792)
engine (stack tests):
      --daemon                 through metaroced (attached: no privileges; the datapath flags
                               above are the daemon's business)
      --embedded               an engine of mrperf's own (root), even when a daemon runs
      --daemon-socket PATH     metaroced's control socket ($METAROCE_SOCKET, else
                               /run/metaroce/metaroced.sock); default: through the daemon when
                               one answers there, embedded otherwise
      --timeout SEC            set-up and end-of-test exchange timeout (10)
)";
}

absl::StatusOr<PerfOptions> ParseCommandLine(int argc, char** argv) {
  if (argc < 2) return absl::InvalidArgumentError("missing TEST (mrperf --help)");
  PerfOptions o;
  std::string_view test = argv[1];
  bool found = false;
  for (const auto& [name, k] : kTests) {
    if (name == test) {
      o.test = k;
      found = true;
    }
  }
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown test '", std::string(test),
        "': expected write_bw, write_lat, send_bw, send_lat, raw_bw, raw_lat, udp_bw or udp_lat"));
  }
  bool size_set = false, paths_set = false;
  using Setter = std::function<absl::Status(std::string_view)>;
  struct Flag {
    bool takes_value;
    Setter set;
  };
  auto u64 = [](std::string_view flag, uint64_t* out, uint64_t lo, uint64_t hi) {
    return [=](std::string_view v) -> absl::Status {
      absl::StatusOr<uint64_t> n = ParseSize(flag, v);
      if (!n.ok()) return n.status();
      if (*n < lo || *n > hi) return Bad(flag, v, absl::StrCat("a value in ", lo, "..", hi));
      *out = *n;
      return absl::OkStatus();
    };
  };
  auto integer = [](std::string_view flag, auto* out, int64_t lo, int64_t hi) {
    return [=](std::string_view v) -> absl::Status {
      absl::StatusOr<int64_t> n = ParseInt(flag, v, lo, hi);
      if (!n.ok()) return n.status();
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(*n);
      return absl::OkStatus();
    };
  };
  auto seconds = [](std::string_view flag, double* out, double lo) {
    return [=](std::string_view v) -> absl::Status {
      double d = 0;
      if (!absl::SimpleAtod(absl::string_view(v.data(), v.size()), &d) || !std::isfinite(d) ||
          d < lo || d > 86400) {
        return Bad(flag, v, absl::StrCat("seconds in ", lo, "..86400"));
      }
      *out = d;
      return absl::OkStatus();
    };
  };
  uint64_t size = 0;
  std::map<std::string, Flag, std::less<>> flags;
  auto size_setter = u64("-s", &size, 1, uint64_t{1} << 30);
  flags["-s"] = flags["--size"] = {true, [&](std::string_view v) {
    size_set = true;
    return size_setter(v);
  }};
  flags["-n"] = flags["--iters"] = {true, u64("-n", &o.iterations, 1, uint64_t{1} << 40)};
  flags["-a"] = flags["--all"] = {false, [&](std::string_view) {
    o.all_sizes = true;
    return absl::OkStatus();
  }};
  flags["-D"] = flags["--duration"] = {true, seconds("-D", &o.duration_s, 0.1)};
  flags["-q"] = flags["--qp"] = {true, integer("-q", &o.qps, 1, 1024)};
  flags["-p"] = flags["--port"] = {true, integer("-p", &o.port, 1, 65535)};
  flags["-t"] = flags["--tx-depth"] = {true, integer("-t", &o.tx_depth, 1, 16384)};
  flags["-r"] = flags["--rx-depth"] = {true, integer("-r", &o.rx_depth, 1, 16384)};
  flags["--report_gbits"] = {false, [&](std::string_view) {
    o.report_gbits = true;
    return absl::OkStatus();
  }};
  flags["--out_json"] = {true, [&](std::string_view v) {
    o.out_json = std::string(v);
    return absl::OkStatus();
  }};
  flags["--json"] = {false, [&](std::string_view) {
    o.json_stdout = true;
    return absl::OkStatus();
  }};
  flags["--interface"] = {true, [&](std::string_view v) {
    o.interfaces = SplitList(v);
    return o.interfaces.empty() ? Bad("--interface", v, "IF[,IF...]") : absl::OkStatus();
  }};
  flags["--local-ip"] = {true, [&](std::string_view v) {
    o.local_ips = SplitList(v);
    return o.local_ips.empty() ? Bad("--local-ip", v, "IP[,IP...]") : absl::OkStatus();
  }};
  flags["--planes"] = {true, integer("--planes", &o.planes, 1, 16)};
  auto paths_setter = integer("--paths", &o.paths, 1, 256);
  flags["--paths"] = {true, [&](std::string_view v) {
    paths_set = true;
    return paths_setter(v);
  }};
  flags["--transport"] = {true, [&](std::string_view v) -> absl::Status {
    if (v == "metaroce") o.transport = Transport::kMetaRoce;
    else if (v == "gbn") o.transport = Transport::kGoBackN;
    else if (v == "reorder") o.transport = Transport::kReorder;
    else return Bad("--transport", v, "metaroce, gbn or reorder");
    return absl::OkStatus();
  }};
  flags["--port-kind"] = {true, [&](std::string_view v) -> absl::Status {
    if (v == "xdp") o.port_kind = PortKindFlag::kXdp;
    else if (v == "udp") o.port_kind = PortKindFlag::kUdp;
    else if (v == "memory") o.port_kind = PortKindFlag::kMemory;
    else return Bad("--port-kind", v, "xdp, udp or memory");
    return absl::OkStatus();
  }};
  bool workers_set = false;
  auto workers_setter = integer("--workers", &o.workers, 0, 64);
  flags["--workers"] = {true, [&](std::string_view v) {
    workers_set = true;
    return workers_setter(v);
  }};
  flags["--mtu"] = {true, integer("--mtu", &o.mtu, 64, 9000)};
  flags["--verify"] = {false, [&](std::string_view) {
    o.verify = true;
    return absl::OkStatus();
  }};
  flags["--spin"] = {false, [&](std::string_view) {
    o.spin = true;
    return absl::OkStatus();
  }};
  flags["--cpus"] = {true, [&](std::string_view v) -> absl::Status {
    o.cpus.clear();
    for (const std::string& c : SplitList(v)) {
      absl::StatusOr<int64_t> n = ParseInt("--cpus", c, 0, 4095);
      if (!n.ok()) return n.status();
      o.cpus.push_back(static_cast<int>(*n));
    }
    return o.cpus.empty() ? Bad("--cpus", v, "CPU[,CPU...]") : absl::OkStatus();
  }};
  flags["--udp-port"] = {true, integer("--udp-port", &o.udp_port, 1, 65535)};
  flags["--embedded"] = {false, [&](std::string_view) {
    o.engine_mode = EngineMode::kEmbedded;
    return absl::OkStatus();
  }};
  flags["--daemon"] = {false, [&](std::string_view) {
    o.engine_mode = EngineMode::kDaemon;
    return absl::OkStatus();
  }};
  flags["--daemon-socket"] = {true, [&](std::string_view v) {
    o.daemon_socket = std::string(v);
    return v.empty() ? Bad("--daemon-socket", v, "PATH") : absl::OkStatus();
  }};
  flags["--timeout"] = {true, seconds("--timeout", &o.timeout_s, 0.1)};

  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') {
      std::string_view name = arg, value;
      bool inline_value = false;
      if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inline_value = true;
      }
      auto it = flags.find(name);
      if (it == flags.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ", std::string(name), " (mrperf --help)"));
      }
      if (it->second.takes_value && !inline_value) {
        if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(std::string(name), " needs a value"));
        value = argv[++i];
      } else if (!it->second.takes_value && inline_value) {
        return absl::InvalidArgumentError(absl::StrCat(std::string(name), " takes no value"));
      }
      if (absl::Status s = it->second.set(value); !s.ok()) return s;
      continue;
    }
    if (o.server) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", std::string(arg), "' (one SERVER address at most)"));
    }
    o.server = std::string(arg);
  }

  // Defaults and consistency.
  o.size = size_set ? size : (IsLatency(o.test) ? 2 : 65536);
  if (o.iterations == 0) o.iterations = IsLatency(o.test) ? 1000 : 5000;
  if (size_set && o.all_sizes) return absl::InvalidArgumentError("-s and -a exclude each other");
  if (!paths_set) o.paths = o.transport == Transport::kGoBackN ? 1 : 8;
  // Latency through the stack: an inline engine, so that a ping-pong crosses no thread handoff
  // (two threads per side on 2 vCPUs cost a vCPU wake-up per handoff).
  if (!workers_set) o.workers = IsStack(o.test) ? 0 : 1;  // inline: fastest on small hosts
  if (o.workers == 0 && !IsStack(o.test)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers 0 (inline engine) is for the stack tests; ", std::string(TestName(o.test)),
        " needs --workers 1 or more"));
  }
  if (o.daemon_socket.empty()) {
    const char* env = std::getenv("METAROCE_SOCKET");
    o.daemon_socket = env != nullptr && *env != '\0' ? env : std::string(control::kDefaultSocketPath);
  }
  if (!IsStack(o.test) || o.port_kind == PortKindFlag::kMemory) {
    if (o.engine_mode == EngineMode::kDaemon) {
      return absl::InvalidArgumentError(
          "--daemon is for the stack tests over real interfaces (not raw, udp or memory)");
    }
    o.engine_mode = EngineMode::kEmbedded;
  }
  if (o.engine_mode != EngineMode::kEmbedded && o.interfaces.empty()) {
    // The daemon's interfaces; an embedded engine (no daemon answering) then needs them.
  } else if (o.port_kind == PortKindFlag::kMemory) {
    if (!o.interfaces.empty()) {
      return absl::InvalidArgumentError("--port-kind memory takes no --interface");
    }
    if (o.planes == 0) o.planes = 1;
  } else {
    if (o.interfaces.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--port-kind ", std::string(PortKindName(o.port_kind)),
          " needs --interface IF[,IF...] (one per plane; --port-kind memory needs none)"));
    }
    if (o.planes == 0) o.planes = static_cast<int>(o.interfaces.size());
    if (static_cast<size_t>(o.planes) != o.interfaces.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--planes ", o.planes, " but ",
                                                     o.interfaces.size(), " --interface names"));
    }
  }
  if (!o.local_ips.empty() && o.local_ips.size() != static_cast<size_t>(o.planes)) {
    return absl::InvalidArgumentError(absl::StrCat("--local-ip names ", o.local_ips.size(),
                                                   " addresses for ", o.planes, " planes"));
  }
  if (o.port_kind == PortKindFlag::kUdp && o.workers > 1 && IsStack(o.test)) {
    return absl::InvalidArgumentError(
        "--port-kind udp runs one worker: every worker's port would bind the same UDP port "
        "(use --port-kind xdp for --workers > 1)");
  }
  if ((o.test == TestKind::kUdpBw || o.test == TestKind::kUdpLat) &&
      o.port_kind == PortKindFlag::kMemory) {
    return absl::InvalidArgumentError("udp_bw/udp_lat use kernel sockets: give --interface");
  }
  if (o.is_client() && o.port_kind == PortKindFlag::kMemory) {
    return absl::InvalidArgumentError(
        "--port-kind memory runs server and client in this one process: give no SERVER");
  }
  if (o.test == TestKind::kRawBw || o.test == TestKind::kRawLat ||
      o.test == TestKind::kUdpBw || o.test == TestKind::kUdpLat) {
    if (o.all_sizes) return absl::InvalidArgumentError("-a is for the stack tests");
  }
  return o;
}

}  // namespace metaroce::perf
