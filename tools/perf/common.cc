#include "tools/perf/common.h"

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>

#include <cstdio>
#include <cstring>

#include "lib/api/stats_json.h"
#include "lib/io/packet_port.h"
#include "lib/core/path_state.h"

namespace metaroce::perf {

std::atomic<bool>& StopFlag() {
  static std::atomic<bool> stop{false};
  return stop;
}

void SleepCpu(uint32_t micros) {
  const timespec ts{0, static_cast<long>(micros) * 1000};
  nanosleep(&ts, nullptr);
}

void YieldCpu() {
  static const int mode = [] {
    const char* e = std::getenv("MRPERF_APP_IDLE");
    if (e == nullptr || std::string(e) == "yield") return 0;
    if (e != nullptr && std::string(e) == "spin") return 2;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    return 1;
  }();
  if (mode == 0) {
    sched_yield();
  } else if (mode == 1) {
    const timespec ts{0, 2000};
    nanosleep(&ts, nullptr);
  }
}

namespace {

inline uint64_t Word(uint64_t seq, uint32_t qp, uint64_t j) {
  return (seq << 32) | ((j ^ (uint64_t{qp} << 24)) & 0xffffffffu);
}
inline uint8_t Tail(uint64_t key, uint32_t qp, size_t i) {
  return static_cast<uint8_t>(0x5a ^ (key * 13) ^ (i * 7) ^ qp);
}

}  // namespace

void FillPattern(std::byte* p, size_t size, uint64_t seq, uint32_t qp, uint64_t tail_key) {
  const size_t words = size / 8;
  for (size_t j = 0; j < words; ++j) {
    const uint64_t w = Word(seq, qp, j);
    std::memcpy(p + j * 8, &w, 8);
  }
  for (size_t i = words * 8; i < size; ++i) p[i] = std::byte{Tail(tail_key, qp, i)};
}

bool CheckPattern(const std::byte* p, size_t size, uint64_t seq, uint32_t qp, uint64_t tail_key,
                  uint64_t slots) {
  const size_t words = size / 8;
  for (size_t j = 0; j < words; ++j) {
    uint64_t w;
    std::memcpy(&w, p + j * 8, 8);
    if ((w & 0xffffffffu) != ((j ^ (uint64_t{qp} << 24)) & 0xffffffffu)) return false;
    const uint64_t s = w >> 32;
    if (slots == 0) {
      if (s != (seq & 0xffffffffu)) return false;
    } else if (s < (seq & 0xffffffffu) || (s - seq) % slots != 0) {
      return false;
    }
  }
  for (size_t i = words * 8; i < size; ++i) {
    if (p[i] != std::byte{Tail(tail_key, qp, i)}) return false;
  }
  return true;
}

JsonValue WorkerStatsJson(const std::vector<engine::WorkerStats>& stats) {
  JsonValue out = JsonValue::MakeArray();
  for (const engine::WorkerStats& w : stats) {
    JsonValue j;
    j["worker"] = w.worker;
    j["loops"] = w.loops;
    j["sleeps"] = w.sleeps;
    j["rx_packets"] = w.rx_packets;
    j["tx_packets"] = w.tx_packets;
    j["tx_backlogged"] = w.tx_backlogged;
    j["tx_backlog_dropped"] = w.tx_backlog_dropped;
    j["tx_no_route"] = w.tx_no_route;
    j["handoff_sent"] = w.handoff_sent;
    j["handoff_received"] = w.handoff_received;
    j["handoff_dropped"] = w.handoff_dropped;
    j["commands_refused"] = w.commands_refused;
    j["completions"] = w.completions;
    j["rx_datagrams"] = w.endpoint.rx_datagrams;
    j["rx_malformed"] = w.endpoint.malformed;
    j["rx_unknown_connection"] = w.endpoint.unknown_connection;
    JsonValue& ports = j["ports"] = JsonValue::MakeArray();
    for (size_t p = 0; p < w.ports.size(); ++p) {
      JsonValue q = api::PortStatsJson(
          w.ports[p], p < w.port_descriptions.size() ? w.port_descriptions[p] : "");
      q["plane"] = p;
      ports.Push(std::move(q));
    }
    out.Push(std::move(j));
  }
  return out;
}

JsonValue ConfigJson(const PerfOptions& o, const api::Datapath* dp, uint32_t mtu) {
  JsonValue c;
  JsonValue sizes = JsonValue::MakeArray();
  for (uint64_t s : o.Sizes()) sizes.Push(s);
  c["sizes"] = std::move(sizes);
  c["iterations"] = o.iterations;
  c["duration_s"] = o.duration_s;
  c["qps"] = o.qps;
  c["paths"] = o.paths;
  c["planes"] = o.planes;
  c["transport"] = TransportName(o.transport);
  c["port_kind"] = PortKindName(o.port_kind);
  c["workers"] = o.workers;
  c["mtu"] = mtu;
  c["verify"] = o.verify;
  c["tx_depth"] = o.tx_depth;
  c["rx_depth"] = o.rx_depth;
  c["spin"] = o.spin;
  c["udp_port"] = o.udp_port;
  c["control_port"] = o.port;
  JsonValue& planes = c["plane_config"] = JsonValue::MakeArray();
  JsonValue& steer = c["xdp_steering"] = JsonValue::MakeArray();
  if (dp == nullptr) return c;  // attached: the daemon's (mrctl link show)
  for (const api::PlaneInfo& p : dp->planes()) {
    JsonValue j;
    j["interface"] = p.ifname;
    j["local_ip"] = p.local_ip.ToString();
    j["if_mtu"] = p.if_mtu;
    planes.Push(std::move(j));
  }
  for (const std::string& s : dp->SteeringDescriptions()) steer.Push(s);
  return c;
}

api::DatapathOptions DatapathOptionsFor(const PerfOptions& o,
                                        std::shared_ptr<api::MemoryPairBroker> broker, int side) {
  api::DatapathOptions d;
  switch (o.port_kind) {
    case PortKindFlag::kXdp: d.kind = api::PortKind::kAfXdp; break;
    case PortKindFlag::kUdp: d.kind = api::PortKind::kUdp; break;
    case PortKindFlag::kMemory: d.kind = api::PortKind::kMemory; break;
  }
  for (int p = 0; p < o.planes; ++p) {
    api::PlaneOptions po;
    if (static_cast<size_t>(p) < o.interfaces.size()) po.ifname = o.interfaces[p];
    if (static_cast<size_t>(p) < o.local_ips.size()) po.local_ip = o.local_ips[p];
    d.planes.push_back(po);
  }
  d.udp_port = o.udp_port;
  d.queues = static_cast<uint32_t>(std::max(o.workers, 1));
  d.memory_broker = std::move(broker);
  d.memory_side = side;
  return d;
}

bool EmitJson(const PerfOptions& o, const JsonValue& doc) {
  bool ok = true;
  if (!o.out_json.empty()) {
    FILE* f = std::fopen(o.out_json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "mrperf: cannot write --out_json %s: %s\n", o.out_json.c_str(),
                   std::strerror(errno));
      ok = false;
    } else {
      const std::string text = doc.Dump(2) + "\n";
      ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      ok = (std::fclose(f) == 0) && ok;
    }
  }
  if (o.json_stdout) std::printf("%s\n", doc.Dump().c_str());
  return ok;
}

void PortModes::Record(const io::PacketPort& port) {
  const io::PortFeatures f = port.features();
  if (!f.af_xdp) return;
  absl::MutexLock lock(&mu_);
  ++af_xdp_;
  if (f.zero_copy) ++zero_copy_;
}

bool PortModes::zero_copy() const {
  absl::MutexLock lock(&mu_);
  return af_xdp_ > 0 && zero_copy_ == af_xdp_;
}

int PortModes::af_xdp_ports() const {
  absl::MutexLock lock(&mu_);
  return af_xdp_;
}

}  // namespace metaroce::perf
