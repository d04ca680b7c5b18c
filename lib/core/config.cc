#include "lib/core/config.h"

#include "absl/strings/str_cat.h"

namespace metaroce::core {

absl::Status ConnectionConfig::Validate() const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (path_count < 1 || path_count > 256) return bad("path_count must be 1..256, got ", path_count);
  if (plane_count < 1) return bad("plane_count must be at least 1");
  if (!initial_ports.empty() && initial_ports.size() != path_count) {
    return bad("initial_ports has ", initial_ports.size(), " entries for ", path_count, " paths");
  }
  if (initial_ports.empty() && uint32_t{port_base} + path_count - 1 > 65535) {
    return bad("port_base + path_count exceeds 65535");
  }
  if (rotate_port_lo > rotate_port_hi || uint32_t{rotate_port_hi} - rotate_port_lo < path_count) {
    return bad("rotation port range [", rotate_port_lo, ", ", rotate_port_hi,
               "] must hold more ports than paths");
  }
  if (udp_port == 0) return bad("udp_port must not be 0");
  for (uint16_t i = 0; i < path_count; ++i) {
    if (InitialPort(i) == udp_port) return bad("path ", i, " would use udp_port as source port");
    // wire-format.md §1: a direction's source ports differ from each other.
    for (uint16_t j = 0; j < i; ++j) {
      if (InitialPort(j) == InitialPort(i)) {
        return bad("paths ", j, " and ", i, " have the same initial port ", InitialPort(i));
      }
    }
  }
  // paths-and-recovery.md §8: a rotated port is never udp_port.
  if (rotate_port_lo <= udp_port && udp_port <= rotate_port_hi) {
    return bad("rotation port range [", rotate_port_lo, ", ", rotate_port_hi,
               "] contains udp_port ", udp_port);
  }
  // The largest UDP payload, 65,527 bytes over IPv6 (65,507 over IPv4, which the set-up checks
  // per plane family: docs/spec/setup.md §4), less the data headers.
  if (mtu < 64 || mtu > 65527 - wire::kDataHeadersSize) {
    return bad("mtu must be 64..", 65527 - wire::kDataHeadersSize, " payload bytes, got ", mtu);
  }
  if (profile.placement == PlacementPolicy::kReorderBuffer &&
      profile.reorder_buffer_bytes < mtu) {
    return bad("reorder buffer must hold at least one MTU");
  }
  if (profile.recovery == RecoveryPolicy::kGoBackN &&
      profile.placement != PlacementPolicy::kInOrderOnly) {
    return bad("go-back-N recovery needs in-order placement");
  }
  if (dcqcn && profile.recovery != RecoveryPolicy::kGoBackN) {
    return bad("DCQCN is the go-back-N profile's rate control (baselines.md [B3])");
  }
  if (dcqcn && !(dcqcn->min_rate_gbps > 0 && dcqcn->min_rate_gbps <= dcqcn->line_rate_gbps)) {
    return bad("DCQCN needs 0 < min rate <= line rate");
  }
  if (min_cwnd_bytes == 0 || min_cwnd_bytes > max_cwnd_bytes || initial_window_bytes == 0) {
    return bad("congestion windows must satisfy 0 < min_cwnd <= max_cwnd and 0 < initial window");
  }
  if (ecn_gain <= 0 || ecn_gain > 1) return bad("ecn_gain must be in (0, 1]");
  if (ack_every == 0) return bad("ack_every must be at least 1");
  if (max_transmissions < 1 || max_transmissions > 255) {
    return bad("max_transmissions must be 1..255");
  }
  if (fail_after_timeouts == 0) return bad("fail_after_timeouts must be at least 1");
  if (fail_after_overtaken == 0) return bad("fail_after_overtaken must be at least 1");
  if (max_send_queue == 0 || max_recv_queue == 0) return bad("queue depths must be positive");
  if (min_probe_timeout <= Duration(0) || initial_rtt <= Duration(0)) {
    return bad("min_probe_timeout and initial_rtt must be positive");
  }
  if (delayed_ack < Duration(0)) return bad("delayed_ack must not be negative");
  if (rnr_retry > 7) return bad("rnr_retry must be 0..7 (7: forever)");
  if (rotation_burst == 0 || !(rotation_rate > 0)) {
    return bad("rotation_burst must be at least 1 and rotation_rate positive");
  }
  return absl::OkStatus();
}

}  // namespace metaroce::core
