#include "tools/sim/cluster.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/core/endpoint.h"
#include "lib/wire/packet.h"
#include "tools/sim/json_writer.h"
#include "tools/sim/rng.h"

namespace metaroce::sim {
namespace {

// Independent random streams derived from the seed.
enum : uint64_t {
  kTokenStream = 21,
  kConnSeedStream = 22,
  kPatternStream = 23,
  kPermutationStream = 24,
  kSourceOffsetStream = 25,
  kPortStream = 26,
};
constexpr uint64_t kPatternSlack = 1u << 20;  // source offsets vary over this many bytes
constexpr uint16_t kFirstPort = 49152;
constexpr uint32_t kPortSpan = 16384;
constexpr uint8_t kNoPlane = 0xff;
constexpr size_t kGuardBytes = 4096;  // around the scratch region: a write outside it shows
constexpr std::byte kGuardByte{0x5a};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

class Cluster {
 public:
  explicit Cluster(const ClusterConfig& config)
      : config_(config),
        fabric_(config.fabric, queue_, [this](FabricPacket& p) { OnDelivery(p); }) {
    result_.config = config;
  }

  absl::Status Setup();
  void Run();
  ClusterResult Finish();

 private:
  struct HostSink : core::PacketSink {
    HostSink(Cluster& c, uint32_t h) : cluster(c), host(h) {}
    void Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                  std::span<const std::byte> payload) override {
      cluster.OnTransmit(host, meta, headers, payload);
    }
    Cluster& cluster;
    uint32_t host;
  };
  struct Host {
    std::unique_ptr<HostSink> sink;
    std::unique_ptr<core::Endpoint> endpoint;
    std::vector<uint32_t> conn_of_local_id;  // local id - 1 -> connection index
    core::MemoryRegion pattern_mr, scratch_mr;
    uint64_t timer_generation = 0;
    Instant timer_at = core::kNever;
  };
  struct Flow {
    uint32_t src = 0, dst = 0;
    uint32_t first_conn = 0;  // connections_per_pair of them, consecutive
    bool background = false;  // background incast: outside the steps and the figures
    uint64_t bytes = 0;
    int64_t busy_ns = 0;          // sum over steps of (last completion - step start)
    Instant last_completion{0};   // in the current step
  };
  struct Conn {
    uint32_t flow = 0;
    uint32_t req_host = 0, resp_host = 0;
    core::Connection* req = nullptr;
    core::Connection* resp = nullptr;
    uint32_t next_msg_seq = 0;
    uint8_t plane = kNoPlane;  // single-path transports: the plane this connection uses
  };
  struct Message {
    uint64_t size = 0;
    uint64_t placed = 0;
    Instant posted{0};
    std::vector<uint64_t> got;  // bit per MTU-sized piece placed: each exactly once
  };

  static uint64_t Key(uint32_t conn, uint32_t msg_seq) {
    return (uint64_t{conn} << 32) | msg_seq;
  }
  uint64_t SourceOffset(uint32_t conn, uint32_t msg_seq) const {
    return DeriveSeed(config_.seed, kSourceOffsetStream, conn, msg_seq) % (kPatternSlack + 1);
  }
  void DataError(std::string_view kind) {
    ++result_.data_errors;
    ++result_.data_errors_by_kind[std::string(kind)];
  }
  uint64_t StepMessageBytes() const;
  uint32_t StepsTotal() const;
  double IdealStepUs(uint64_t flow_bytes) const;

  void OnTransmit(uint32_t host, const core::TxMeta& meta, std::span<const std::byte> headers,
                  std::span<const std::byte> payload);
  void OnDelivery(FabricPacket& p);
  void OnPlaced(uint32_t host, core::Connection& c, uint32_t msg_seq, uint32_t offset,
                std::span<const std::byte> placed);
  void AfterHostEvent(uint32_t host);
  void RescheduleTimer(uint32_t host);
  void OnTimer(uint32_t host, uint64_t generation);
  void StartStep();
  // Posts a Write of `size` bytes on connection `index`; false when the core refused it.
  bool PostMessage(uint32_t index, uint64_t size);
  void OnCompletion(const core::Completion& wc);
  void EndStep();
  void Progress(bool last);
  // Timeline (cluster.h): samples every bin whose end the next event reaches, after each event.
  void SampleDue();
  void TakeSample();
  void CompactTimeline();

