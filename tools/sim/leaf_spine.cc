#include "tools/sim/leaf_spine.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace metaroce::sim {
namespace {

constexpr int64_t kPsPerNs = 1000;
constexpr uint32_t kNone = UINT32_MAX;

int64_t ToPs(Instant t) { return t.ns * kPsPerNs; }
Instant CeilToInstant(int64_t ps) { return Instant{(ps + kPsPerNs - 1) / kPsPerNs}; }

// Random streams of the fabric, derived from its seed.
enum : uint64_t { kEcmpStream = 11, kPortLossStream = 12, kRedStream = 13 };

}  // namespace

absl::Status LeafSpineConfig::Validate() const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (hosts < 1) return bad("leaf-spine: hosts must be >= 1");
  if (hosts_per_leaf < 1) return bad("leaf-spine: hosts per leaf must be >= 1");
  if (spines < 1) return bad("leaf-spine: spines must be >= 1");
  if (planes < 1 || planes > 16) return bad("leaf-spine: planes must be in 1..16");
  if (!(host_gbps > 0) || !(fabric_gbps > 0)) return bad("leaf-spine: link rates must be > 0");
  if (hop_delay.count() < 0) return bad("leaf-spine: hop delay must be >= 0");
  if (reconvergence.count() < 0) return bad("leaf-spine: reconvergence must be >= 0");
  if (!(loss_probability >= 0 && loss_probability <= 1)) {
    return bad("leaf-spine: --loss must be in [0, 1]");
  }
  if (queue_bytes < 2 * WireBytes(9000)) {
    return bad("leaf-spine: queue_bytes ", queue_bytes, " holds less than two jumbo frames");
  }
  if (ecn_pmax != 0 && !(ecn_pmax > 0 && ecn_pmax <= 1 && ecn_kmax_bytes > ecn_threshold_bytes)) {
    return bad("leaf-spine: RED marking needs 0 < pmax <= 1 and kmin < kmax");
  }
  if (lossless && !(pfc_xon_bytes < pfc_xoff_bytes)) {
    return bad("leaf-spine: PFC XON (", pfc_xon_bytes, ") must be below XOFF (", pfc_xoff_bytes,
               ")");
  }
  const uint64_t nodes = uint64_t{planes} * (uint64_t{hosts} + leaves() + spines);
  if (nodes > (uint64_t{1} << 28)) return bad("leaf-spine: too many devices (", nodes, ")");
  return absl::OkStatus();
}

LeafSpineFabric::LeafSpineFabric(const LeafSpineConfig& config, EventQueue& queue,
                                 DeliverFn deliver)
    : config_(config), queue_(queue), deliver_(std::move(deliver)),
      red_rng_(DeriveSeed(config.seed, kRedStream)) {
  const uint32_t H = config_.hosts, K = config_.hosts_per_leaf, S = config_.spines;
  const uint32_t L = config_.leaves();
  nodes_.resize(uint64_t{config_.planes} * NodesPerPlane());
  leaf_seed_.assign(nodes_.size(), 0);
  // Ports, node by node: a host's one port; a leaf's ports to its hosts then to every spine; a
  // spine's ports to every leaf.
  uint32_t next = 0;
  for (uint8_t plane = 0; plane < config_.planes; ++plane) {
    for (uint32_t h = 0; h < H; ++h) nodes_[HostNode(plane, h)] = {next++, 1, 0};
    for (uint32_t l = 0; l < L; ++l) {
      const uint32_t under = std::min(K, H - l * K);
      nodes_[LeafNode(plane, l)] = {next, under + S, 0};
      next += under + S;
      leaf_seed_[LeafNode(plane, l)] = DeriveSeed(config_.seed, kEcmpStream, plane, l);
    }
    for (uint32_t s = 0; s < S; ++s) {
      nodes_[SpineNode(plane, s)] = {next, L, 0};
      next += L;
    }
  }
  ports_.resize(next);
  port_node_.resize(next);
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    for (uint32_t i = 0; i < nodes_[n].port_count; ++i) port_node_[nodes_[n].first_port + i] = n;
  }
  auto join = [&](uint32_t a_port, uint32_t b_port, double gbps) {
    for (auto [from, to] : {std::pair{a_port, b_port}, std::pair{b_port, a_port}}) {
      Port& p = ports_[from];
      p.peer = port_node_[to];
      p.peer_port = to;
      p.gbps = gbps;
      p.rng = Xoshiro256(DeriveSeed(config_.seed, kPortLossStream, from));
      p.loss = config_.loss_probability;
    }
  };
  for (uint8_t plane = 0; plane < config_.planes; ++plane) {
    for (uint32_t h = 0; h < H; ++h) {
      const uint32_t l = h / K;
      join(nodes_[HostNode(plane, h)].first_port, nodes_[LeafNode(plane, l)].first_port + (h - l * K),
           config_.host_gbps);
    }
    for (uint32_t l = 0; l < L; ++l) {
      const uint32_t under = std::min(K, H - l * K);
      for (uint32_t s = 0; s < S; ++s) {
        join(nodes_[LeafNode(plane, l)].first_port + under + s,
             nodes_[SpineNode(plane, s)].first_port + l, config_.fabric_gbps);
      }
    }
  }
}

