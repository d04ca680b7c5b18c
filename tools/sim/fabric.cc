#include "tools/sim/fabric.h"

#include <array>
#include <cmath>
#include <utility>

#include "lib/core/config.h"
#include "lib/wire/packet.h"

namespace metaroce::sim {
namespace {

constexpr int64_t kPsPerNs = 1000;

int64_t ToPs(Instant t) { return t.ns * kPsPerNs; }
int64_t ToPs(Duration d) { return d.count() * kPsPerNs; }
Instant CeilToInstant(int64_t ps) { return Instant{(ps + kPsPerNs - 1) / kPsPerNs}; }

}  // namespace

Link::Link(const LinkConfig& config)
    : config_(config), rng_(config.seed), ce_rng_(config.ce_seed) {}

uint64_t Link::BacklogBytes(Instant now) const {
  const int64_t waiting_ps = busy_until_ps_ - ToPs(now);
  if (waiting_ps <= 0) return 0;
  // rate_gbps bits per ns = rate_gbps / 8 bytes per 1000 ps.
  return static_cast<uint64_t>(static_cast<double>(waiting_ps) * config_.rate_gbps / 8000.0);
}

bool Link::OverlapsBlackhole(int64_t from_ps, int64_t to_ps) const {
  for (const TimeWindow& w : config_.blackholes) {
    if (ToPs(w.begin) < to_ps && from_ps < ToPs(w.end)) return true;
  }
  return false;
}

Transmission Link::Send(Instant now, uint64_t wire_bytes) {
  ++counters_.offered_packets;
  Transmission result;
  for (const TimeWindow& w : config_.blackholes) {
    if (w.Contains(now)) {
      ++counters_.dropped_blackhole;
      result.drop = DropCause::kBlackhole;
      return result;
    }
  }
  const uint64_t backlog = BacklogBytes(now);
  if (backlog > counters_.max_backlog_bytes) counters_.max_backlog_bytes = backlog;
  if (backlog + wire_bytes > config_.queue_bytes) {
    ++counters_.dropped_tail;
    result.drop = DropCause::kTailDrop;
    return result;
  }
  const bool ce = backlog > config_.ecn_threshold_bytes;
  const int64_t now_ps = ToPs(now);
  const int64_t start_ps = busy_until_ps_ > now_ps ? busy_until_ps_ : now_ps;
  const int64_t serialization_ps =
      std::llround(static_cast<double>(wire_bytes) * 8000.0 / config_.rate_gbps);
  busy_until_ps_ = start_ps + serialization_ps;
  counters_.busy_ps += serialization_ps;
  ++counters_.tx_packets;
  counters_.tx_bytes += wire_bytes;
  const int64_t arrival_ps = busy_until_ps_ + ToPs(config_.delay);
  // One draw per serialized packet, whatever happens next, keeps the loss stream aligned across
  // runs that differ only in blackholes.
  const bool corrupted = rng_.NextUnit() < config_.loss_probability;
  if (OverlapsBlackhole(now_ps, arrival_ps)) {
    ++counters_.dropped_blackhole;
    result.drop = DropCause::kBlackhole;
    return result;
  }
  if (corrupted) {
    ++counters_.dropped_random;
    result.drop = DropCause::kRandomLoss;
    return result;
  }
  bool injected = false;
  for (const LinkConfig::CeInjection& i : config_.ce_injections) {
    // One draw per delivered packet inside a window, whether or not the queue marked it.
    if (i.window.Contains(now) && ce_rng_.NextUnit() < i.probability) injected = true;
  }
  ++counters_.delivered_packets;
  if (injected && !ce) ++counters_.ce_injected;
  if (ce || injected) ++counters_.ce_marked;
  result.arrival = CeilToInstant(arrival_ps);
  result.ce = ce || injected;
  return result;
}

Fabric::Fabric(std::vector<PhysicalPathConfig> paths, EventQueue& queue, DeliverFn deliver)
    : queue_(queue), deliver_(std::move(deliver)) {
  links_.reserve(paths.size());
  for (const PhysicalPathConfig& p : paths) {
    links_.push_back(std::array<Link, 2>{Link(p.a_to_b), Link(p.b_to_a)});
    lanes_.push_back({queue_.AddLane(), queue_.AddLane()});
  }
}

Fabric::SendResult Fabric::Send(Direction direction, const core::TxMeta& meta,
                                std::vector<std::byte> udp_payload) {
  SendResult result;
  result.physical_path = PhysicalPathFor(meta.src_port, meta.dst_port);
  Link& link = links_[result.physical_path][static_cast<size_t>(direction)];
  result.transmission = link.Send(queue_.now(), WireBytes(udp_payload.size()));
  if (result.transmission.drop != DropCause::kNone) {
    buffers_.Recycle(std::move(udp_payload));
    return result;
  }

  Datagram datagram;
  datagram.direction = direction;
  datagram.physical_path = result.physical_path;
  datagram.meta = core::RxMeta{meta.src_port, meta.dst_port, meta.plane, result.transmission.ce};
  datagram.bytes = std::move(udp_payload);
  const EventQueue::Lane lane = lanes_[result.physical_path][static_cast<size_t>(direction)];
  queue_.ScheduleOnLane(lane, result.transmission.arrival,
                        [this, d = std::move(datagram)]() mutable {
                          deliver_(d);
                          buffers_.Recycle(std::move(d.bytes));
                        });
  return result;
}

uint64_t SimDefaultBudgetBytes(double gbps, Duration base_rtt) {
  const Duration rtt = base_rtt + core::ConnectionConfig{}.delayed_ack;
  return static_cast<uint64_t>(gbps / 8 * static_cast<double>(rtt.count()));  // Gb/s x ns
}

core::ReceiveBudgetConfig SimHostBudget(uint64_t budget_bytes, uint32_t mtu, double pull_gbps) {
  core::ReceiveBudgetConfig b;
  b.budget_bytes = budget_bytes;
  b.mtu = mtu;
  b.pull.rate_gbps = pull_gbps;
  b.pull.pulled_packet_wire_bytes =
      mtu + static_cast<uint32_t>(wire::kDataHeadersSize) + kWireOverheadBytes;
  b.pull.wire_overhead_bytes = kWireOverheadBytes;
  return b;
}

}  // namespace metaroce::sim