  ClusterConfig config_;
  EventQueue queue_;
  LeafSpineFabric fabric_;
  std::vector<Host> hosts_;
  std::vector<Flow> flows_;
  std::vector<Conn> conns_;
  std::vector<std::byte> pattern_;
  std::vector<std::byte> scratch_;
  absl::flat_hash_map<uint64_t, Message> messages_;  // outstanding, by (conn, msg_seq)
  // AfterHostEvent's scratch, kept: built per event, the arrays alone were 2.4 KiB of stores.
  std::vector<core::Connection*> ready_;
  std::array<core::Completion, 64> completions_;
  std::array<core::PathEvent, 16> path_events_;
  std::vector<uint32_t> touched_hosts_;
  uint32_t step_ = 0;
  uint64_t step_outstanding_ = 0;
  uint64_t step_messages_ = 0;  // posted at the current step's start
  // Bytes posted at the current step's start (background included) and bytes_verified then:
  // progress within a step (one step of a permutation is the whole run).
  uint64_t step_bytes_ = 0;
  uint64_t step_verified_at_start_ = 0;
  Instant step_started_{0};
  bool done_ = false;
  uint64_t heap_bytes_ = 0;
  uint32_t workload_conns_ = 0;  // connections [0, workload_conns_) are the workload's
  double step_ideal_us_ = 0;
  std::vector<double> message_us_;  // completion time of every successful workload message
  // Timeline.
  bool timeline_on_ = false;
  int64_t bin_ns_ = 0;
  int64_t next_sample_ns_ = 0;  // end of the bin being filled
  uint64_t rx_bin_bytes_ = 0;   // workload payload placed since the last sample
  std::vector<uint32_t> sampled_conns_;
  ClusterResult result_;
  std::chrono::steady_clock::time_point wall_start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_progress_ = wall_start_;
};

uint32_t Cluster::StepsTotal() const {
  if (config_.workload == Workload::kAllReduceRing) {
    return config_.steps * 2 * (config_.fabric.hosts - 1);
  }
  return config_.steps;
}

uint64_t Cluster::StepMessageBytes() const {
  if (config_.workload == Workload::kAllReduceRing) {
    return std::max<uint64_t>(1, config_.message_bytes / config_.fabric.hosts);
  }
  return config_.message_bytes;
}

absl::Status Cluster::Setup() {
  const uint32_t H = config_.fabric.hosts;
  for (const FabricFault& f : config_.faults) {
    if (absl::Status s = fabric_.AddFault(f); !s.ok()) return s;
  }
  // Flows.
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  switch (config_.workload) {
    case Workload::kPair: pairs.push_back({0, 1}); break;
    case Workload::kPermutation: {
      // A random permutation (Fisher-Yates), then each host that maps to itself swaps targets
      // with the next host: pi[h] == h means pi[h+1] != h, so after the swap neither is fixed,
      // and later positions are untouched. A derangement, in one pass.
      std::vector<uint32_t> pi(H);
      for (uint32_t h = 0; h < H; ++h) pi[h] = h;
      Xoshiro256 rng(DeriveSeed(config_.seed, kPermutationStream));
      for (uint32_t i = H - 1; i > 0; --i) std::swap(pi[i], pi[rng.Next() % (i + 1)]);
      for (uint32_t h = 0; h < H; ++h) {
        if (pi[h] == h) std::swap(pi[h], pi[(h + 1) % H]);
      }
      for (uint32_t h = 0; h < H; ++h) pairs.push_back({h, pi[h]});
      break;
    }
    case Workload::kIncast:
      for (uint32_t s = 1; s <= config_.incast_degree; ++s) pairs.push_back({s, 0});
      break;
    case Workload::kAllToAll:
      for (uint32_t a = 0; a < H; ++a) {
        for (uint32_t b = 0; b < H; ++b) {
          if (a != b) pairs.push_back({a, b});
        }
      }
      break;
    case Workload::kAllReduceRing:
      for (uint32_t h = 0; h < H; ++h) pairs.push_back({h, (h + 1) % H});
      break;
  }
  const size_t foreground = pairs.size();
  for (uint32_t i = 0; i < config_.background_incast; ++i) pairs.push_back({H - 1 - i, 0});
  // Memory: one pattern (the source of every message) and one scratch region (the destination
  // of every Write), registered on every host.
  const uint64_t message = StepMessageBytes();
  pattern_.resize(message + kPatternSlack);
  {
    Xoshiro256 rng(DeriveSeed(config_.seed, kPatternStream));
    for (size_t i = 0; i + 8 <= pattern_.size(); i += 8) {
      const uint64_t v = rng.Next();
      std::memcpy(pattern_.data() + i, &v, 8);
    }
  }
  scratch_.assign(message + 2 * kGuardBytes, kGuardByte);
  hosts_.resize(H);
  for (uint32_t h = 0; h < H; ++h) {
    Host& host = hosts_[h];
    host.sink = std::make_unique<HostSink>(*this, h);
    host.endpoint = std::make_unique<core::Endpoint>(*host.sink, config_.HostBudget());
    auto pattern_mr = host.endpoint->memory().Register(pattern_.data(), pattern_.size(), 0);
    if (!pattern_mr.ok()) return pattern_mr.status();
    auto scratch_mr = host.endpoint->memory().Register(
        scratch_.data() + kGuardBytes, message,
        core::access::kLocalWrite | core::access::kRemoteWrite);
    if (!scratch_mr.ok()) return scratch_mr.status();
    host.pattern_mr = *pattern_mr;
    host.scratch_mr = *scratch_mr;
    host.endpoint->set_placement_check(
        [this, h](core::Connection& c, uint32_t msg_seq, uint32_t offset,
                  std::span<const std::byte> placed) { OnPlaced(h, c, msg_seq, offset, placed); });
  }
  // Connections.
  const uint16_t paths = config_.EffectivePaths();
  // Set-up requests each host will answer (as requester and as responder), for the offers.
  std::vector<uint64_t> setups_left(H, 0);
  for (const auto& [src, dst] : pairs) {
    setups_left[src] += config_.connections_per_pair;
    setups_left[dst] += config_.connections_per_pair;
  }
  flows_.reserve(pairs.size());
  conns_.reserve(pairs.size() * config_.connections_per_pair);
  for (const auto& [src, dst] : pairs) {
    Flow& flow = flows_.emplace_back();
    flow.background = flows_.size() > foreground;
    flow.src = src;
    flow.dst = dst;
    flow.first_conn = static_cast<uint32_t>(conns_.size());
    for (uint32_t j = 0; j < config_.connections_per_pair; ++j) {
      const uint32_t index = static_cast<uint32_t>(conns_.size());
      Conn& conn = conns_.emplace_back();
      conn.flow = static_cast<uint32_t>(flows_.size() - 1);
      conn.req_host = src;
      conn.resp_host = dst;
      if (paths == 1 && config_.fabric.planes > 1) conn.plane = j % config_.fabric.planes;
      core::ConnectionConfig base;
      base.path_count = paths;
      base.plane_count = paths == 1 ? 1 : config_.fabric.planes;
      const uint32_t first_port =
          static_cast<uint32_t>(DeriveSeed(config_.seed, kPortStream, index) % kPortSpan);
      for (uint16_t i = 0; i < paths; ++i) {
        base.initial_ports.push_back(
            static_cast<uint16_t>(kFirstPort + (first_port + i) % kPortSpan));
      }
      base.profile = ProfileOf(config_.transport, config_.reorder_buffer_kb);
      base.mtu = config_.mtu;
      base.ack_every = config_.ack_every;
      if (config_.cc != CongestionKind::kWindow) {
        // A RoCE NIC keeps no window: pinned at its largest it never binds.
        base.min_cwnd_bytes = base.initial_window_bytes = base.max_cwnd_bytes;
      }
      if (config_.cc == CongestionKind::kDcqcn) {
        core::DcqcnParams dcqcn;  // the defaults are HPCC's (tools/sim/README.md)
        dcqcn.line_rate_gbps = config_.fabric.host_gbps;
        dcqcn.overhead_bytes = kWireOverheadBytes;
        base.dcqcn = dcqcn;
      }
      core::ConnectionConfig on_req = base, on_resp = base;
      on_req.local_conn_id = static_cast<uint32_t>(hosts_[src].conn_of_local_id.size() + 1);
      on_resp.local_conn_id = static_cast<uint32_t>(hosts_[dst].conn_of_local_id.size() + 1);
      on_req.remote_conn_id = on_resp.local_conn_id;
      on_resp.remote_conn_id = on_req.local_conn_id;
      on_req.tx_token = on_resp.rx_token = DeriveSeed(config_.seed, kTokenStream, index, 0);
      on_req.rx_token = on_resp.tx_token = DeriveSeed(config_.seed, kTokenStream, index, 1);
      on_req.seed = DeriveSeed(config_.seed, kConnSeedStream, index, 0);
      on_resp.seed = DeriveSeed(config_.seed, kConnSeedStream, index, 1);
      // What the set-up exchange does: each side offers the other its share of its receive
      // budget as the new connection's initial window_hint, answering the whole burst of set-up
      // requests it gets (every connection of the run) together (lib/core/receive_budget.h).
      on_req.initial_window_hint_bytes =
          hosts_[dst].endpoint->receive_budget().InitialOffer(setups_left[dst]--);
      on_resp.initial_window_hint_bytes =
          hosts_[src].endpoint->receive_budget().InitialOffer(setups_left[src]--);
      const size_t before = config_.measure ? HeapInUseBytes() : 0;
      auto req = hosts_[src].endpoint->CreateConnection(on_req);
      if (!req.ok()) return req.status();
      auto resp = hosts_[dst].endpoint->CreateConnection(on_resp);
      if (!resp.ok()) return resp.status();
      if (config_.measure) heap_bytes_ += HeapInUseBytes() - before;
      conn.req = *req;
      conn.resp = *resp;
      hosts_[src].conn_of_local_id.push_back(index);
      hosts_[dst].conn_of_local_id.push_back(index);
    }
  }
  workload_conns_ = static_cast<uint32_t>(foreground * config_.connections_per_pair);
  if (config_.timeline_bin.count() > 0) {
    timeline_on_ = true;
    bin_ns_ = config_.timeline_bin.count();
    next_sample_ns_ = bin_ns_;
    const uint32_t n = std::min<uint32_t>(64, workload_conns_);
    for (uint32_t i = 0; i < n; ++i) {
      sampled_conns_.push_back(static_cast<uint32_t>(uint64_t{i} * workload_conns_ / n));
    }
    result_.has_timeline = true;
    result_.timeline.requested_bin_us = static_cast<double>(bin_ns_) / 1000.0;
    result_.timeline.connections_sampled = n;
  }
  result_.hosts = H;
  result_.flows = flows_.size();
  result_.connections = conns_.size();
  // Ideal time: every step moves the same bytes per flow.
  step_ideal_us_ = IdealStepUs(message);
  result_.ideal_us = step_ideal_us_ * StepsTotal();
  queue_.Schedule(Instant{0}, [this] { StartStep(); });
  return absl::OkStatus();
}

double Cluster::IdealStepUs(uint64_t flow_bytes) const {
  // A lower bound on the step's time: for every resource (a host's NIC out, a host's link in, a
  // leaf's uplinks together, a leaf's downlinks together, each over every plane), the time to
  // move its bytes at its capacity, plus the latency the first packet needs to reach it and the
  // last one needs after it (store and forward: one packet's serialization per later hop, a
  // propagation delay per hop) and the last ACK's way back. The shortest such latency among the
  // flows through a resource counts, so the bound holds for every flow. The step's ideal is the
  // largest over resources.
  const LeafSpineConfig& f = config_.fabric;
  const uint64_t packets = (flow_bytes + config_.mtu - 1) / config_.mtu;
  const double wire =
      static_cast<double>(flow_bytes + packets * (wire::kDataHeadersSize + kWireOverheadBytes));
  const double mtu_wire =
      static_cast<double>(std::min<uint64_t>(flow_bytes, config_.mtu) + wire::kDataHeadersSize +
                          kWireOverheadBytes);
  const double D = static_cast<double>(f.hop_delay.count());
  const double sh = mtu_wire * 8 / f.host_gbps, sf = mtu_wire * 8 / f.fabric_gbps;
  struct Resource {
    double bytes = 0;
    double latency = 1e300;
    void Add(double b, double lat) {
      bytes += b;
      latency = std::min(latency, lat);
    }
  };
  std::vector<Resource> tx(f.hosts), rx(f.hosts), up(f.leaves()), down(f.leaves());
  for (const Flow& fl : flows_) {
    if (fl.background) continue;
    const uint32_t a = fabric_.LeafOf(fl.src), b = fabric_.LeafOf(fl.dst);
    if (a == b) {  // NIC, leaf -> host; ACK 2 hops
      tx[fl.src].Add(wire, (2 * D + sh) + 2 * D);
      rx[fl.dst].Add(wire, (sh + D + D) + 2 * D);
    } else {  // NIC, leaf -> spine, spine -> leaf, leaf -> host; ACK 4 hops
      tx[fl.src].Add(wire, (4 * D + 2 * sf + sh) + 4 * D);
      up[a].Add(wire, (sh + D + 3 * D + sf + sh) + 4 * D);
      down[b].Add(wire, (sh + D + sf + D + 2 * D + sh) + 4 * D);
      rx[fl.dst].Add(wire, (3 * D + 2 * sf + sh + D) + 4 * D);
    }
  }
  const double host_bytes_per_ns = f.host_gbps * f.planes / 8;
  const double leaf_bytes_per_ns = f.fabric_gbps * f.spines * f.planes / 8;
  double ns = 0;
  auto consider = [&ns](const std::vector<Resource>& rs, double bytes_per_ns) {
    for (const Resource& r : rs) {
      if (r.bytes > 0) ns = std::max(ns, r.latency + r.bytes / bytes_per_ns);
    }
  };
  consider(tx, host_bytes_per_ns);
  consider(rx, host_bytes_per_ns);
  consider(up, leaf_bytes_per_ns);
  consider(down, leaf_bytes_per_ns);
  return ns / 1000.0;
}

void Cluster::OnTransmit(uint32_t host, const core::TxMeta& meta,
                         std::span<const std::byte> headers, std::span<const std::byte> payload) {
  const Host& h = hosts_[host];
  if (meta.conn_id == 0 || meta.conn_id > h.conn_of_local_id.size()) return;
  const Conn& conn = conns_[h.conn_of_local_id[meta.conn_id - 1]];
  FabricPacket p;
  p.src_host = host;
  p.dst_host = host == conn.req_host ? conn.resp_host : conn.req_host;
  p.plane = conn.plane != kNoPlane ? conn.plane : meta.plane;
  p.src_port = meta.src_port;
  p.dst_port = meta.dst_port;
  p.data = headers.size() > 1 && wire::IsData(static_cast<wire::Opcode>(headers[1]));
  if (config_.cc == CongestionKind::kDcqcn && !p.data && headers.size() >= 4) {
    const uint16_t flags = static_cast<uint16_t>(std::to_integer<uint16_t>(headers[2]) << 8 |
                                                 std::to_integer<uint16_t>(headers[3]));  // BE
    if (flags & wire::flags::kCnp) ++result_.cnps;
  }
  // Payload from the source pattern (immutable for the run) travels by reference: a packet in
  // flight holds its headers only. Anything else (none today) is copied.
  const bool in_pattern = !payload.empty() && payload.data() >= pattern_.data() &&
                          payload.data() + payload.size() <= pattern_.data() + pattern_.size();
  if (in_pattern) {
    p.bytes.assign(headers.begin(), headers.end());
    p.payload = payload;
  } else {
    p.bytes = fabric_.TakeBuffer();
    p.bytes.reserve(headers.size() + payload.size());
    p.bytes.insert(p.bytes.end(), headers.begin(), headers.end());
    p.bytes.insert(p.bytes.end(), payload.begin(), payload.end());
  }
  fabric_.Send(std::move(p));
}

void Cluster::OnDelivery(FabricPacket& p) {
  if (config_.on_delivery) config_.on_delivery(p);
  Host& h = hosts_[p.dst_host];
  h.endpoint->OnDatagram(queue_.now(), p.bytes,
                         core::RxMeta{p.src_port, p.dst_port, p.plane, p.ce});
  AfterHostEvent(p.dst_host);
}

void Cluster::OnPlaced(uint32_t host, core::Connection& c, uint32_t msg_seq, uint32_t offset,
                       std::span<const std::byte> placed) {
  const Host& h = hosts_[host];
  const uint32_t conn = h.conn_of_local_id[c.local_id() - 1];
  auto it = messages_.find(Key(conn, msg_seq));
  if (it == messages_.end()) {
    DataError("placement_of_unknown_message");
    return;
  }
  Message& m = it->second;
  if (uint64_t{offset} + placed.size() > m.size || offset % config_.mtu != 0) {
    DataError("placement_outside_message");
    return;
  }
  if (std::memcmp(placed.data(), pattern_.data() + SourceOffset(conn, msg_seq) + offset,
                  placed.size()) != 0) {
    DataError("wrong_bytes");
  }
  const uint32_t piece = offset / config_.mtu;
  uint64_t& word = m.got[piece / 64];
  const uint64_t bit = uint64_t{1} << (piece % 64);
  if (word & bit) DataError("placed_twice");
  word |= bit;
  m.placed += placed.size();
  result_.bytes_verified += placed.size();
  if (!flows_[conns_[conn].flow].background) {
    result_.workload_bytes_placed += placed.size();
    rx_bin_bytes_ += placed.size();
  }
}

void Cluster::AfterHostEvent(uint32_t host) {
  core::Endpoint& ep = *hosts_[host].endpoint;
  do {
    ready_.clear();
    ep.TakeReady(&ready_);
    for (core::Connection* c : ready_) {
      size_t n;
      while ((n = c->PollCompletions(completions_)) > 0) {
        for (size_t i = 0; i < n; ++i) OnCompletion(completions_[i]);
      }
      while ((n = c->PollEvents(path_events_)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          const core::PathEvent& e = path_events_[i];
          if (config_.on_path_event) config_.on_path_event(host, e);
          if (e.kind == core::PathEvent::Kind::kPortRotated) {
            ++result_.port_rotations;
          } else {
            ++result_.path_state_changes;
            if (e.to == core::PathState::kFailed) ++result_.paths_failed;
          }
          ++result_.path_events_by_reason[std::string(core::PathEventReasonName(e.reason))];
        }
      }
    }
  } while (!ready_.empty());
  RescheduleTimer(host);
}

void Cluster::RescheduleTimer(uint32_t host) {
  Host& h = hosts_[host];
  const Instant deadline = h.endpoint->NextDeadline();
  if (deadline == h.timer_at) return;
  ++h.timer_generation;
  h.timer_at = deadline;
  if (deadline == core::kNever) return;
  const Instant at = std::max(deadline, queue_.now());
  queue_.Schedule(at, [this, host, g = h.timer_generation] { OnTimer(host, g); });
}

void Cluster::OnTimer(uint32_t host, uint64_t generation) {
  Host& h = hosts_[host];
  if (generation != h.timer_generation) return;  // superseded
  h.timer_at = core::kNever;
  h.endpoint->OnTimer(queue_.now());
  // A deadline OnTimer left at or before now would spin at one instant: move on by 1 ns.
  if (h.endpoint->NextDeadline() <= queue_.now()) {
    ++h.timer_generation;
    h.timer_at = queue_.now() + Duration(1);
    queue_.Schedule(h.timer_at, [this, host, g = h.timer_generation] { OnTimer(host, g); });
  }
  AfterHostEvent(host);
}

bool Cluster::PostMessage(uint32_t index, uint64_t size) {
  Conn& conn = conns_[index];
  const uint32_t msg_seq = conn.next_msg_seq;
  const Host& src = hosts_[conn.req_host];
  const Host& dst = hosts_[conn.resp_host];
  core::SendWorkRequest wr;
  wr.wr_id = Key(index, msg_seq);
  wr.opcode = core::WrOpcode::kWrite;
  wr.flags = core::send_flags::kSignaled;
  wr.local = core::Sge{src.pattern_mr.addr + SourceOffset(index, msg_seq),
                       static_cast<uint32_t>(size), src.pattern_mr.lkey};
  wr.remote_addr = dst.scratch_mr.addr;
  wr.rkey = dst.scratch_mr.rkey;
  const uint64_t pieces = std::max<uint64_t>(1, (size + config_.mtu - 1) / config_.mtu);
  messages_[Key(index, msg_seq)] =
      Message{size, 0, queue_.now(), std::vector<uint64_t>((pieces + 63) / 64)};
  const absl::Status s = conn.req->PostSend(queue_.now(), wr);
  if (!s.ok()) {
    messages_.erase(Key(index, msg_seq));
    return false;
  }
  ++conn.next_msg_seq;
  return true;
}

void Cluster::StartStep() {
  step_started_ = queue_.now();
  const uint64_t message = StepMessageBytes();
  const uint32_t per_pair = config_.connections_per_pair;
  touched_hosts_.clear();
  step_bytes_ = 0;
  step_verified_at_start_ = result_.bytes_verified;
  for (Flow& flow : flows_) {
    // The background incast starts with the first step and runs on by itself.
    if (flow.background && step_ > 0) continue;
    flow.last_completion = step_started_;
    for (uint32_t j = 0; j < per_pair; ++j) {
      const uint32_t index = flow.first_conn + j;
      // The flow's bytes split over its connections; the first ones take the remainder.
      const uint64_t size = message / per_pair + (j < message % per_pair ? 1 : 0);
      if (size == 0) continue;
      if (!PostMessage(index, size)) {
        if (!flow.background) {
          ++result_.messages_failed;
          ++result_.failed_by_status["POST_REFUSED"];
        }
        continue;
      }
      touched_hosts_.push_back(conns_[index].req_host);
      step_bytes_ += size;
      if (flow.background) continue;
      ++result_.messages_posted;
      ++step_outstanding_;
      flow.bytes += size;
    }
  }
  step_messages_ = step_outstanding_;
  std::sort(touched_hosts_.begin(), touched_hosts_.end());
  touched_hosts_.erase(std::unique(touched_hosts_.begin(), touched_hosts_.end()),
                       touched_hosts_.end());
  for (uint32_t h : touched_hosts_) AfterHostEvent(h);  // (which never starts a step)
  if (step_outstanding_ == 0) EndStep();
}

void Cluster::OnCompletion(const core::Completion& wc) {
  const uint32_t conn = static_cast<uint32_t>(wc.wr_id >> 32);
  if (conn >= conns_.size()) {
    DataError("unknown_completion");
    return;
  }
  auto it = messages_.find(wc.wr_id);
  if (it == messages_.end()) {
    DataError("duplicate_completion");
    return;
  }
  const bool success = wc.status == core::WcStatus::kSuccess;
  // RC: a Write completes once every byte of it was placed, each piece once (OnPlaced).
  if (success && it->second.placed != it->second.size) DataError("completed_before_placed");
  const uint64_t size = it->second.size;
  const Instant posted = it->second.posted;
  messages_.erase(it);
  Flow& flow = flows_[conns_[conn].flow];
  if (flow.background) {
    if (success) ++result_.background_messages_completed;
    // On until the workload ends; the host's timer is re-armed by the caller (AfterHostEvent).
    if (!done_ && success) PostMessage(conn, size);
    return;
  }
  if (success) {
    ++result_.messages_completed;
    message_us_.push_back(static_cast<double>((queue_.now() - posted).count()) / 1000.0);
  } else {
    ++result_.messages_failed;
    ++result_.failed_by_status[std::string(core::StatusName(wc.status))];
  }
  flow.last_completion = std::max(flow.last_completion, queue_.now());
  if (--step_outstanding_ == 0) {
    // The step's end posts the next step's messages: not from within this host's polling loop.
    queue_.Schedule(queue_.now(), [this] { EndStep(); });
  }
}

void Cluster::EndStep() {
  const Instant now = queue_.now();
  result_.step_us.push_back(static_cast<double>((now - step_started_).count()) / 1000.0);
  for (Flow& flow : flows_) {
    if (!flow.background) flow.busy_ns += (flow.last_completion - step_started_).count();
  }
  ++step_;
  ++result_.steps_completed;
  if (step_ >= StepsTotal()) {
    done_ = true;
    result_.completion_us = static_cast<double>(now.ns) / 1000.0;
    return;
  }
  StartStep();
}

void Cluster::Progress(bool last) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  if (!last && now - last_progress_ < std::chrono::seconds(2)) return;
  last_progress_ = now;
  const double wall = std::chrono::duration<double>(now - wall_start_).count();
  const double total = static_cast<double>(StepsTotal());
  const double in_step = static_cast<double>(std::max<uint64_t>(1, step_messages_));
  // Within a step, what is placed tells more than what completed (a permutation's messages
  // all complete near its end).
  const double by_messages = 1.0 - static_cast<double>(step_outstanding_) / in_step;
  const double by_bytes =
      step_bytes_ == 0 ? 0.0
                       : std::min(1.0, static_cast<double>(result_.bytes_verified -
                                                           step_verified_at_start_) /
                                           static_cast<double>(step_bytes_));
  const double done = static_cast<double>(step_) + std::max(by_messages, by_bytes);
  const double fraction = std::clamp(done / std::max(1.0, total), 0.0, 1.0);
  const double left = fraction > 0 ? wall * (1 - fraction) / fraction : 0;
  std::fprintf(stderr,
               "mrsim: %.1f us simulated, %llu events (%.0f/s), step %u/%u, %.0f %% done, "
               "%.0f s left\n",
               static_cast<double>(queue_.now().ns) / 1000.0,
               static_cast<unsigned long long>(queue_.executed()),
               wall > 0 ? static_cast<double>(queue_.executed()) / wall : 0.0, step_,
               StepsTotal(), 100 * fraction, left);
}

