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
}

void ReceiveBudget::RemoveConnection(ActivityMark& mark) {
  connections_ -= connections_ > 0;
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

void ReceiveBudget::Roll(Instant now) {
  const uint64_t conns = connections_;
  const uint64_t epoch_bytes =
      std::max<uint64_t>(config_.budget_bytes, kEpochPacketsPerConnection * uint64_t{config_.mtu} * conns);
  // An epoch also ends after twice the previous one's duration: when most connections stop, the
  // bytes slow down with them, and those still sending must not wait for the full byte count
  // (their shares kept small by the connections gone) before the count notices.
  const Duration limit =
      previous_length_ > Duration(0) ? std::min(config_.active_window, 2 * previous_length_)
                                     : config_.active_window;
  if (now - epoch_start_ >= limit && now - epoch_start_ < config_.active_window) {
    previous_ = current_;
    previous_conns_ = current_conns_;
    current_ = current_conns_ = 0;
    ++epoch_;
    previous_length_ = now - epoch_start_;
    epoch_start_ = now;
    epoch_bytes_ = 0;
  } else if (now - epoch_start_ >= config_.active_window) {
    // A whole epoch of silence forgets the previous one too.
    const bool silent = now - epoch_start_ >= 2 * config_.active_window;
    previous_ = silent ? 0 : current_;
    previous_conns_ = silent ? 0 : current_conns_;
    current_ = current_conns_ = 0;
    ++epoch_;
    previous_length_ = Duration(0);
    epoch_start_ = now;
    epoch_bytes_ = 0;
  } else if (epoch_bytes_ >= epoch_bytes) {
    previous_ = current_;
    previous_conns_ = current_conns_;
    current_ = current_conns_ = 0;
    ++epoch_;
    previous_length_ = now - epoch_start_;
    epoch_start_ = now;
    epoch_bytes_ = 0;
  }
  for (SetupGroup& g : groups_) {
    if (!g.stamped) {
      g.stamped = true;
      g.stamped_at = now;
    }
  }
  // A group counts for one active_window after its first event.
  while (!groups_.empty() && groups_.front().stamped &&
         now - groups_.front().stamped_at >= config_.active_window) {
    expired_below_ = groups_.front().last_serial;
    groups_.pop_front();
  }
}

void ReceiveBudget::OnData(Instant now, ActivityMark& mark, uint32_t bytes) {
  epoch_bytes_ += bytes;
  Roll(now);
  if (mark.pending) {
    if (SetupGroup* g = GroupOf(mark)) g->pending_pairs -= mark.pairs;
    mark.pending = false;
  }
  if (mark.epoch != epoch_ + 1) {
    mark.epoch = epoch_ + 1;
    current_ += mark.pairs;
    ++current_conns_;
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
