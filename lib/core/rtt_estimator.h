// Per-path round-trip time estimator (RFC 6298 smoothing, plus the minimum).
//
// Samples come only from packets transmitted once and acknowledged by a non-delayed ACK (Karn's
// rule); the caller enforces that. The probe timeout derived here drives tail-loss detection.
#pragma once

#include "lib/core/types.h"

namespace metaroce::core {

class RttEstimator {
 public:
  explicit RttEstimator(Duration initial_rtt) : initial_(initial_rtt) {}

  void AddSample(Duration rtt);
  void Reset() { *this = RttEstimator(initial_); }

  bool has_sample() const { return has_sample_; }
  // Before the first sample these return the configured initial RTT (min: zero).
  Duration srtt() const { return has_sample_ ? srtt_ : initial_; }
  Duration rttvar() const { return has_sample_ ? rttvar_ : initial_ / 2; }
  Duration min_rtt() const { return has_sample_ ? min_ : Duration(0); }
  Duration latest() const { return latest_; }
  // max(floor, srtt + 4 * rttvar).
  Duration ProbeTimeout(Duration floor) const;

 private:
  Duration initial_;
  Duration srtt_{0}, rttvar_{0}, min_{0}, latest_{0};
  bool has_sample_ = false;
};

}  // namespace metaroce::core
