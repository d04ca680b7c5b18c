#include "tools/sim/cli_options.h"

#include <cmath>
#include <cstdint>
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

const std::vector<FlagSpec>& Flags() {
  static const std::vector<FlagSpec> flags = {
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
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<bool> b = ParseBool("ordered", v);
         if (!b.ok()) return b.status();
         out.config.ordered_completion = *b;
         return absl::OkStatus();
       }},
      {"reorder-buffer-kb", "KIB", "reorder transport: responder buffer (default 1024)",
       UnsignedSetter("reorder-buffer-kb", &ScenarioConfig::reorder_buffer_kb)},
      {"mtu", "BYTES", "payload bytes per data packet (default 4096)",
       UnsignedSetter("mtu", &ScenarioConfig::mtu)},
      {"seed", "S", "seed of every random choice (default 1)",
       UnsignedSetter("seed", &ScenarioConfig::seed)},
      {"json", "", "print the result as one JSON object",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<bool> b = ParseBool("json", v);
         if (!b.ok()) return b.status();
         out.json = *b;
         return absl::OkStatus();
       }},
      {"measure", "", "add measurements of the run to the result: wall-clock seconds of setup "
                      "and run, events per second, core heap per connection (they vary from "
                      "run to run)",
       [](absl::string_view v, CommandLine& out) -> absl::Status {
         absl::StatusOr<bool> b = ParseBool("measure", v);
         if (!b.ok()) return b.status();
         out.config.measure = *b;
         return absl::OkStatus();
       }},
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

}  // namespace

absl::StatusOr<CommandLine> ParseCommandLine(std::span<const char* const> args) {
  CommandLine out;
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
    for (const FlagSpec& f : Flags()) {
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
  if (!out.help) {
    if (absl::Status s = out.config.Validate(); !s.ok()) return s;
  }
  return out;
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
