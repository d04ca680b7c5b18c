// DCQCN, the congestion control of RoCE as deployed (Zhu et al., "Congestion Control for
// Large-Scale RDMA Deployments", SIGCOMM 2015), for the go-back-N profile only
// (docs/spec/baselines.md [B3]). Two halves:
//
// - the notification point (the responder, CnpLimiter): a CE-marked data packet makes it send a
//   CNP, at most one per connection per cnp_interval;
// - the reaction point (the requester, DcqcnRate): a rate limiter for the connection's packets.
//   A CNP cuts the rate by alpha/2 and remembers the rate before the cut as the target; a timer
//   then raises it, first halfway to the target (fast recovery), then raising the target by rai
//   (additive increase) and later by rhai (hyper increase) and the rate halfway to it; alpha
//   moves toward 1 on every alpha interval with a CNP and decays toward 0 on every one without.
//
// The RP's timers follow the Mellanox model of the HPCC simulator (github alibaba-edu/
// High-Precision-Congestion-Control, simulation/src/point-to-point/model/rdma-hw.cc,
// "Mellanox's version of DCQCN"): the rate decrease is checked on its own timer
// (decrease_interval) and applied once if a CNP arrived since the last check; the first CNP sets
// alpha to 1 and starts the alpha and decrease timers; the increase stage counts timer expiries
// only (no byte counter). Parameters and their sources: tools/sim/README.md (DCQCN).
//
// Sans-I/O like the rest of the core: the timers are not events. They run lazily, in time order,
// whenever the controller is consulted (MaySend, OnCnp), which gives the same rate at every
// consultation as running them as events would, since nothing else changes the state between.
#pragma once

#include <cstdint>

#include "lib/core/types.h"

namespace metaroce::core {

struct DcqcnParams {
  double line_rate_gbps = 100;  // the NIC port's rate: the starting rate and the ceiling
  // Wire bytes of a packet beyond what the core sends (Ethernet, IP, UDP, FCS, preamble, gap):
  // the limiter paces line-rate bytes.
  uint32_t overhead_bytes = 0;
  Duration cnp_interval = std::chrono::microseconds(50);  // NP: at most one CNP per this
  double g = 1.0 / 256;                                    // alpha's gain
  Duration alpha_interval = std::chrono::microseconds(50);
  Duration decrease_interval = std::chrono::microseconds(50);
  Duration increase_interval = std::chrono::microseconds(55);  // the rate increase timer
  uint32_t fast_recovery_steps = 1;  // F: timer expiries of fast recovery after a cut
  double rai_gbps = 0.02;            // additive increase of the target
  double rhai_gbps = 0.2;            // hyper increase of the target
  double min_rate_gbps = 1;
  double rate_on_first_cnp = 1;      // the first CNP sets rate and target to this x the rate
  bool clamp_target_rate = false;    // a cut in fast recovery (stage 0) resets the target too
};

// The notification point's pacing of CNPs for one connection.
class CnpLimiter {
 public:
  // A CE-marked data packet arrived at `now`: true when a CNP is to be sent for it.
  bool OnMarked(Instant now, Duration interval) {
    if (now - last_cnp_ < interval) return false;
    last_cnp_ = now;
    return true;
  }

 private:
  Instant last_cnp_{INT64_MIN / 2};
};

// The reaction point of one connection (go-back-N has one path: the connection's rate).
class DcqcnRate {
 public:
  explicit DcqcnRate(const DcqcnParams& p)
      : p_(p), rate_(p.line_rate_gbps), target_(p.line_rate_gbps) {}

  void OnCnp(Instant now);
  // May a packet start at `now`? Runs the timers due up to `now` first.
  bool MaySend(Instant now) {
    Advance(now);
    return now >= NextSendAt();
  }
  // A packet of `bytes` (what the core sends, headers included) started at `now`.
  void OnSent(Instant now, uint32_t bytes) {
    last_sent_ = now;
    last_bits_ = 8.0 * (bytes + p_.overhead_bytes);
  }
  // When the next packet may start: the last one's bits at the current rate after it started
  // (a rate change moves it, as a NIC's rate limiter does).
  Instant NextSendAt() const {
    return last_sent_ + Duration(static_cast<int64_t>(last_bits_ / rate_));
  }

  double rate_gbps() const { return rate_; }
  double target_gbps() const { return target_; }
  double alpha() const { return alpha_; }
  uint64_t cnps() const { return cnps_; }
  uint64_t cuts() const { return cuts_; }

 private:
  void Advance(Instant now);
  void UpdateAlpha();
  void CheckDecrease(Instant now);
  void Increase();

  DcqcnParams p_;
  double rate_;    // Gb/s = bits per ns
  double target_;
  double alpha_ = 1;
  bool started_ = false;         // the first CNP came: the timers run
  bool cnp_for_alpha_ = false;   // a CNP since the last alpha update
  bool cnp_for_decrease_ = false;  // ... since the last decrease check
  uint32_t stage_ = 0;           // increase timer expiries since the last cut
  Instant alpha_at_ = kNever, decrease_at_ = kNever, increase_at_ = kNever;
  Instant last_sent_{INT64_MIN / 2};
  double last_bits_ = 0;
  uint64_t cnps_ = 0, cuts_ = 0;
};

}  // namespace metaroce::core
