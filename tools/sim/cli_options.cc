#include "tools/sim/cli_options.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tools/common/byte_size.h"

namespace metaroce::sim {
namespace {

using Setter = std::function<absl::Status(absl::string_view value, CommandLine& out)>;

struct FlagSpec {
  absl::string_view name;
  absl::string_view value_name;  // empty: boolean flag
  absl::string_view help;
  Setter set;
};

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": expected ", want));
}

// Unsigned integer with an optional K/M/G (x1024) suffix.
absl::StatusOr<uint64_t> ParseSize(absl::string_view flag, absl::string_view text) {
  const std::optional<uint64_t> v = tools::ParseByteSize(std::string_view(text.data(), text.size()));
  if (!v) return BadValue(flag, text, "a non-negative integer (K/M/G suffix allowed)");
  return *v;
}

template <typename T>
Setter UnsignedSetter(absl::string_view flag, T ScenarioConfig::*field) {
  return [flag, field](absl::string_view v, CommandLine& out) -> absl::Status {
    absl::StatusOr<uint64_t> n = ParseSize(flag, v);
    if (!n.ok()) return n.status();
    if (*n > std::numeric_limits<T>::max()) return BadValue(flag, v, "a smaller value");
    out.config.*field = static_cast<T>(*n);
    return absl::OkStatus();
  };
}

// An unsigned value stored through `apply` (fields of nested structs), at most `max`.
Setter UnsignedInto(absl::string_view flag, uint64_t max,
                    std::function<void(uint64_t, CommandLine&)> apply) {
  return [flag, max, apply](absl::string_view v, CommandLine& out) -> absl::Status {
    absl::StatusOr<uint64_t> n = ParseSize(flag, v);
    if (!n.ok()) return n.status();
    if (*n > max) return BadValue(flag, v, absl::StrCat("at most ", max));
    apply(*n, out);
    return absl::OkStatus();
  };
}

absl::StatusOr<double> ParseReal(absl::string_view flag, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return BadValue(flag, text, "a number");
  }
  return value;
}

Duration FromMicros(double us) { return Duration(std::llround(us * 1000.0)); }

Setter RealSetter(absl::string_view flag, std::function<void(double, CommandLine&)> apply) {
  return [flag, apply](absl::string_view v, CommandLine& out) -> absl::Status {
    absl::StatusOr<double> x = ParseReal(flag, v);
    if (!x.ok()) return x.status();
    apply(*x, out);
    return absl::OkStatus();
  };
}

// One item of a PATH:VALUE list: a path id and a finite real.
bool ParsePathValue(absl::string_view item, uint16_t* path, double* value) {
  std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
  uint32_t p = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &p) || p > UINT16_MAX ||
      !absl::SimpleAtod(parts[1], value) || !std::isfinite(*value)) {
    return false;
  }
  *path = static_cast<uint16_t>(p);
  return true;
}

// T1-T2 in microseconds of simulated time.
bool ParseWindow(absl::string_view text, TimeWindow* window) {
  std::vector<absl::string_view> span = absl::StrSplit(text, '-');
  double begin = 0, end = 0;
  if (span.size() != 2 || !absl::SimpleAtod(span[0], &begin) || !absl::SimpleAtod(span[1], &end)) {
    return false;
  }
  *window = TimeWindow{Instant{0} + FromMicros(begin), Instant{0} + FromMicros(end)};
  return true;
}

// A flag whose value is a comma-separated list of PATH:VALUE (`example` shows one).
Setter PathValueListSetter(absl::string_view flag, absl::string_view example,
                           std::function<void(uint16_t, double, CommandLine&)> apply) {
  return [flag, example, apply](absl::string_view v, CommandLine& out) -> absl::Status {
    for (absl::string_view item : absl::StrSplit(v, ',')) {
      uint16_t path = 0;
      double value = 0;
      if (!ParsePathValue(item, &path, &value)) return BadValue(flag, v, example);
      apply(path, value, out);
    }
    return absl::OkStatus();
  };
}

absl::StatusOr<bool> ParseBool(absl::string_view flag, absl::string_view v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return BadValue(flag, v, "true or false");
}

