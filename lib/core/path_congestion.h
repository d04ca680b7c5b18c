// Per-path congestion window: ECN (DCTCP) and delay (Swift-like) signals; slow start until the
// first signal, additive increase after it.
//
// Loss alone is not an input: on a lossy fabric a random drop says nothing about queues, and path
// failure is handled by path health, not by the window. A loss behind a deep queue (an RTT above
// target within the last RTT) is an overflow drop, and cuts like a congestion signal; CE marks
// alone say the queue stands above the marking threshold, not that it is full
// (docs/spec/congestion.md §4).
#pragma once

#include <cstdint>

#include "lib/core/types.h"

namespace metaroce::core {

struct CongestionParams {
  uint32_t mtu = 4096;
  uint32_t initial_cwnd = 64 * 1024;
  uint32_t min_cwnd = 4096;
  uint32_t max_cwnd = 4u << 20;
  double ecn_gain = 1.0 / 16;
  Duration target_queue_delay = std::chrono::microseconds(20);
};

class PathCongestion {
 public:
  explicit PathCongestion(const CongestionParams& p) : cwnd_(p.initial_cwnd), p_(p) {}

  // One acknowledgement: `acked_bytes` newly acknowledged in `acked_packets` packets, of which
  // `ce_packets` carried CE. `rtt_sample` is zero when the ACK gave none. `srtt` and `min_rtt`
  // come from the path's estimator.
  void OnAck(Instant now, uint32_t acked_bytes, uint32_t acked_packets, uint32_t ce_packets,
             Duration rtt_sample, Duration srtt, Duration min_rtt);
  // A loss detected on the path at `now`. With an RTT sample above target within the last `srtt`
  // it is taken for an overflow drop: cwnd halves, at most once per `srtt`, and slow start ends.
  // Returns whether the window was cut; without evidence nothing changes.
  bool OnLoss(Instant now, Duration srtt);
  // A new route (after rotation): start over.
  void Reset();

  uint32_t cwnd() const { return cwnd_; }
  // DCTCP's alpha: smoothed fraction of CE-marked packets.
  double ecn_fraction() const { return alpha_; }
  // True until the first congestion signal: the window grows by the bytes acknowledged.
  bool in_slow_start() const { return slow_start_; }
  // The latest ACK that carried CE marks or an RTT above target.
  Instant last_signal() const { return last_signal_; }

 private:
  void Clamp();

  double cwnd_;  // first: SenderPath keeps it in the cache line a path pick reads
  CongestionParams p_;
  double alpha_ = 0;
  bool slow_start_ = true;
  // DCTCP observation window.
  Instant window_end_{0};
  uint64_t window_acked_ = 0, window_ce_ = 0;
  Instant last_delay_cut_{INT64_MIN / 2};
  Instant last_signal_{INT64_MIN / 2};    // latest ACK with CE marks or an RTT above target
  Instant last_delay_signal_{INT64_MIN / 2};  // latest ACK with an RTT above target
  Instant last_loss_cut_{INT64_MIN / 2};
};

}  // namespace metaroce::core
