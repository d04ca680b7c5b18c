#include "lib/core/pull_pacer.h"

#include <algorithm>

namespace metaroce::core {

PullPacer::PullPacer(const PullPacerConfig& config)
    : config_(config), slot_ns_per_byte_(config.rate_gbps > 0 ? 8.0 / config.rate_gbps : 0) {}

void PullPacer::TakeSlot(Instant now, uint64_t wire_bytes) {
  const auto length = static_cast<int64_t>(static_cast<double>(wire_bytes) * slot_ns_per_byte_);
  slot_ = std::max(slot_, now) + Duration(length);
}

bool PullPacer::OnArrival(Instant now, uint32_t conn, uint16_t path, uint32_t datagram_bytes,
                          bool pulled, bool wants_pull) {
  if (!enabled()) return false;
  if (!pulled) {
    const uint64_t wire = uint64_t{datagram_bytes} + config_.wire_overhead_bytes;
    counters_.unsolicited_bytes += wire;
    TakeSlot(now, wire);
  }
  if (!wants_pull) return false;
  if (queue_.empty() && slot_ <= now) {
    TakeSlot(now, config_.pulled_packet_wire_bytes);
    ++counters_.pulls_with_ack;
    return true;
  }
  queue_.push_back(Waiting{conn, path});
  return false;
}

}  // namespace metaroce::core