void Cluster::Run() {
  result_.stop_reason = std::string(queue_.RunUntil(
      Instant{0} + config_.duration_cap, config_.max_events, [this] { return done_; },
      [this] {
        if (timeline_on_ && !done_) SampleDue();
        if (config_.progress && (queue_.executed() & 0xffff) == 0) Progress(false);
      }));
  if (config_.progress) Progress(true);
  if (timeline_on_) {
    // The last bin: what happened since the last sample, up to the run's end (the bin may end
    // after it).
    while (next_sample_ns_ < queue_.now().ns) TakeSample();
    TakeSample();
  }
}

void Cluster::SampleDue() {
  // No events between now and the next one: the state at every bin end up to it is the state
  // now, and reading it schedules nothing, so the run is the same with and without a timeline.
  if (queue_.empty()) return;  // the run ends here (idle): Run() takes the last sample
  const int64_t until =
      std::min(queue_.NextTime().ns, (Instant{0} + config_.duration_cap).ns);
  while (next_sample_ns_ <= until) TakeSample();
}

void Cluster::TakeSample() {
  ClusterTimeline& tl = result_.timeline;
  tl.t_us.push_back(static_cast<double>(next_sample_ns_) / 1000.0);
  tl.rx_bytes.push_back(rx_bin_bytes_);
  rx_bin_bytes_ = 0;
  tl.queue_kb_max.push_back(static_cast<double>(fabric_.MaxSwitchBacklogBytes()) / 1024);
  uint64_t receiver = 0;
  for (uint8_t plane = 0; plane < config_.fabric.planes; ++plane) {
    receiver += fabric_.BacklogBytes(FabricLink{plane, FabricLink::Tier::kHost, 0, 0}, false);
  }
  tl.receiver_queue_kb.push_back(static_cast<double>(receiver) / 1024);
  uint64_t cwnd = 0, window = 0, inflight = 0;
  for (uint32_t index : sampled_conns_) {
    const core::Connection& c = *conns_[index].req;
    for (uint16_t p = 0; p < c.path_count(); ++p) {
      const core::PathStats s = c.path_stats(p);
      cwnd += s.cwnd_bytes;
      // The window the sender uses (Sender::Window): the receiver's hint caps cwnd; below one
      // packet it is a rate.
      window += s.window_hint_bytes == 0
                    ? s.cwnd_bytes
                    : std::min(s.cwnd_bytes, s.window_hint_bytes);  // congestion.md §1
    }
  }
  for (uint32_t index = 0; index < workload_conns_; ++index) {
    const core::Connection& c = *conns_[index].req;
    for (uint16_t p = 0; p < c.path_count(); ++p) inflight += c.path_stats(p).inflight_bytes;
  }
  const double n = static_cast<double>(std::max<size_t>(1, sampled_conns_.size()));
  tl.cwnd_kb_mean.push_back(static_cast<double>(cwnd) / 1024 / n);
  tl.window_kb_mean.push_back(static_cast<double>(window) / 1024 / n);
  tl.inflight_kb_total.push_back(static_cast<double>(inflight) / 1024);
  next_sample_ns_ += bin_ns_;
  if (tl.samples() > config_.timeline_max_samples) CompactTimeline();
}

