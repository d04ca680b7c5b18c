#include "lib/core/receive_budget.h"

namespace metaroce::core {
namespace {
constexpr uint64_t kEpochPacketsPerConnection = 2;
}  // namespace

void ReceiveBudget::AddConnection(ActivityMark& mark, uint16_t pairs) {
  ++connections_;
  mark = ActivityMark{};
  mark.serial = next_serial_++;
  mark.pairs = pairs;
  mark.pending = true;
  if (groups_.empty() || groups_.back().stamped) groups_.push_back(SetupGroup{});
  groups_.back().last_serial = mark.serial;
  groups_.back().pending_pairs += pairs;
  roll_check_at_ = Instant{INT64_MIN};  // its group is stamped at the next event
}

void ReceiveBudget::OnLocalPost(ActivityMark& mark) {
  if (!mark.pending) return;
  if (SetupGroup* g = GroupOf(mark)) g->pending_pairs -= mark.pairs;
  mark.pending = false;
}

void ReceiveBudget::RemoveConnection(ActivityMark& mark) {
  connections_ -= connections_ > 0;
  roll_check_at_ = Instant{INT64_MIN};  // the epoch's length in bytes may be shorter now
  if (mark.pending) {
    if (SetupGroup* g = GroupOf(mark)) g->pending_pairs -= mark.pairs;
    mark.pending = false;
  }
  // An active connection stays in its epoch's count until the count rolls over.
}

ReceiveBudget::SetupGroup* ReceiveBudget::GroupOf(const ActivityMark& mark) {
  // Serials grow with the groups: the first group whose last serial reaches it.
  auto it = std::lower_bound(
      groups_.begin(), groups_.end(), mark.serial,
      [](const SetupGroup& g, uint64_t serial) { return g.last_serial < serial; });
  if (it == groups_.end()) return nullptr;
  const uint64_t first = it == groups_.begin() ? expired_below_ : std::prev(it)->last_serial;
  return mark.serial > first ? &*it : nullptr;  // older groups have expired
}

Duration ReceiveBudget::EpochLimit() const {
  // An epoch also ends after twice the previous one's duration: when most connections stop, the
  // bytes slow down with them, and those still sending must not wait for the full byte count
  // (their shares kept small by the connections gone) before the count notices.
  return previous_length_ > Duration(0) ? std::min(config_.active_window, 2 * previous_length_)
                                        : config_.active_window;
}

void ReceiveBudget::Roll(Instant now) {
  if (now < roll_check_at_ && epoch_bytes_ < roll_check_bytes_) return;
  const Duration elapsed = now - epoch_start_;
  const uint64_t epoch_bytes = std::max<uint64_t>(
      config_.budget_bytes, kEpochPacketsPerConnection * uint64_t{config_.mtu} * connections_);
  const Duration limit = EpochLimit();
  if (elapsed >= limit || epoch_bytes_ >= epoch_bytes) {
    // An epoch ended by active_window does not set the pace of the next; a whole epoch of
    // silence forgets the previous one too.
    const bool capped = elapsed >= config_.active_window;
    previous_ = elapsed >= 2 * config_.active_window ? 0 : current_;
    current_ = 0;
    ++epoch_;
    previous_length_ = capped ? Duration(0) : elapsed;
    epoch_start_ = now;
    epoch_bytes_ = 0;
  }
  // Connections set up since the previous event form the newest group, unstamped until now.
  if (!groups_.empty() && !groups_.back().stamped) {
    groups_.back().stamped = true;
    groups_.back().stamped_at = now;
  }
  // A group counts for one active_window after its first event.
  while (!groups_.empty() && groups_.front().stamped &&
         now - groups_.front().stamped_at >= config_.active_window) {
    expired_below_ = groups_.front().last_serial;
    groups_.pop_front();
  }
  // Nothing above changes before the epoch's limit (as it stands now that it may have begun
  // anew), its bytes, or the oldest group's expiry (every group is stamped now).
  roll_check_at_ = epoch_start_ + EpochLimit();
  if (!groups_.empty()) {
    roll_check_at_ = std::min(roll_check_at_, groups_.front().stamped_at + config_.active_window);
  }
  roll_check_bytes_ = epoch_bytes;
}

void ReceiveBudget::OnData(Instant now, ActivityMark& mark, uint32_t bytes) {
  epoch_bytes_ += bytes;
  Roll(now);
  if (mark.epoch == 0) {  // its first data packet: its first window is the share it was offered
    mark.prepaid_bytes =
        config_.budget_bytes * mark.pairs / std::max<uint64_t>(mark.pairs, counted_pairs());
  }
  if (mark.pending) {
    if (SetupGroup* g = GroupOf(mark)) g->pending_pairs -= mark.pairs;
    mark.pending = false;
  }
  if (mark.epoch != epoch_ + 1) {
    mark.epoch = epoch_ + 1;
    current_ += mark.pairs;
  }
}

uint64_t ReceiveBudget::counted_pairs() const {
  uint64_t pairs = std::max(current_, previous_);
  for (const SetupGroup& g : groups_) pairs += g.pending_pairs;
  return pairs;
}

uint32_t ReceiveBudget::Hint(Instant now) {
  if (!enabled()) return 0;
  Roll(now);
  const uint64_t share = config_.budget_bytes / std::max<uint64_t>(1, counted_pairs());
  return static_cast<uint32_t>(std::clamp<uint64_t>(share, 1, UINT32_MAX));
}

}  // namespace metaroce::core