// A boolean flag stored through `apply`.
Setter BoolSetter(absl::string_view flag, std::function<void(bool, CommandLine&)> apply) {
  return [flag, apply](absl::string_view v, CommandLine& out) -> absl::Status {
    absl::StatusOr<bool> b = ParseBool(flag, v);
    if (!b.ok()) return b.status();
    apply(*b, out);
    return absl::OkStatus();
  };
}

const std::vector<FlagSpec>& Flags() {
  static const std::vector<FlagSpec> flags = {
      {"topology", "pair", "the two-host model (default); leaf-spine: the cluster model (its "
                           "flags: mrsim --topology leaf-spine --help)",
       [](absl::string_view v, CommandLine&) -> absl::Status {
         return v == "pair" ? absl::OkStatus() : BadValue("topology", v, "pair");
       }},
      {"paths", "P", "physical paths between A and B (default 8)",
       UnsignedSetter("paths", &ScenarioConfig::physical_paths)},
      {"logical-paths", "L", "logical paths per connection (default: --paths; gbn: 1)",
       UnsignedSetter("logical-paths", &ScenarioConfig::logical_paths)},
      {"connections", "C", "connections A->B; messages go round-robin (default 1)",
       UnsignedSetter("connections", &ScenarioConfig::connections)},
      {"messages", "M", "messages to transfer; with --steps, per step (default 64)",
       UnsignedSetter("messages", &ScenarioConfig::messages)},
      {"steps", "N",
       "N synchronized steps of --messages each: a step ends when all its messages completed, "
       "then the next starts; JSON step_us (default 0: no steps)",
       UnsignedSetter("steps", &ScenarioConfig::steps)},
      {"size", "BYTES", "message size, K/M suffix allowed (default 1M)",
       UnsignedSetter("size", &ScenarioConfig::message_bytes)},
      {"op", "write|send|write_imm", "operation (default write)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         if (v == "write") {
           out.config.op = Operation::kWrite;
         } else if (v == "send") {
           out.config.op = Operation::kSend;
         } else if (v == "write_imm") {
           out.config.op = Operation::kWriteImm;
         } else {
           return BadValue("op", v, "write, send or write_imm");
         }
         return absl::OkStatus();
       }},
      {"depth", "D", "outstanding messages per connection (default 8)",
       UnsignedSetter("depth", &ScenarioConfig::depth)},
      {"transport", "metaroce|gbn|reorder", "transport profile (default metaroce)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         if (v == "metaroce") {
           out.config.transport = TransportKind::kMetaRoce;
         } else if (v == "gbn") {
           out.config.transport = TransportKind::kGoBackN;
         } else if (v == "reorder") {
           out.config.transport = TransportKind::kReorderBuffer;
         } else {
           return BadValue("transport", v, "metaroce, gbn or reorder");
         }
         return absl::OkStatus();
       }},
      {"ordered", "", "ordered completion",
       BoolSetter("ordered", [](bool b, CommandLine& out) { out.config.ordered_completion = b; })},
      {"reorder-buffer-kb", "KIB", "reorder transport: responder buffer (default 1024)",
       UnsignedSetter("reorder-buffer-kb", &ScenarioConfig::reorder_buffer_kb)},
      {"mtu", "BYTES", "payload bytes per data packet (default 4096)",
       UnsignedSetter("mtu", &ScenarioConfig::mtu)},
      {"ack-every", "K", "the responder ACKs every K in-order packets of a path (default: the "
                         "core's, 2; metaroced and mrperf run 16)",
       UnsignedSetter("ack-every", &ScenarioConfig::ack_every)},
      {"seed", "S", "seed of every random choice (default 1)",
       UnsignedSetter("seed", &ScenarioConfig::seed)},
      {"quiet", "", "no progress lines on stderr (the pair model prints none; accepted so that "
                    "one set of flags serves both models)",
       BoolSetter("quiet", [](bool b, CommandLine& out) { out.quiet = b; })},
      {"json", "", "print the result as one JSON object",
       BoolSetter("json", [](bool b, CommandLine& out) { out.json = b; })},
      {"measure", "", "add measurements of the run to the result: wall-clock seconds of setup "
                      "and run, CPU seconds of the run, events per wall and per CPU second, core "
                      "heap per connection (they vary from run to run)",
       BoolSetter("measure", [](bool b, CommandLine& out) { out.config.measure = b; })},
      {"rate-gbps", "GBPS", "line rate of every link (default 100)",
       RealSetter("rate-gbps", [](double x, CommandLine& out) { out.config.rate_gbps = x; })},
      {"slow", "P:GBPS[,...]", "override the rate of path P (both directions)",
       PathValueListSetter("slow", "PATH:GBPS, e.g. 0:25",
                           [](uint16_t path, double rate, CommandLine& out) {
                             out.config.slow_paths.push_back({path, rate});
                           })},
      {"delay-us", "US", "one-way propagation delay (default 2)",
       RealSetter("delay-us", [](double x, CommandLine& out) { out.config.delay = FromMicros(x); })},
      {"queue-kb", "KIB", "output queue per link, tail drop beyond (default 512)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<uint64_t> n = ParseSize("queue-kb", v);
         if (!n.ok()) return n.status();
         out.config.queue_bytes = *n * 1024;
         return absl::OkStatus();
       }},
      {"receive-budget-kb", "KIB",
       "each host's receive budget, shared as window hints by the connections sending to it (default: all paths' rate x (base RTT + the responder's ACK delay); 0: no hints)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<uint64_t> n = ParseSize("receive-budget-kb", v);
         if (!n.ok()) return n.status();
         out.config.receive_budget_bytes = *n * 1024;
         return absl::OkStatus();
       }},
      {"pull-rate-gbps", "GBPS",
       "each host's pull pacer rate: requesters paced below one packet per path send on the "
       "responder's pulls, released at this rate (default: the host's receive rate, all paths "
       "together; 0: no pulls)",
       RealSetter("pull-rate-gbps",
                  [](double x, CommandLine& out) { out.config.pull_rate_gbps = x; })},
      {"ecn-kb", "KIB", "CE-mark when the queue exceeds this (default 64)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<uint64_t> n = ParseSize("ecn-kb", v);
         if (!n.ok()) return n.status();
         out.config.ecn_threshold_bytes = *n * 1024;
         return absl::OkStatus();
       }},
      {"loss", "P", "random loss probability per packet, data and ACK directions (default 0)",
       RealSetter("loss", [](double x, CommandLine& out) { out.config.loss = x; })},
      {"ack-loss", "P", "loss probability of the B->A (ACK) direction (default: --loss)",
       RealSetter("ack-loss", [](double x, CommandLine& out) { out.config.ack_loss = x; })},
      {"path-loss", "P:PROB[,...]",
       "loss probability of physical path P, both directions (overrides --loss, --ack-loss there)",
       PathValueListSetter("path-loss", "PATH:PROB, e.g. 0:0.01",
                           [](uint16_t path, double prob, CommandLine& out) {
                             out.config.path_losses.push_back({path, prob});
                           })},
      {"ce-mark", "P:PROB[@T1-T2][,...]",
       "CE-mark data packets of path P with probability PROB (in [T1,T2) us; default whole run)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         for (absl::string_view item : absl::StrSplit(v, ',')) {
           const absl::Status bad = BadValue("ce-mark", v, "PATH:PROB[@T1-T2], e.g. 0:1@1000-9000");
           std::vector<absl::string_view> at = absl::StrSplit(item, '@');
           CeMarking m;
           if (at.size() > 2 || !ParsePathValue(at[0], &m.path, &m.probability)) return bad;
           if (at.size() == 2) {
             TimeWindow window;
             if (!ParseWindow(at[1], &window)) return bad;
             m.window = window;
           }
           out.config.ce_marks.push_back(m);
         }
         return absl::OkStatus();
       }},
      {"blackhole", "P@T1-T2[,...]", "path P drops everything in [T1,T2) microseconds",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         for (absl::string_view item : absl::StrSplit(v, ',')) {
           std::vector<absl::string_view> at = absl::StrSplit(item, '@');
           uint32_t path = 0;
           TimeWindow window;
           if (at.size() != 2 || !absl::SimpleAtoi(at[0], &path) || path > UINT16_MAX ||
               !ParseWindow(at[1], &window)) {
             return BadValue("blackhole", v, "PATH@T1-T2, e.g. 0@1000-3000");
           }
           out.config.blackholes.push_back({static_cast<uint16_t>(path), window});
         }
         return absl::OkStatus();
       }},
      {"recv-delay-us", "US", "send/write_imm: post the first receives this late (default 0)",
       RealSetter("recv-delay-us",
                  [](double x, CommandLine& out) { out.config.recv_delay = FromMicros(x); })},
      {"duration-cap-ms", "MS", "stop after this much simulated time (default 10000)",
       RealSetter("duration-cap-ms", [](double x, CommandLine& out) {
         out.config.duration_cap = FromMicros(x * 1000.0);
       })},
      {"max-events", "N", "stop after this many events (default 200000000)",
       UnsignedSetter("max-events", &ScenarioConfig::max_events)},
      {"bin-us", "US", "goodput timeline bin (default 2 x base RTT)",
       RealSetter("bin-us", [](double x, CommandLine& out) { out.config.bin = FromMicros(x); })},
      {"sample-us", "US",
       "sample connection 1's path telemetry (state, srtt, ECN alpha, cwnd...) every US (default 0: "
       "off)",
       RealSetter("sample-us",
                  [](double x, CommandLine& out) { out.config.sample_interval = FromMicros(x); })},
      {"max-path-events", "N", "path events listed with details in JSON (default 64)",
       UnsignedSetter("max-path-events", &ScenarioConfig::max_path_events)},
      {"help", "", "print this text",
       [](absl::string_view, CommandLine& out) -> absl::Status {
         out.help = true;
         return absl::OkStatus();
       }},
  };
  return flags;
}

