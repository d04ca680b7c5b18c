#include "lib/core/path_congestion.h"

#include <algorithm>

namespace metaroce::core {

void PathCongestion::OnAck(Instant now, uint32_t acked_bytes, uint32_t acked_packets,
                           uint32_t ce_packets, Duration rtt_sample, Duration srtt,
                           Duration min_rtt) {
  window_acked_ += acked_packets;
  window_ce_ += std::min(ce_packets, acked_packets);
  bool cut = false;
  bool above_target = false;  // such an ACK never grows the window
  // ECN: once per RTT, fold the window's marked fraction into alpha and cut by alpha/2.
  if (now >= window_end_) {
    if (window_acked_ > 0) {
      const double f = static_cast<double>(window_ce_) / static_cast<double>(window_acked_);
      alpha_ = (1 - p_.ecn_gain) * alpha_ + p_.ecn_gain * f;
      if (window_ce_ > 0) {
        cwnd_ *= 1 - alpha_ / 2;
        cut = true;
      }
    }
    window_acked_ = window_ce_ = 0;
    window_end_ = now + srtt;
  }
  // Delay: an RTT above min + target means a standing queue; cut in proportion, once per RTT.
  if (rtt_sample > Duration(0) && min_rtt > Duration(0)) {
    const Duration target = min_rtt + p_.target_queue_delay;
    above_target = rtt_sample > target;
    if (above_target && now - last_delay_cut_ >= srtt) {
      const double excess = static_cast<double>((rtt_sample - target).count()) /
                            static_cast<double>(rtt_sample.count());
      cwnd_ *= std::max(0.5, 1 - 0.8 * excess);
      last_delay_cut_ = now;
      cut = true;
    }
  }
  if (ce_packets > 0 || above_target) last_signal_ = now;
  if (above_target) last_delay_signal_ = now;
  if (cut || ce_packets > 0) {
    slow_start_ = false;  // the first signal ends slow start, as in TCP
  } else if (acked_bytes > 0 && !above_target) {
    // Slow start doubles per RTT so a new path reaches its share quickly; afterwards one MTU
    // per RTT.
    cwnd_ += slow_start_ ? acked_bytes : static_cast<double>(p_.mtu) * acked_bytes / cwnd_;
  }
  Clamp();
}

bool PathCongestion::OnLoss(Instant now, Duration srtt) {
  if (now - last_delay_signal_ > srtt || now - last_loss_cut_ < srtt) return false;
  cwnd_ *= 0.5;
  last_loss_cut_ = now;
  slow_start_ = false;
  Clamp();
  return true;
}

void PathCongestion::Reset() {
  cwnd_ = p_.initial_cwnd;
  alpha_ = 0;
  slow_start_ = true;
  window_acked_ = window_ce_ = 0;
  window_end_ = Instant{0};
  last_delay_cut_ = last_signal_ = last_delay_signal_ = last_loss_cut_ = Instant{INT64_MIN / 2};
  Clamp();
}

void PathCongestion::Clamp() {
  cwnd_ = std::clamp(cwnd_, static_cast<double>(p_.min_cwnd), static_cast<double>(p_.max_cwnd));
}

}  // namespace metaroce::core