uint32_t LeafSpineFabric::PortIndex(const FabricLink& link, bool upward) const {
  const uint32_t K = config_.hosts_per_leaf;
  if (link.tier == FabricLink::Tier::kHost) {
    const uint32_t host_port = nodes_[HostNode(link.plane, link.a)].first_port;
    return upward ? host_port : ports_[host_port].peer_port;
  }
  const uint32_t l = link.a;
  const uint32_t under = std::min(K, config_.hosts - l * K);
  const uint32_t leaf_port = nodes_[LeafNode(link.plane, l)].first_port + under + link.b;
  return upward ? leaf_port : ports_[leaf_port].peer_port;
}

const PortCounters& LeafSpineFabric::counters(const FabricLink& link, bool upward) const {
  return ports_[PortIndex(link, upward)].counters;
}

bool LeafSpineFabric::SpineUsable(uint8_t plane, uint32_t leaf, uint32_t spine,
                                  uint32_t dst_leaf) const {
  const uint32_t up = PortIndex(FabricLink{plane, FabricLink::Tier::kSpine, leaf, spine}, true);
  const uint32_t down =
      PortIndex(FabricLink{plane, FabricLink::Tier::kSpine, dst_leaf, spine}, false);
  return !ports_[up].routed_down && !ports_[down].routed_down;
}

int LeafSpineFabric::SpineFor(const FabricPacket& p) const {
  const uint32_t leaf = LeafOf(p.src_host), dst_leaf = LeafOf(p.dst_host);
  if (leaf == dst_leaf) return -1;
  const uint64_t h = SplitMix64(
      leaf_seed_[LeafNode(p.plane, leaf)] ^
      SplitMix64((uint64_t{p.src_host} << 32 | p.dst_host) ^
                 SplitMix64((uint64_t{p.src_port} << 16 | p.dst_port) ^ (uint64_t{17} << 40))));
  const uint32_t S = config_.spines;
  if (routed_down_links_ == 0) return static_cast<int>(h % S);
  // Some links left the routing tables: hash over the spines that still lead there.
  uint32_t usable = 0;
  for (uint32_t s = 0; s < S; ++s) usable += SpineUsable(p.plane, leaf, s, dst_leaf);
  if (usable == 0) return -1;
  uint32_t pick = static_cast<uint32_t>(h % usable);
  for (uint32_t s = 0; s < S; ++s) {
    if (SpineUsable(p.plane, leaf, s, dst_leaf) && pick-- == 0) return static_cast<int>(s);
  }
  return -1;
}

uint32_t LeafSpineFabric::Route(uint32_t node, const FabricPacket& p) const {
  const Node& n = nodes_[node];
  const uint32_t local = node % NodesPerPlane();
  const uint32_t K = config_.hosts_per_leaf;
  if (local < config_.hosts) return n.first_port;  // a host's NIC
  const uint32_t dst_leaf = LeafOf(p.dst_host);
  if (local < config_.hosts + config_.leaves()) {
    const uint32_t leaf = local - config_.hosts;
    if (leaf == dst_leaf) return n.first_port + (p.dst_host - leaf * K);
    const int spine = SpineFor(p);
    if (spine < 0) return kNone;
    return n.first_port + std::min(K, config_.hosts - leaf * K) + static_cast<uint32_t>(spine);
  }
  return n.first_port + dst_leaf;  // a spine: the one link to the destination's leaf
}

uint32_t LeafSpineFabric::NewSlot(FabricPacket packet) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.wire_bytes = WireBytes(packet.bytes.size() + packet.payload.size());
  s.packet = std::move(packet);
  s.ingress = kNone;
  return slot;
}

void LeafSpineFabric::FreeSlot(uint32_t slot) {
  buffers_.Recycle(std::move(slots_[slot].packet.bytes));
  slots_[slot].packet.bytes = {};
  free_slots_.push_back(slot);
}