// WHERE:KIND[=VALUE][@T1-T2] (see the --fault help).
absl::Status ParseFault(absl::string_view text, FabricFault* f) {
  auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--fault=", text, ": ", why));
  };
  absl::string_view rest = text;
  const size_t at = rest.find('@');
  if (at != absl::string_view::npos) {
    if (!ParseWindow(rest.substr(at + 1), &f->window)) return bad("expected @T1-T2 in us");
    rest = rest.substr(0, at);
  }
  const size_t colon = rest.find(':');
  if (colon == absl::string_view::npos) return bad("expected WHERE:KIND");
  const absl::string_view where = rest.substr(0, colon);
  absl::string_view kind = rest.substr(colon + 1);
  std::optional<double> value;
  if (const size_t eq = kind.find('='); eq != absl::string_view::npos) {
    double x = 0;
    if (!absl::SimpleAtod(kind.substr(eq + 1), &x) || !std::isfinite(x)) {
      return bad("the value after = is not a number");
    }
    value = x;
    kind = kind.substr(0, eq);
  }
  const size_t weq = where.find('=');
  if (weq == absl::string_view::npos) return bad("WHERE is spine=P.S, link=P.L.S or host=P.H");
  std::vector<uint32_t> ids;
  for (absl::string_view part : absl::StrSplit(where.substr(weq + 1), '.')) {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(part, &n)) return bad("WHERE's numbers are plane.leaf.spine etc.");
    ids.push_back(n);
  }
  const absl::string_view what = where.substr(0, weq);
  if (what == "spine" && ids.size() == 2) {
    f->whole_spine = true;
    f->plane = static_cast<uint8_t>(ids[0]);
    f->spine = ids[1];
  } else if (what == "link" && ids.size() == 3) {
    f->link = {static_cast<uint8_t>(ids[0]), FabricLink::Tier::kSpine, ids[1], ids[2]};
  } else if (what == "host" && ids.size() == 2) {
    f->link = {static_cast<uint8_t>(ids[0]), FabricLink::Tier::kHost, ids[1], 0};
  } else {
    return bad("WHERE is spine=P.S, link=P.L.S (leaf L to spine S) or host=P.H");
  }
  if (kind == "blackhole") {
    f->kind = FabricFault::Kind::kBlackhole;
    if (value) return bad("blackhole takes no value");
  } else if (kind == "loss") {
    f->kind = FabricFault::Kind::kLoss;
    if (!value) return bad("loss=PROBABILITY");
    f->loss_probability = *value;
  } else if (kind == "rate") {
    f->kind = FabricFault::Kind::kRateCut;
    if (!value) return bad("rate=FACTOR (0..1]");
    f->rate_factor = *value;
  } else if (kind == "flap") {
    f->kind = FabricFault::Kind::kFlap;
    if (!value) return bad("flap=PERIOD_US");
    f->flap_period = FromMicros(*value);
  } else {
    return bad("KIND is blackhole, loss=P, rate=F or flap=PERIOD_US");
  }
  return absl::OkStatus();
}

