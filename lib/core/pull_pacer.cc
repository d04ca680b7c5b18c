#include "lib/core/pull_pacer.h"

#include <algorithm>

namespace metaroce::core {

PullPacer::PullPacer(const PullPacerConfig& config)
    : config_(config), slot_ns_per_byte_(config.rate_gbps > 0 ? 8.0 / config.rate_gbps : 0) {}

void PullPacer::TakeSlot(Instant now, uint64_t wire_bytes) {
  slot_ns_ = std::max(slot_ns_, static_cast<double>(now.ns)) +
             static_cast<double>(wire_bytes) * slot_ns_per_byte_;
}

void PullPacer::OnArrival(Instant now, uint32_t datagram_bytes, bool pulled, bool ce) {
  if (!enabled()) return;
  if (!pulled) {
    const uint64_t wire = uint64_t{datagram_bytes} + config_.wire_overhead_bytes;
    counters_.unsolicited_bytes += wire;
    TakeSlot(now, wire);
  }
  if (ce) {
    ++counters_.ce_arrivals;
    TakeSlot(now,
             static_cast<uint64_t>(config_.pulled_packet_wire_bytes * config_.ce_slot_fraction));
  }
}

void PullPacer::CancelPulls(uint32_t conn) {
  if (waiting_ == 0) return;  // every window-mode data packet comes here: no lookup then
  auto it = waiting_by_conn_.find(conn);
  if (it == waiting_by_conn_.end()) return;
  counters_.pulls_cancelled += it->second.count;
  waiting_ -= it->second.count;
  it->second.count = 0;  // leaves the rotation when its turn comes, spending no slot
}

bool PullPacer::RequestPull(Instant now, uint32_t conn) {
  if (!enabled()) return false;
  if (waiting_ == 0 && SlotInstant() <= now) {  // cancelled entries in the rotation wait for none
    TakeSlot(now, config_.pulled_packet_wire_bytes);
    ++counters_.pulls_with_ack;
    ++turn_;
    return true;
  }
  auto [it, inserted] = waiting_by_conn_.try_emplace(conn);
  Waiting& w = it->second;
  if (inserted) rotation_.push_back(conn);  // a cancelled one is still in the rotation
  ++w.count;
  ++waiting_;
  return false;
}

}  // namespace metaroce::core