void LeafSpineFabric::Send(FabricPacket packet) {
  const uint32_t node = HostNode(packet.plane, packet.src_host);
  data_sent_ += packet.data;
  const uint32_t slot = NewSlot(std::move(packet));
  Enqueue(node, nodes_[node].first_port, slot);
}

bool LeafSpineFabric::EcnMarks(uint64_t backlog) {
  const uint64_t kmin = config_.ecn_threshold_bytes;
  if (config_.ecn_pmax == 0 || backlog <= kmin) return backlog > kmin;
  if (backlog >= config_.ecn_kmax_bytes) return true;
  const double p = config_.ecn_pmax * static_cast<double>(backlog - kmin) /
                   static_cast<double>(config_.ecn_kmax_bytes - kmin);
  return red_rng_.NextUnit() < p;
}

void LeafSpineFabric::Enqueue(uint32_t node, uint32_t port, uint32_t slot) {
  Port& q = ports_[port];
  Slot& s = slots_[slot];
  if (q.down) {
    Drop(port, slot, FabricDrop::kDown);
    return;
  }
  if (IsSwitch(node)) {
    if (!config_.lossless && q.backlog_bytes + s.wire_bytes > config_.queue_bytes) {
      Drop(port, slot, FabricDrop::kTail);
      return;
    }
    if (!s.packet.ce && EcnMarks(q.backlog_bytes)) {
      s.packet.ce = true;
      ++q.counters.ce_marked;
    }
  }
  q.backlog_bytes += s.wire_bytes;
  q.counters.max_backlog_bytes = std::max(q.counters.max_backlog_bytes, q.backlog_bytes);
  if (!s.packet.data && config_.nic_control_first && !IsSwitch(node)) {
    q.control.push(slot);
  } else {
    q.fifo.push(slot);
  }
  if (!q.busy && !q.paused) StartNext(port);
}

void LeafSpineFabric::StartNext(uint32_t port) {
  Port& q = ports_[port];
  // A dead link drops what would start serializing.
  for (SlotFifo* f : {&q.fifo, &q.control}) {
    while (!f->empty() && q.down) {
      const uint32_t slot = f->pop();
      q.backlog_bytes -= slots_[slot].wire_bytes;
      Drop(port, slot, FabricDrop::kDown);
    }
  }
  if (q.fifo.empty() && q.control.empty()) return;
  // The control queue first (only hosts' NICs fill it), then the FIFO.
  q.on_wire = !q.control.empty() ? q.control.pop() : q.fifo.pop();
  const Slot& s = slots_[q.on_wire];
  q.busy = true;
  const int64_t start_ps = std::max(ToPs(queue_.now()), q.free_at_ps);
  q.free_at_ps = start_ps + std::llround(static_cast<double>(s.wire_bytes) * 8000.0 /
                                         (q.gbps * q.rate_factor));
  queue_.Schedule(CeilToInstant(q.free_at_ps), [this, port] { OnSerialized(port); });
}

void LeafSpineFabric::OnSerialized(uint32_t port) {
  Port& q = ports_[port];
  const uint32_t slot = q.on_wire;
  Slot& s = slots_[slot];
  q.busy = false;
  q.backlog_bytes -= s.wire_bytes;
  ++q.counters.tx_packets;
  q.counters.tx_bytes += s.wire_bytes;
  Leave(port_node_[port], slot);
  // One draw per serialized packet while a loss fault holds the link.
  if (q.loss > 0 && q.rng.NextUnit() < q.loss) {
    Drop(port, slot, FabricDrop::kLoss);
  } else {
    const int64_t arrival_ps = q.free_at_ps + config_.hop_delay.count() * kPsPerNs;
    const uint32_t peer = q.peer, ingress = q.peer_port;
    queue_.Schedule(CeilToInstant(arrival_ps),
                    [this, peer, ingress, slot] { OnArrival(peer, ingress, slot); });
  }
  if (!q.paused) StartNext(port);
}