Setter ClusterReal(absl::string_view flag, std::function<void(double, ClusterConfig&)> apply) {
  return RealSetter(flag, [apply](double x, CommandLine& out) { apply(x, out.cluster_config); });
}

Setter ClusterUnsigned(absl::string_view flag, uint64_t max,
                       std::function<void(uint64_t, ClusterConfig&)> apply) {
  return UnsignedInto(flag, max,
                      [apply](uint64_t n, CommandLine& out) { apply(n, out.cluster_config); });
}

const std::vector<FlagSpec>& ClusterFlags() {
  static const std::vector<FlagSpec> flags = {
      {"topology", "leaf-spine", "the cluster model (--topology pair: the two-host model)",
       [](absl::string_view v, CommandLine&) -> absl::Status {
         return v == "leaf-spine" ? absl::OkStatus() : BadValue("topology", v, "leaf-spine");
       }},
      {"hosts", "H", "hosts (default 16)",
       ClusterUnsigned("hosts", 1u << 24, [](uint64_t n, ClusterConfig& c) { c.fabric.hosts = uint32_t(n); })},
      {"hosts-per-leaf", "K", "hosts under each leaf (default 4)",
       ClusterUnsigned("hosts-per-leaf", 1u << 20,
                       [](uint64_t n, ClusterConfig& c) { c.fabric.hosts_per_leaf = uint32_t(n); })},
      {"spines", "S", "spines per plane (default 4)",
       ClusterUnsigned("spines", 1u << 16, [](uint64_t n, ClusterConfig& c) { c.fabric.spines = uint32_t(n); })},
      {"planes", "P", "planes: each host has one NIC port per plane (default 1)",
       ClusterUnsigned("planes", 16, [](uint64_t n, ClusterConfig& c) { c.fabric.planes = uint8_t(n); })},
      {"host-gbps", "GBPS", "host-leaf link rate (default 100)",
       ClusterReal("host-gbps", [](double x, ClusterConfig& c) { c.fabric.host_gbps = x; })},
      {"fabric-gbps", "GBPS", "leaf-spine link rate (default 100)",
       ClusterReal("fabric-gbps", [](double x, ClusterConfig& c) { c.fabric.fabric_gbps = x; })},
      {"hop-delay-us", "US", "propagation delay of every link (default 1)",
       ClusterReal("hop-delay-us",
                   [](double x, ClusterConfig& c) { c.fabric.hop_delay = FromMicros(x); })},
      {"queue-kb", "KIB", "output queue per switch port; tail drop beyond (lossy; default 512)",
       ClusterUnsigned("queue-kb", 1u << 30,
                       [](uint64_t n, ClusterConfig& c) { c.fabric.queue_bytes = n * 1024; })},
      {"loss", "P", "random loss probability per packet on every link, both directions, as "
                    "--loss in the pair model (default 0; a loss fault replaces it on its links)",
       ClusterReal("loss", [](double x, ClusterConfig& c) { c.fabric.loss_probability = x; })},
      {"ecn-kb", "KIB", "CE-mark above this backlog (default 64; --cc dcqcn: see --ecn-red)",
       UnsignedInto("ecn-kb", 1u << 30,
                    [](uint64_t n, CommandLine& out) {
                      out.cluster_config.fabric.ecn_threshold_bytes = n * 1024;
                      out.ecn_marking_set = true;
                    })},
      {"ecn-red", "KMIN:KMAX:PMAX",
       "RED-like marking: above KMIN KiB with a probability rising to PMAX at KMAX KiB, all "
       "above (default: step marking at --ecn-kb; --cc dcqcn: 5:200:0.01, the DCQCN paper's)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         const std::vector<absl::string_view> parts = absl::StrSplit(v, ':');
         uint64_t kmin = 0, kmax = 0;
         double pmax = 0;
         if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &kmin) ||
             !absl::SimpleAtoi(parts[1], &kmax) || !absl::SimpleAtod(parts[2], &pmax) ||
             !(pmax > 0 && pmax <= 1) || kmin >= kmax || kmax > (1u << 30)) {
           return BadValue("ecn-red", v, "KMIN:KMAX:PMAX, KiB, KMIN < KMAX, 0 < PMAX <= 1");
         }
         LeafSpineConfig& f = out.cluster_config.fabric;
         f.ecn_threshold_bytes = kmin * 1024;
         f.ecn_kmax_bytes = kmax * 1024;
         f.ecn_pmax = pmax;
         out.ecn_marking_set = true;
         return absl::OkStatus();
       }},
      {"cc", "window|none|dcqcn",
       "congestion control: the core's per-path window (default), none (no window, no receive "
       "budget hints: line rate, held back by PFC or drops) or dcqcn (none plus DCQCN's rate, "
       "go-back-N only: RoCE as deployed)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         ClusterConfig& c = out.cluster_config;
         if (v == "window") {
           c.cc = CongestionKind::kWindow;
         } else if (v == "none") {
           c.cc = CongestionKind::kNone;
         } else if (v == "dcqcn") {
           c.cc = CongestionKind::kDcqcn;
         } else {
           return BadValue("cc", v, "window, none or dcqcn");
         }
         return absl::OkStatus();
       }},
      {"fabric", "lossy|lossless", "lossless: PFC on every switch port, no tail drop (default lossy)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         if (v != "lossy" && v != "lossless") return BadValue("fabric", v, "lossy or lossless");
         out.cluster_config.fabric.lossless = v == "lossless";
         return absl::OkStatus();
       }},
      {"pfc-xoff-kb", "KIB", "lossless: pause the upstream port above this ingress backlog (default 96)",
       ClusterUnsigned("pfc-xoff-kb", 1u << 30,
                       [](uint64_t n, ClusterConfig& c) { c.fabric.pfc_xoff_bytes = n * 1024; })},
      {"pfc-xon-kb", "KIB", "lossless: resume it below this (default 48)",
       ClusterUnsigned("pfc-xon-kb", 1u << 30,
                       [](uint64_t n, ClusterConfig& c) { c.fabric.pfc_xon_bytes = n * 1024; })},
      {"nic-queues", "control-first|fifo",
       "hosts' NICs: send ACKs and probes ahead of queued data, as a NIC's traffic classes do, "
       "or one FIFO (default control-first)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         if (v != "control-first" && v != "fifo") {
           return BadValue("nic-queues", v, "control-first or fifo");
         }
         out.cluster_config.fabric.nic_control_first = v == "control-first";
         return absl::OkStatus();
       }},
      {"reconverge-us", "US",
       "routing removes a link down this long from ECMP groups (default 0: never)",
       ClusterReal("reconverge-us",
                   [](double x, ClusterConfig& c) { c.fabric.reconvergence = FromMicros(x); })},
      {"fault", "WHERE:KIND[=V][@T1-T2]",
       "a fault, repeatable. WHERE: spine=P.S (every link of spine S of plane P), link=P.L.S "
       "(leaf L to spine S), host=P.H (host H's link). KIND: blackhole, loss=PROB, rate=FACTOR, "
       "flap=PERIOD_US (needs @T1-T2). Times in us; default from 0 on",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         FabricFault f;
         if (absl::Status s = ParseFault(v, &f); !s.ok()) return s;
         out.cluster_config.faults.push_back(f);
         return absl::OkStatus();
       }},
      {"transport", "T", "metaroce, gbn (one path, RoCEv2 go-back-N) or reorder (default metaroce)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         ClusterConfig& c = out.cluster_config;
         if (v == "metaroce") {
           c.transport = TransportKind::kMetaRoce;
         } else if (v == "gbn") {
           c.transport = TransportKind::kGoBackN;
         } else if (v == "reorder") {
           c.transport = TransportKind::kReorderBuffer;
         } else {
           return BadValue("transport", v, "metaroce, gbn or reorder");
         }
         return absl::OkStatus();
       }},
      {"paths", "N", "logical paths per connection, spread over the planes (default 8; gbn: 1)",
       ClusterUnsigned("paths", 256, [](uint64_t n, ClusterConfig& c) { c.paths = uint16_t(n); })},
      {"conns-per-pair", "N", "connections per host pair; a flow's bytes are split over them "
                              "(default 1)",
       ClusterUnsigned("conns-per-pair", 1u << 16,
                       [](uint64_t n, ClusterConfig& c) { c.connections_per_pair = uint32_t(n); })},
      {"mtu", "BYTES", "payload bytes per data packet (default 4096)",
       ClusterUnsigned("mtu", 65000, [](uint64_t n, ClusterConfig& c) { c.mtu = uint32_t(n); })},
      {"ack-every", "K", "the responder ACKs every K in-order packets of a path (default: the "
                         "core's, 2; metaroced and mrperf run 16)",
       ClusterUnsigned("ack-every", 1u << 16,
                       [](uint64_t n, ClusterConfig& c) { c.ack_every = uint32_t(n); })},
      {"reorder-buffer-kb", "KIB", "reorder transport: responder buffer (default 1024)",
       ClusterUnsigned("reorder-buffer-kb", 4u << 20,
                       [](uint64_t n, ClusterConfig& c) { c.reorder_buffer_kb = uint32_t(n); })},
      {"workload", "W", "pair, permutation, incast, alltoall or allreduce-ring (default permutation)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<Workload> w = ParseWorkload(std::string_view(v.data(), v.size()));
         if (!w.ok()) return w.status();
         out.cluster_config.workload = *w;
         return absl::OkStatus();
       }},
      {"size", "BYTES", "bytes per flow per step (allreduce-ring: per host), K/M/G (default 1M)",
       ClusterUnsigned("size", uint64_t{1} << 30,
                       [](uint64_t n, ClusterConfig& c) { c.message_bytes = n; })},
      {"steps", "N", "barrier steps (allreduce-ring: whole all-reduces) (default 1)",
       ClusterUnsigned("steps", 1u << 30, [](uint64_t n, ClusterConfig& c) { c.steps = uint32_t(n); })},
      {"incast-degree", "N", "incast: senders into host 0 (default 8)",
       ClusterUnsigned("incast-degree", 1u << 24,
                       [](uint64_t n, ClusterConfig& c) { c.incast_degree = uint32_t(n); })},
      {"background-incast", "N",
       "besides the workload, the last N hosts write --size to host 0 without pause until it "
       "ends: the workload's flows are the victims (default 0)",
       ClusterUnsigned("background-incast", 1u << 24,
                       [](uint64_t n, ClusterConfig& c) { c.background_incast = uint32_t(n); })},
      {"receive-budget-kb", "KIB",
       "every host's receive budget, shared as window hints by the connections sending to it "
       "(default: its links of every plane x (the RTT through a spine + the responder's ACK "
       "delay); --cc none or dcqcn: 0; 0: no hints)",
       ClusterUnsigned("receive-budget-kb", uint64_t{1} << 32,
                       [](uint64_t n, ClusterConfig& c) { c.receive_budget_bytes = n * 1024; })},
      {"pull-rate-gbps", "GBPS",
       "every host's pull pacer rate: requesters paced below one packet per path send on the "
       "responder's pulls, released at this rate (default: the host's links of every plane "
       "together; 0: no pulls)",
       ClusterReal("pull-rate-gbps",
                   [](double x, ClusterConfig& c) { c.pull_rate_gbps = x; })},
      {"seed", "S", "seed of every random choice (default 1)",
       ClusterUnsigned("seed", UINT64_MAX, [](uint64_t n, ClusterConfig& c) { c.seed = n; })},
      {"duration-cap-ms", "MS", "stop after this much simulated time (default 10000)",
       ClusterReal("duration-cap-ms",
                   [](double x, ClusterConfig& c) { c.duration_cap = FromMicros(x * 1000.0); })},
      {"max-events", "N", "stop after this many events (default 2000000000)",
       ClusterUnsigned("max-events", UINT64_MAX, [](uint64_t n, ClusterConfig& c) { c.max_events = n; })},
      {"json", "", "print the result as one JSON object",
       BoolSetter("json", [](bool b, CommandLine& out) { out.json = b; })},
      {"timeline-us", "US",
       "add `timeline` to the JSON: receiver goodput, queue depths, windows and bytes in flight "
       "every US of simulated time (at most 4,000 samples: a longer run widens the bin; "
       "default 0: off)",
       ClusterReal("timeline-us",
                   [](double x, ClusterConfig& c) { c.timeline_bin = FromMicros(x); })},
      {"measure", "", "add wall-clock and CPU figures and the core's heap per connection (vary per run)",
       BoolSetter("measure", [](bool b, CommandLine& out) { out.cluster_config.measure = b; })},
      {"quiet", "", "no progress lines on stderr",
       BoolSetter("quiet", [](bool b, CommandLine& out) { out.quiet = b; })},
      {"help", "", "print this text",
       [](absl::string_view, CommandLine& out) -> absl::Status {
         out.help = true;
         return absl::OkStatus();
       }},
  };
  return flags;
}