void Cluster::CompactTimeline() {
  // Twice the bin: sample j (0-based) ends at (j + 1) x bin, so the odd ones end on the wider
  // bins' ends and stay; the received bytes of a pair add up. An odd last sample's bytes go
  // into the next one, whose end is that of the next wider bin.
  ClusterTimeline& tl = result_.timeline;
  const size_t n = tl.samples(), kept = n / 2;
  for (size_t i = 0; i < kept; ++i) {
    const size_t j = 2 * i + 1;
    tl.t_us[i] = tl.t_us[j];
    tl.rx_bytes[i] = tl.rx_bytes[j - 1] + tl.rx_bytes[j];
    tl.queue_kb_max[i] = tl.queue_kb_max[j];
    tl.receiver_queue_kb[i] = tl.receiver_queue_kb[j];
    tl.cwnd_kb_mean[i] = tl.cwnd_kb_mean[j];
    tl.window_kb_mean[i] = tl.window_kb_mean[j];
    tl.inflight_kb_total[i] = tl.inflight_kb_total[j];
  }
  if (n % 2 == 1) rx_bin_bytes_ += tl.rx_bytes[n - 1];
  for (auto* v : {&tl.t_us, &tl.queue_kb_max, &tl.receiver_queue_kb, &tl.cwnd_kb_mean,
                  &tl.window_kb_mean, &tl.inflight_kb_total}) {
    v->resize(kept);
  }
  tl.rx_bytes.resize(kept);
  bin_ns_ *= 2;
  next_sample_ns_ = static_cast<int64_t>(kept + 1) * bin_ns_;
}