void LeafSpineFabric::OnArrival(uint32_t node, uint32_t ingress, uint32_t slot) {
  // A link that died while the packet was on it loses it.
  if (ports_[ingress].down) {
    Drop(ports_[ingress].peer_port, slot, FabricDrop::kDown);
    return;
  }
  Slot& s = slots_[slot];
  if (!IsSwitch(node)) {
    // Out of the slot first: delivery makes the host send (ACKs), which may grow slots_.
    FabricPacket packet = std::move(s.packet);
    FreeSlot(slot);
    ++delivered_;
    if (!packet.payload.empty()) {  // the payload joins the headers only now
      std::vector<std::byte> whole = TakeBuffer();
      whole.reserve(packet.bytes.size() + packet.payload.size());
      whole.assign(packet.bytes.begin(), packet.bytes.end());
      whole.insert(whole.end(), packet.payload.begin(), packet.payload.end());
      packet.bytes = std::move(whole);
      packet.payload = {};
    }
    deliver_(packet);
    buffers_.Recycle(std::move(packet.bytes));
    return;
  }
  s.ingress = ingress;
  Port& in = ports_[ingress];
  in.ingress_bytes += s.wire_bytes;
  Node& n = nodes_[node];
  n.buffer_bytes += s.wire_bytes;
  max_switch_buffer_ = std::max(max_switch_buffer_, n.buffer_bytes);
  if (config_.lossless && !in.pause_sent && in.ingress_bytes > config_.pfc_xoff_bytes) {
    in.pause_sent = true;
    const uint32_t upstream = in.peer_port;
    queue_.ScheduleAfter(config_.hop_delay, [this, upstream] { SetPaused(upstream, true); });
  }
  const uint32_t out = Route(node, s.packet);
  if (out == kNone) {
    Drop(kNone, slot, FabricDrop::kNoRoute);
    return;
  }
  Enqueue(node, out, slot);
}

void LeafSpineFabric::Leave(uint32_t node, uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.ingress == kNone) return;
  Port& in = ports_[s.ingress];
  s.ingress = kNone;
  in.ingress_bytes -= s.wire_bytes;
  nodes_[node].buffer_bytes -= s.wire_bytes;
  if (in.pause_sent && in.ingress_bytes < config_.pfc_xon_bytes) {
    in.pause_sent = false;
    const uint32_t upstream = in.peer_port;
    queue_.ScheduleAfter(config_.hop_delay, [this, upstream] { SetPaused(upstream, false); });
  }
}

void LeafSpineFabric::Drop(uint32_t port, uint32_t slot, FabricDrop why) {
  const uint32_t node = slots_[slot].ingress == kNone ? kNone : port_node_[slots_[slot].ingress];
  if (node != kNone) {
    // The slot's ingress port belongs to the node that holds it.
    Leave(node, slot);
  }
  data_dropped_[static_cast<size_t>(why)] += slots_[slot].packet.data;
  if (port != kNone) {
    ++ports_[port].counters.dropped[static_cast<size_t>(why)];
  } else {
    ++unrouted_;
  }
  FreeSlot(slot);
}

void LeafSpineFabric::SetPaused(uint32_t port, bool paused) {
  Port& q = ports_[port];
  if (paused == q.paused) return;
  q.paused = paused;
  if (paused) {
    q.paused_since = queue_.now();
    ++q.counters.pauses;
    return;
  }
  q.counters.paused_ns += (queue_.now() - q.paused_since).count();
  if (!q.busy) StartNext(port);
}

void LeafSpineFabric::SetDown(uint32_t port, bool down) {
  Port& q = ports_[port];
  if (q.down == down) return;
  q.down = down;
  const uint32_t epoch = ++q.down_epoch;
  if (down && !q.busy) StartNext(port);  // what waits behind a pause or idles is lost
  if (config_.reconvergence.count() > 0) {
    queue_.ScheduleAfter(config_.reconvergence, [this, port, epoch, down] {
      Port& p = ports_[port];
      if (p.down_epoch != epoch || p.routed_down == down) return;  // changed again since
      p.routed_down = down;
      routed_down_links_ += down ? 1 : -1;
      ++route_changes_;
    });
  }
}

void LeafSpineFabric::ApplyToLinks(const FabricFault& f,
                                   const std::function<void(uint32_t port)>& fn) {
  std::vector<FabricLink> links;
  if (f.whole_spine) {
    for (uint32_t l = 0; l < config_.leaves(); ++l) {
      links.push_back({f.plane, FabricLink::Tier::kSpine, l, f.spine});
    }
  } else {
    links.push_back(f.link);
  }
  for (const FabricLink& link : links) {
    fn(PortIndex(link, true));
    fn(PortIndex(link, false));
  }
}

