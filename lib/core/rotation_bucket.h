// [R7] The connection's rate limit on source-port rotations (docs/spec/paths-and-recovery.md): a
// token bucket of `burst` tokens refilled at `rate` per second, full when first asked, so that a
// flapping fabric cannot cause a rotation storm. Part of path health (path_health.cc); its own
// unit so that the arithmetic is tested alone (tests/unit/core/rotation_bucket_test.cc).
// Pure: time is an argument; no allocation; not thread-safe (one Sender's).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "lib/core/types.h"

namespace metaroce::core {

class RotationBucket {
 public:
  // Refills the bucket up to `now` (full on the first call), then returns how long until a
  // whole token is there: 0 when one is, else at least 1 ns. Preconditions: burst >= 1, rate > 0
  // (ConnectionConfig::Validate), `now` never earlier than a previous call's.
  Duration Wait(Instant now, double burst, double rate) {
    if (refilled_at_ == kNever) {
      tokens_ = burst;
    } else {
      const double elapsed_s = std::chrono::duration<double>(now - refilled_at_).count();
      tokens_ = std::min(burst, tokens_ + elapsed_s * rate);
    }
    refilled_at_ = now;
    if (tokens_ >= 1) return Duration(0);
    const double wait_s = (1 - tokens_) / rate;
    return std::max(Duration(1), std::chrono::duration_cast<Duration>(
                                     std::chrono::duration<double>(wait_s)) + Duration(1));
  }
  // Spends a token. Precondition: Wait() just returned 0.
  void Take() { tokens_ -= 1; }
  double tokens() const { return tokens_; }

 private:
  double tokens_ = 0;
  Instant refilled_at_ = kNever;  // last refill (kNever: the bucket is untouched)
};

}  // namespace metaroce::core