ClusterResult Cluster::Finish() {
  ClusterResult& r = result_;
  r.events = queue_.executed();
  r.sim_time_us = static_cast<double>(queue_.now().ns) / 1000.0;
  r.step_p50_us = Percentile(r.step_us, 0.50);
  r.step_p99_us = Percentile(r.step_us, 0.99);
  r.step_max_us = Percentile(r.step_us, 1.0);
  r.vs_ideal = r.completion_us > 0 ? r.ideal_us / r.completion_us : 0;
  // Flow goodput and Jain's fairness index over flows.
  double sum = 0, sum_sq = 0, lo = 0, hi = 0;
  size_t n = 0;
  for (const Flow& f : flows_) {
    if (f.busy_ns <= 0) continue;
    const double gbps = static_cast<double>(f.bytes) * 8 / static_cast<double>(f.busy_ns);
    sum += gbps;
    sum_sq += gbps * gbps;
    lo = n == 0 ? gbps : std::min(lo, gbps);
    hi = std::max(hi, gbps);
    ++n;
  }
  if (n > 0) {
    r.flow_goodput_gbps_min = lo;
    r.flow_goodput_gbps_mean = sum / static_cast<double>(n);
    r.flow_goodput_gbps_max = hi;
    r.jain_fairness = sum_sq > 0 ? sum * sum / (static_cast<double>(n) * sum_sq) : 0;
  }
  r.fabric = fabric_.Totals();
  // Incast figures.
  r.messages_timed = message_us_.size();
  r.message_p50_us = Percentile(message_us_, 0.50);
  r.message_p99_us = Percentile(message_us_, 0.99);
  r.message_max_us = Percentile(message_us_, 1.0);
  r.p99_vs_ideal = step_ideal_us_ > 0 && !message_us_.empty()
                       ? r.message_p99_us / step_ideal_us_
                       : std::numeric_limits<double>::quiet_NaN();
  r.goodput_vs_receiver_link = std::numeric_limits<double>::quiet_NaN();
  r.jain_over_senders = r.jain_fairness;
  if (config_.workload == Workload::kIncast) {
    const double link_gbps = config_.fabric.host_gbps * config_.fabric.planes;
    if (r.completion_us > 0) {
      r.goodput_vs_receiver_link = static_cast<double>(r.workload_bytes_placed) * 8 /
                                   (r.completion_us * 1000 * link_gbps);
    }
    // Per sender host (each sends one flow into host 0 today; summed should that change).
    std::map<uint32_t, std::pair<uint64_t, int64_t>> by_sender;  // bytes, busy ns
    for (const Flow& f : flows_) {
      if (f.background || f.dst != 0) continue;
      by_sender[f.src].first += f.bytes;
      by_sender[f.src].second += f.busy_ns;
    }
    double s1 = 0, s2 = 0;
    size_t senders = 0;
    for (const auto& [host, bytes_busy] : by_sender) {
      if (bytes_busy.second <= 0) continue;
      const double gbps =
          static_cast<double>(bytes_busy.first) * 8 / static_cast<double>(bytes_busy.second);
      s1 += gbps;
      s2 += gbps * gbps;
      ++senders;
    }
    r.jain_over_senders = s2 > 0 ? s1 * s1 / (static_cast<double>(senders) * s2) : 0;
  }
  if (timeline_on_) {
    ClusterTimeline& tl = r.timeline;
    tl.bin_us = static_cast<double>(bin_ns_) / 1000.0;
    tl.rx_gbps.clear();
    for (uint64_t bytes : tl.rx_bytes) {
      tl.rx_gbps.push_back(static_cast<double>(bytes) * 8 / static_cast<double>(bin_ns_));
    }
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (scratch_[i] != kGuardByte || scratch_[scratch_.size() - 1 - i] != kGuardByte) {
      DataError("guard_zone_written");
      break;
    }
  }
  for (const Conn& c : conns_) {
    const core::ConnectionCounters& k = c.req->counters();
    r.retransmits += k.retransmits;
    r.gap_retransmits += k.gap_retransmits;
    r.timeout_retransmits += k.timeout_retransmits;
    r.tail_probes += k.tail_probes;
    r.loss_queries += k.loss_queries;
    r.rerouted_packets += k.rerouted_packets;
    r.hedged_packets += k.hedged_packets;
    r.pulled_pkts += k.pulled_pkts;
    for (uint16_t p = 0; p < c.req->path_count(); ++p) r.timeouts += c.req->path_stats(p).timeouts;
  }
  for (const Host& h : hosts_) {
    const core::PullPacerCounters& p = h.endpoint->receive_budget().pacer().counters();
    r.pulls.pulls_with_ack += p.pulls_with_ack;
    r.pulls.pulls_deferred += p.pulls_deferred;
    r.pulls.unsolicited_bytes += p.unsolicited_bytes;
  }
  if (conns_.size() > 0) r.core_heap_bytes_per_connection = heap_bytes_ / (2 * conns_.size());
  return r;
}

}  // namespace