// Which model the arguments ask for: the value of --topology (default pair).
absl::StatusOr<bool> WantsCluster(std::span<const char* const> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    absl::string_view value;
    if (absl::StartsWith(arg, "--topology=")) {
      value = arg.substr(strlen("--topology="));
    } else if (arg == "--topology" && i + 1 < args.size()) {
      value = args[i + 1];
    } else {
      continue;
    }
    if (value == "pair") return false;
    if (value == "leaf-spine") return true;
    return BadValue("topology", value, "pair or leaf-spine");
  }
  return false;
}

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(std::span<const char* const> args) {
  CommandLine out;
  absl::StatusOr<bool> cluster = WantsCluster(args);
  if (!cluster.ok()) return cluster.status();
  out.cluster = *cluster;
  const std::vector<FlagSpec>& table = out.cluster ? ClusterFlags() : Flags();
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags start with --; see --help)"));
    }
    arg.remove_prefix(2);
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : table) {
      if (f.name == name) spec = &f;
    }
    if (spec == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!value) {
      if (spec->value_name.empty()) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (", spec->value_name, ")"));
      }
    }
    if (absl::Status s = spec->set(*value, out); !s.ok()) return s;
  }
  if (out.cluster && out.cluster_config.cc == CongestionKind::kDcqcn && !out.ecn_marking_set) {
    // DCQCN's switches mark RED-like: the paper's Kmin 5 KB, Kmax 200 KB, Pmax 1 % (KiB here).
    LeafSpineConfig& f = out.cluster_config.fabric;
    f.ecn_threshold_bytes = 5 * 1024;
    f.ecn_kmax_bytes = 200 * 1024;
    f.ecn_pmax = 0.01;
  }
  if (!out.help) {
    if (absl::Status s = out.cluster ? out.cluster_config.Validate() : out.config.Validate();
        !s.ok()) {
      return s;
    }
  }
  return out;
}