absl::Status LeafSpineFabric::AddFault(const FabricFault& f) {
  const FabricLink& link = f.link;
  const uint8_t plane = f.whole_spine ? f.plane : link.plane;
  if (plane >= config_.planes) return absl::InvalidArgumentError("fault: no such plane");
  if (f.whole_spine ? f.spine >= config_.spines
                    : (link.tier == FabricLink::Tier::kHost
                           ? link.a >= config_.hosts
                           : (link.a >= config_.leaves() || link.b >= config_.spines))) {
    return absl::InvalidArgumentError("fault: no such link or spine");
  }
  if (!(f.window.begin < f.window.end)) return absl::InvalidArgumentError("fault: empty window");
  switch (f.kind) {
    case FabricFault::Kind::kLoss:
      if (!(f.loss_probability >= 0 && f.loss_probability <= 1)) {
        return absl::InvalidArgumentError("fault: loss probability outside 0..1");
      }
      break;
    case FabricFault::Kind::kRateCut:
      if (!(f.rate_factor > 0 && f.rate_factor <= 1)) {
        return absl::InvalidArgumentError("fault: rate factor outside (0, 1]");
      }
      break;
    case FabricFault::Kind::kFlap:
      if (f.flap_period.count() < 2 || f.window.end == core::kNever) {
        return absl::InvalidArgumentError("fault: a flap needs a period and an end");
      }
      break;
    case FabricFault::Kind::kBlackhole:
      break;
  }
  std::vector<uint32_t> ports;
  ApplyToLinks(f, [&](uint32_t port) { ports.push_back(port); });
  auto at = [&](Instant t, auto fn) {
    queue_.Schedule(t, [this, ports, fn] {
      for (uint32_t p : ports) fn(p);
    });
  };
  switch (f.kind) {
    case FabricFault::Kind::kLoss:
      at(f.window.begin, [this, p = f.loss_probability](uint32_t port) { ports_[port].loss = p; });
      if (f.window.end != core::kNever) {
        at(f.window.end,
           [this](uint32_t port) { ports_[port].loss = config_.loss_probability; });
      }
      break;
    case FabricFault::Kind::kRateCut:
      at(f.window.begin,
         [this, r = f.rate_factor](uint32_t port) { ports_[port].rate_factor = r; });
      if (f.window.end != core::kNever) {
        at(f.window.end, [this](uint32_t port) { ports_[port].rate_factor = 1; });
      }
      break;
    case FabricFault::Kind::kBlackhole:
      at(f.window.begin, [this](uint32_t port) { SetDown(port, true); });
      if (f.window.end != core::kNever) {
        at(f.window.end, [this](uint32_t port) { SetDown(port, false); });
      }
      break;
    case FabricFault::Kind::kFlap: {
      const Duration half = f.flap_period / 2;
      bool down = true;
      for (Instant t = f.window.begin; t < f.window.end; t = t + half, down = !down) {
        at(t, [this, down](uint32_t port) { SetDown(port, down); });
      }
      at(f.window.end, [this](uint32_t port) { SetDown(port, false); });
      break;
    }
  }
  return absl::OkStatus();
}

FabricTotals LeafSpineFabric::Totals() const {
  FabricTotals t;
  t.delivered = delivered_;
  t.dropped[static_cast<size_t>(FabricDrop::kNoRoute)] = unrouted_;
  for (const Port& p : ports_) {
    for (size_t i = 0; i < static_cast<size_t>(FabricDrop::kCount); ++i) {
      t.dropped[i] += p.counters.dropped[i];
    }
    t.ce_marked += p.counters.ce_marked;
    t.pauses += p.counters.pauses;
    t.paused_ns += p.counters.paused_ns;
    if (p.paused) t.paused_ns += (queue_.now() - p.paused_since).count();
  }
  t.data_sent = data_sent_;
  for (size_t i = 0; i < static_cast<size_t>(FabricDrop::kCount); ++i) {
    t.data_dropped[i] = data_dropped_[i];
  }
  t.max_switch_buffer_bytes = max_switch_buffer_;
  t.route_changes = route_changes_;
  return t;
}

uint64_t LeafSpineFabric::MaxSwitchBacklogBytes() const {
  // A plane's ports are its hosts' NICs, then its leaves' and its spines' ports, in that order.
  uint64_t deepest = 0;
  for (uint8_t plane = 0; plane < config_.planes; ++plane) {
    const uint32_t first = nodes_[LeafNode(plane, 0)].first_port;
    const Node& last_spine = nodes_[SpineNode(plane, config_.spines - 1)];
    const uint32_t end = last_spine.first_port + last_spine.port_count;
    for (uint32_t i = first; i < end; ++i) deepest = std::max(deepest, ports_[i].backlog_bytes);
  }
  return deepest;
}

}  // namespace metaroce::sim