std::string_view WorkloadName(Workload w) {
  switch (w) {
    case Workload::kPair: return "pair";
    case Workload::kPermutation: return "permutation";
    case Workload::kIncast: return "incast";
    case Workload::kAllToAll: return "alltoall";
    case Workload::kAllReduceRing: return "allreduce-ring";
  }
  return "?";
}

absl::StatusOr<Workload> ParseWorkload(std::string_view name) {
  for (Workload w : {Workload::kPair, Workload::kPermutation, Workload::kIncast,
                     Workload::kAllToAll, Workload::kAllReduceRing}) {
    if (name == WorkloadName(w)) return w;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown workload '", std::string(name), "' (pair, permutation, incast, alltoall, allreduce-ring)"));
}

double ClusterConfig::PullRateGbps() const {
  return pull_rate_gbps.value_or(fabric.planes * fabric.host_gbps);
}

core::ReceiveBudgetConfig ClusterConfig::HostBudget() const {
  return SimHostBudget(ReceiveBudgetBytes(), mtu, PullRateGbps());
}

uint64_t ClusterConfig::ReceiveBudgetBytes() const {
  if (receive_budget_bytes) return *receive_budget_bytes;
  if (cc != CongestionKind::kWindow) return 0;  // RoCE as deployed: no receiver hints
  // A route through a spine: 4 hops each way, a packet's serialization at each of the 4 hops out.
  const double mtu_wire = static_cast<double>(mtu + wire::kDataHeadersSize + kWireOverheadBytes);
  const double rtt_ns = 8 * static_cast<double>(fabric.hop_delay.count()) +
                        2 * mtu_wire * 8 / fabric.host_gbps + 2 * mtu_wire * 8 / fabric.fabric_gbps;
  return SimDefaultBudgetBytes(fabric.planes * fabric.host_gbps,
                               Duration(static_cast<int64_t>(rtt_ns)));
}

absl::Status ClusterConfig::Validate() const {
  if (absl::Status s = fabric.Validate(); !s.ok()) return s;
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (fabric.hosts < 2) return bad("--hosts must be >= 2");
  if (paths < 1 || paths > 256) return bad("--paths must be in 1..256");
  if (pull_rate_gbps && !(*pull_rate_gbps >= 0)) return bad("--pull-rate-gbps must be >= 0");
  if (connections_per_pair < 1) return bad("--conns-per-pair must be >= 1");
  if (mtu < 64 || mtu > 65000) return bad("--mtu must be in 64..65000");
  if (message_bytes < 1 || message_bytes > (uint64_t{1} << 30)) {
    return bad("--size must be in 1..1 GiB");
  }
  if (steps < 1) return bad("--steps must be >= 1");
  if (workload == Workload::kIncast && (incast_degree < 1 || incast_degree >= fabric.hosts)) {
    return bad("--incast-degree must be in 1..hosts-1");
  }
  if (background_incast >= fabric.hosts) return bad("--background-incast must be below --hosts");
  if (timeline_bin.count() < 0) return bad("--timeline-us must be >= 0");
  if (timeline_bin.count() > 0 && timeline_max_samples < 2) {
    return bad("timeline: at most ", timeline_max_samples, " samples; at least 2 are needed");
  }
  const uint64_t flows = workload == Workload::kAllToAll
                             ? uint64_t{fabric.hosts} * (fabric.hosts - 1)
                         : workload == Workload::kPair   ? 1
                         : workload == Workload::kIncast ? incast_degree
                                                         : fabric.hosts;
  const uint64_t connections = flows * connections_per_pair;
  if (connections > 4'000'000) {
    return bad("the workload needs ", connections, " connections; at most 4,000,000 are allowed");
  }
  if (transport == TransportKind::kReorderBuffer &&
      (reorder_buffer_kb == 0 || uint64_t{reorder_buffer_kb} * 1024 < mtu)) {
    return bad("--reorder-buffer-kb must hold at least one --mtu");
  }
  if (ack_every < 1) return bad("--ack-every must be >= 1");
  if (cc == CongestionKind::kDcqcn && transport != TransportKind::kGoBackN) {
    return bad("--cc dcqcn is the go-back-N profile's rate control: add --transport gbn");
  }
  return absl::OkStatus();
}

std::string_view CongestionName(CongestionKind k) {
  switch (k) {
    case CongestionKind::kWindow: return "window";
    case CongestionKind::kNone: return "none";
    case CongestionKind::kDcqcn: return "dcqcn";
  }
  return "?";
}

absl::StatusOr<ClusterResult> RunCluster(const ClusterConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto cluster = std::make_unique<Cluster>(config);
  if (absl::Status s = cluster->Setup(); !s.ok()) return s;
  const Clock::time_point set_up = Clock::now();
  const double cpu_before = ProcessCpuSeconds();
  cluster->Run();
  const double cpu_ran = ProcessCpuSeconds();
  const Clock::time_point ran = Clock::now();
  ClusterResult r = cluster->Finish();
  if (config.measure) {
    r.setup_wall_s = std::chrono::duration<double>(set_up - start).count();
    r.run_wall_s = std::chrono::duration<double>(ran - set_up).count();
    r.run_cpu_s = cpu_ran - cpu_before;
  }
  return r;
}

std::string ClusterResultToJson(const ClusterResult& r) {
  const ClusterConfig& c = r.config;
  const LeafSpineConfig& f = c.fabric;
  JsonWriter w;
  w.BeginObject();
  w.Field("schema", "mrsim.cluster.v1");
  w.BeginObject("config");
  w.Field("topology", "leaf-spine");
  w.Field("hosts", f.hosts);
  w.Field("hosts_per_leaf", f.hosts_per_leaf);
  w.Field("leaves", f.leaves());
  w.Field("spines", f.spines);
  w.Field("planes", uint64_t{f.planes});
  w.Field("host_gbps", f.host_gbps);
  w.Field("fabric_gbps", f.fabric_gbps);
  w.Field("hop_delay_us", static_cast<double>(f.hop_delay.count()) / 1000.0);
  w.Field("fabric", f.lossless ? "lossless" : "lossy");
  w.Field("queue_kb", f.queue_bytes / 1024);
  w.Field("ecn_kb", f.ecn_threshold_bytes / 1024);
  if (f.ecn_pmax > 0) {  // RED; absent with step marking, so older runs' JSON stands
    w.Field("ecn_kmax_kb", f.ecn_kmax_bytes / 1024);
    w.Field("ecn_pmax", f.ecn_pmax);
  }
  if (f.loss_probability > 0) w.Field("loss", f.loss_probability);
  w.Field("pfc_xoff_kb", f.pfc_xoff_bytes / 1024);
  w.Field("pfc_xon_kb", f.pfc_xon_bytes / 1024);
  w.Field("nic_queues", f.nic_control_first ? "control-first" : "fifo");
  w.Field("reconverge_us", static_cast<double>(f.reconvergence.count()) / 1000.0);
  w.Field("faults", uint64_t{c.faults.size()});
  w.Field("transport", TransportName(c.transport));
  if (c.cc != CongestionKind::kWindow) w.Field("cc", CongestionName(c.cc));  // as ecn_pmax
  w.Field("paths", c.EffectivePaths());
  w.Field("conns_per_pair", c.connections_per_pair);
  w.Field("mtu", c.mtu);
  w.Field("ack_every", c.ack_every);
  w.Field("workload", WorkloadName(c.workload));
  w.Field("size", c.message_bytes);
  w.Field("steps", c.steps);
  if (c.workload == Workload::kIncast) w.Field("incast_degree", c.incast_degree);
  w.Field("background_incast", c.background_incast);
  w.Field("receive_budget_bytes", c.ReceiveBudgetBytes());
  w.Field("pull_rate_gbps", c.PullRateGbps());
  w.Field("seed", c.seed);
  w.EndObject();
  w.Field("stop_reason", r.stop_reason);
  w.Field("sim_time_us", r.sim_time_us);
  w.Field("events", r.events);
  w.Field("flows", r.flows);
  w.Field("connections", r.connections);
  w.Field("messages_posted", r.messages_posted);
  w.Field("messages_completed", r.messages_completed);
  w.Field("messages_failed", r.messages_failed);
  w.Field("background_messages_completed", r.background_messages_completed);
  w.BeginObject("failed_by_status");
  for (const auto& [k, v] : r.failed_by_status) w.Field(k, v);
  w.EndObject();
  w.Field("bytes_verified", r.bytes_verified);
  w.Field("data_errors", r.data_errors);
  w.BeginObject("data_errors_by_kind");
  for (const auto& [k, v] : r.data_errors_by_kind) w.Field(k, v);
  w.EndObject();
  w.Field("ideal_us", r.ideal_us);
  w.Field("completion_us", r.completion_us);
  w.Field("vs_ideal", r.vs_ideal);
  w.BeginObject("step_us");
  w.Field("count", uint64_t{r.steps_completed});
  w.Field("p50", r.step_p50_us);
  w.Field("p99", r.step_p99_us);
  w.Field("max", r.step_max_us);
  w.EndObject();
  w.BeginObject("flow_goodput_gbps");
  w.Field("min", r.flow_goodput_gbps_min);
  w.Field("mean", r.flow_goodput_gbps_mean);
  w.Field("max", r.flow_goodput_gbps_max);
  w.Field("jain_fairness", r.jain_fairness);
  w.EndObject();
  w.BeginObject("drops");
  w.Field("tail", r.fabric.dropped[static_cast<size_t>(FabricDrop::kTail)]);
  w.Field("loss", r.fabric.dropped[static_cast<size_t>(FabricDrop::kLoss)]);
  w.Field("down", r.fabric.dropped[static_cast<size_t>(FabricDrop::kDown)]);
  w.Field("no_route", r.fabric.dropped[static_cast<size_t>(FabricDrop::kNoRoute)]);
  w.EndObject();
  w.Field("ce_marked", r.fabric.ce_marked);
  if (c.cc == CongestionKind::kDcqcn) w.Field("cnps", r.cnps);
  w.BeginObject("pfc");
  w.Field("pauses", r.fabric.pauses);
  w.Field("paused_us", static_cast<double>(r.fabric.paused_ns) / 1000.0);
  w.Field("max_switch_buffer_kb", static_cast<double>(r.fabric.max_switch_buffer_bytes) / 1024);
  w.EndObject();
  w.Field("route_changes", r.fabric.route_changes);
  w.Field("retransmits", r.retransmits);
  w.BeginObject("retransmits_by_cause");
  w.Field("gap", r.gap_retransmits);
  w.Field("timeout", r.timeout_retransmits);
  w.Field("reroute", r.rerouted_packets);
  w.Field("hedge", r.hedged_packets);
  w.Field("tail_probe", r.tail_probes);
  w.EndObject();
  w.Field("timeouts", r.timeouts);
  w.Field("loss_queries", r.loss_queries);
  w.Field("path_state_changes", r.path_state_changes);
  w.Field("port_rotations", r.port_rotations);
  w.BeginObject("path_events_by_reason");
  for (const auto& [k, v] : r.path_events_by_reason) w.Field(k, v);
  w.EndObject();
  // Incast figures (cluster.h's header).
  uint64_t data_dropped = 0;
  for (uint64_t d : r.fabric.data_dropped) data_dropped += d;
  w.Field("data_packets_sent", r.fabric.data_sent);
  w.Field("data_packets_dropped", data_dropped);
  w.Field("data_drop_fraction",
          r.fabric.data_sent > 0
              ? static_cast<double>(data_dropped) / static_cast<double>(r.fabric.data_sent)
              : 0.0);
  w.BeginObject("data_drops");
  w.Field("tail", r.fabric.data_dropped[static_cast<size_t>(FabricDrop::kTail)]);
  w.Field("loss", r.fabric.data_dropped[static_cast<size_t>(FabricDrop::kLoss)]);
  w.Field("down", r.fabric.data_dropped[static_cast<size_t>(FabricDrop::kDown)]);
  w.Field("no_route", r.fabric.data_dropped[static_cast<size_t>(FabricDrop::kNoRoute)]);
  w.EndObject();
  w.BeginObject("message_completion_us");
  w.Field("count", r.messages_timed);
  w.Field("p50", r.message_p50_us);
  w.Field("p99", r.message_p99_us);
  w.Field("max", r.message_max_us);
  w.EndObject();
  w.Field("p99_vs_ideal", r.p99_vs_ideal);
  w.Field("paths_failed", r.paths_failed);
  w.BeginObject("pulls");
  w.Field("with_ack", r.pulls.pulls_with_ack);
  w.Field("deferred", r.pulls.pulls_deferred);
  w.Field("unsolicited_bytes", r.pulls.unsolicited_bytes);
  w.Field("pulled_pkts", r.pulled_pkts);
  w.EndObject();
  w.Field("workload_bytes_placed", r.workload_bytes_placed);
  w.Field("goodput_vs_receiver_link", r.goodput_vs_receiver_link);
  w.Field("jain_over_senders", r.jain_over_senders);
  if (r.has_timeline) {
    const ClusterTimeline& tl = r.timeline;
    w.BeginObject("timeline");
    w.Field("requested_bin_us", tl.requested_bin_us);
    w.Field("bin_us", tl.bin_us);
    w.Field("samples", uint64_t{tl.samples()});
    w.Field("connections_sampled", tl.connections_sampled);
    w.Field("receiver_queue", "sum over planes");
    auto array = [&w](std::string_view key, const std::vector<double>& v) {
      w.BeginArray(key);
      for (double x : v) w.Element(x);
      w.EndArray();
    };
    array("t_us", tl.t_us);
    array("rx_gbps", tl.rx_gbps);
    array("queue_kb_max", tl.queue_kb_max);
    array("receiver_queue_kb", tl.receiver_queue_kb);
    array("cwnd_kb_mean", tl.cwnd_kb_mean);
    array("window_kb_mean", tl.window_kb_mean);
    array("inflight_kb_total", tl.inflight_kb_total);
    w.EndObject();
  }
  if (c.measure) {
    w.BeginObject("measured");
    w.Field("setup_wall_s", r.setup_wall_s);
    w.Field("run_wall_s", r.run_wall_s);
    w.Field("events_per_wall_s", r.run_wall_s > 0 ? r.events / r.run_wall_s : 0.0);
    w.Field("run_cpu_s", r.run_cpu_s);
    w.Field("events_per_cpu_s", r.run_cpu_s > 0 ? r.events / r.run_cpu_s : 0.0);
    w.Field("core_heap_bytes_per_connection", r.core_heap_bytes_per_connection);
    w.EndObject();
  }
  w.EndObject();
  std::string out = w.Take();
  out += '\n';
  return out;
}

std::string ClusterResultSummary(const ClusterResult& r) {
  const ClusterConfig& c = r.config;
  std::string s = absl::StrFormat(
      "mrsim leaf-spine: %u hosts (%u per leaf, %u spines, %u planes, %s), %s, %s of %s x %u "
      "steps\n",
      c.fabric.hosts, c.fabric.hosts_per_leaf, c.fabric.spines, c.fabric.planes,
      c.fabric.lossless ? "lossless" : "lossy", TransportName(c.transport),
      WorkloadName(c.workload), absl::StrCat(c.message_bytes, " B"), c.steps);
  absl::StrAppendFormat(&s, "  stop        %s after %.1f us simulated, %u events\n", r.stop_reason,
                        r.sim_time_us, r.events);
  absl::StrAppendFormat(&s, "  messages    %u completed, %u failed, %u bytes verified, %u data "
                        "errors\n", r.messages_completed, r.messages_failed, r.bytes_verified,
                        r.data_errors);
  absl::StrAppendFormat(&s, "  completion  %.1f us, ideal %.1f us, vs_ideal %.3f; step p50 %.1f "
                        "p99 %.1f max %.1f us\n", r.completion_us, r.ideal_us, r.vs_ideal,
                        r.step_p50_us, r.step_p99_us, r.step_max_us);
  absl::StrAppendFormat(&s, "  flows       goodput min %.1f mean %.1f max %.1f Gb/s, Jain %.3f\n",
                        r.flow_goodput_gbps_min, r.flow_goodput_gbps_mean,
                        r.flow_goodput_gbps_max, r.jain_fairness);
  absl::StrAppendFormat(
      &s, "  fabric      drops tail %u loss %u down %u no_route %u, CE %u, pauses %u (%.1f us)\n",
      r.fabric.dropped[0], r.fabric.dropped[1], r.fabric.dropped[2], r.fabric.dropped[3],
      r.fabric.ce_marked, r.fabric.pauses, static_cast<double>(r.fabric.paused_ns) / 1000.0);
  absl::StrAppendFormat(&s, "  paths       %u retransmits, %u timeouts, %u state changes, %u "
                        "rotations\n", r.retransmits, r.timeouts, r.path_state_changes,
                        r.port_rotations);
  uint64_t data_dropped = 0;
  for (uint64_t d : r.fabric.data_dropped) data_dropped += d;
  absl::StrAppendFormat(&s, "  incast      %u data packets sent, %u dropped; message p50 %.1f p99 "
                        "%.1f max %.1f us (p99 %.2f x step ideal); %u paths failed; Jain over "
                        "senders %.3f", r.fabric.data_sent, data_dropped, r.message_p50_us,
                        r.message_p99_us, r.message_max_us, r.p99_vs_ideal, r.paths_failed,
                        r.jain_over_senders);
  if (c.workload == Workload::kIncast) {
    absl::StrAppendFormat(&s, "; goodput %.3f of host 0's links", r.goodput_vs_receiver_link);
  }
  s += '\n';
  return s;
}

}  // namespace metaroce::sim