std::string ClusterUsageText() {
  std::string s =
      "usage: mrsim --topology leaf-spine [flags]\n"
      "Runs the MetaRoCE core on every host of a multiplane leaf-spine fabric (lossy with ECN, or\n"
      "lossless with PFC) under a collective workload in barrier steps, and verifies every byte\n"
      "placed. Same flags and seed: byte-identical --json output (except --measure).\n\n";
  for (const FlagSpec& f : ClusterFlags()) {
    std::string lhs = absl::StrCat("--", f.name);
    if (!f.value_name.empty()) absl::StrAppend(&lhs, " ", f.value_name);
    absl::StrAppendFormat(&s, "  %-30s %s\n", lhs, f.help);
  }
  return s;
}

std::string UsageText() {
  std::string s =
      "usage: mrsim [flags]\n"
      "Runs the MetaRoCE core between two simulated hosts over P physical paths, moves real bytes\n"
      "and verifies every byte placed. Same flags and seed: byte-identical --json output.\n\n";
  for (const FlagSpec& f : Flags()) {
    std::string lhs = absl::StrCat("--", f.name);
    if (!f.value_name.empty()) absl::StrAppend(&lhs, " ", f.value_name);
    absl::StrAppendFormat(&s, "  %-30s %s\n", lhs, f.help);
  }
  return s;
}

}  // namespace metaroce::sim
