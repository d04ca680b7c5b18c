#include "lib/core/dcqcn.h"

#include <algorithm>

namespace metaroce::core {

void DcqcnRate::OnCnp(Instant now) {
  Advance(now);
  ++cnps_;
  cnp_for_alpha_ = cnp_for_decrease_ = true;
  if (!started_) {
    // The first CNP: alpha starts at 1 (the first cut halves the rate) and the timers start. In
    // HPCC's model the first decrease check comes 1 ns after the first alpha update, so that
    // the cut uses the updated alpha; the first update does not count this CNP.
    started_ = true;
    alpha_ = 1;
    cnp_for_alpha_ = false;
    alpha_at_ = now + p_.alpha_interval;
    decrease_at_ = now + p_.decrease_interval + Duration(1);
    rate_ = target_ = std::max(p_.min_rate_gbps, p_.rate_on_first_cnp * rate_);
  }
}

void DcqcnRate::Advance(Instant now) {
  // The timers due by `now`, earliest first; at the same instant alpha, then the decrease
  // check, then the increase (the order HPCC's event times give them).
  while (true) {
    const Instant next = std::min({alpha_at_, decrease_at_, increase_at_});
    if (next > now) return;
    if (next == alpha_at_) {
      alpha_at_ = alpha_at_ + p_.alpha_interval;
      UpdateAlpha();
    } else if (next == decrease_at_) {
      decrease_at_ = decrease_at_ + p_.decrease_interval;
      CheckDecrease(next);
    } else {
      increase_at_ = increase_at_ + p_.increase_interval;
      Increase();
    }
  }
}

void DcqcnRate::UpdateAlpha() {
  alpha_ = (1 - p_.g) * alpha_ + (cnp_for_alpha_ ? p_.g : 0);
  cnp_for_alpha_ = false;
}

void DcqcnRate::CheckDecrease(Instant now) {
  if (!cnp_for_decrease_) return;
  cnp_for_decrease_ = false;
  // A cut in fast recovery's first stage keeps the target the previous cut set (unless
  // clamped): a burst of CNPs does not walk the target down with the rate.
  if (p_.clamp_target_rate || stage_ != 0) target_ = rate_;
  rate_ = std::max(p_.min_rate_gbps, rate_ * (1 - alpha_ / 2));
  ++cuts_;
  stage_ = 0;
  increase_at_ = now + p_.increase_interval;  // the increase timer restarts from the cut
}

void DcqcnRate::Increase() {
  if (stage_ == p_.fast_recovery_steps) {
    target_ = std::min(p_.line_rate_gbps, target_ + p_.rai_gbps);  // additive increase
  } else if (stage_ > p_.fast_recovery_steps) {
    target_ = std::min(p_.line_rate_gbps, target_ + p_.rhai_gbps);  // hyper increase
  }
  rate_ = (rate_ + target_) / 2;  // fast recovery: halfway to the target, every stage
  ++stage_;
}

}  // namespace metaroce::core
