#include "lib/core/rtt_estimator.h"

#include <algorithm>

namespace metaroce::core {

void RttEstimator::AddSample(Duration rtt) {
  if (rtt < Duration(0)) return;
  latest_ = rtt;
  if (!has_sample_) {
    has_sample_ = true;
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    min_ = rtt;
    return;
  }
  const Duration err = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
  rttvar_ = (3 * rttvar_ + err) / 4;
  srtt_ = (7 * srtt_ + rtt) / 8;
  min_ = std::min(min_, rtt);
}

Duration RttEstimator::ProbeTimeout(Duration floor) const {
  return std::max(floor, srtt() + 4 * rttvar());
}

}  // namespace metaroce::core
