// The spray: path choice for new packets (spray.h). Sections cited: docs/spec/congestion.md §1
// (a window below one packet is a rate), §3 (fewest bytes in flight), §6 (pulls);
// docs/spec/paths-and-recovery.md [R5b] (hedges).
#include "lib/core/spray.h"

#include <algorithm>
#include <array>

#include "lib/core/split_mix.h"

namespace metaroce::core {

Spray::Spray(const ConnectionConfig& cfg)
    : cfg_(cfg),
      // The spray starts on a path of the connection's own: connections set up together would
      // otherwise all put their first packets on path 0, whose queue then holds every one of them
      // (and whose timers expire on all of them at once). The default seed, 1, starts on path 0.
      cursor_(static_cast<uint16_t>((cfg.seed - 1) % cfg.SprayPaths())) {}

double Spray::PacingPhase() const {
  uint64_t seed = cfg_.seed ^ 0x70616365'00000000ull;
  return static_cast<double>(SplitMix64(seed) >> 11) * 0x1p-53;
}

SenderPath* Spray::FirstUsableInTurn(std::span<SenderPath> paths) const {
  for (uint16_t i = 0; i < cfg_.SprayPaths(); ++i) {
    SenderPath& path = paths[(cursor_ + i) % cfg_.SprayPaths()];
    if (path.Usable()) return &path;
  }
  return nullptr;
}

uint16_t Spray::PulledPath(std::span<const SenderPath> paths, uint16_t pull_path) const {
  // A path the connection never sent on cannot be pulled on (the responder has no port to
  // answer to): while there is one, it goes first, so that every path soon has a port and the
  // pulls, which the responder spreads over the paths in turn, reach them all.
  for (uint16_t i = 0; i < cfg_.SprayPaths(); ++i) {
    const SenderPath& p = paths[(cursor_ + i) % cfg_.SprayPaths()];
    if (p.tx_order == 0 && p.Usable()) return p.id;
  }
  return pull_path;
}

SenderPath* Spray::PickInOrder(Instant now, std::span<SenderPath> paths, const SprayRequest& r,
                               Instant& wakeup) {
  const uint32_t bytes = r.bytes;
  const bool clocked = r.clocked;
  const Reroute* const queued = r.queued;
  const bool hedge = queued != nullptr && queued->hedge;
  const uint16_t n = cfg_.SprayPaths();
  const uint16_t cursor = static_cast<uint16_t>(cursor_ % n);
  // The order is (bytes in flight, rank in round-robin order from the cursor), and the packet
  // goes to the first path in it that takes it. Found in one scan per pass, without sorting:
  // the first path whose window takes the packet, and before it (bytes in flight 0, lower rank)
  // the paced paths, each asked whether its time has come, in rank order, as the scan met them.
  for (int pass = hedge ? 0 : 1; pass < 2; ++pass) {
    uint64_t best_key = UINT64_MAX;
    uint16_t best = 0;
    std::array<uint16_t, 256> paced;  // ranks, ascending
    std::array<uint32_t, 256> paced_window;  // ... and their windows
    uint16_t n_paced = 0;
    for (uint16_t rank = 0, idx = cursor; rank < n; ++rank, idx = idx + 1 == n ? 0 : idx + 1) {
      const SenderPath& p = paths[idx];
      if (!Open(p)) continue;
      if (hedge && (p.id == queued->from_path ||
                    (pass == 0 && p.plane != paths[queued->from_path].plane))) {
        continue;
      }
      const uint32_t window = Window(p);
      if (p.inflight_bytes == 0) {
        if (bytes > window && !clocked) {
          paced_window[n_paced] = window;
          paced[n_paced++] = rank;
          continue;
        }
      } else if (p.inflight_bytes + bytes > window) {
        continue;
      }
      const uint64_t key = uint64_t{p.inflight_bytes} << 16 | rank;
      if (key < best_key) best_key = key, best = idx;
    }
    // A paced path's key is its rank (nothing in flight): those below best_key come first.
    for (uint16_t i = 0; i < n_paced && paced[i] < best_key; ++i) {
      const uint32_t at = cursor + paced[i];  // no division per path
      const uint16_t idx = static_cast<uint16_t>(at >= n ? at - n : at);
      if (PacedPathDue(now, paths[idx], bytes, paced_window[i], r.latest_rtt, wakeup)) {
        cursor_ = static_cast<uint16_t>(idx + 1 == n ? 0 : idx + 1);
        return &paths[idx];
      }
    }
    if (best_key != UINT64_MAX) {
      cursor_ = static_cast<uint16_t>(best + 1 == n ? 0 : best + 1);
      return &paths[best];
    }
  }
  return nullptr;
}

bool Spray::PacedPathDue(Instant now, SenderPath& p, uint32_t bytes, uint32_t window,
                         Duration latest_rtt, Instant& wakeup) {
  // congestion.md §1: a window below one packet sends one packet per R * bytes / window (R:
  // PacingRtt; at most one recovery cap apart: the connection's own timers must not take a paced
  // path for a silent one). The paths' first packets are staggered evenly over that interval
  // from a random phase of the connection: connections set up together do not all send at once,
  // and each sends at its share's rate from the start.
  const Duration rtt = PacingRtt(p, latest_rtt);
  if (p.pace_started && rtt == p.pace_rtt && bytes == p.pace_bytes && window == p.pace_window) {
    // What its interval was computed from has not changed: the interval and the schedule
    // stand (a pick asks every paced path it passes, about twice per packet sent).
    if (p.pace_due > now) {
      wakeup = std::min(wakeup, p.pace_due);
      return false;
    }
    p.pace_due = now + p.pace_interval;
    return true;
  }
  p.pace_rtt = rtt;
  p.pace_bytes = bytes;
  p.pace_window = window;
  const uint16_t n = cfg_.SprayPaths();
  const Duration interval = std::min(
      cfg_.RecoveryCap(), Duration(static_cast<int64_t>(static_cast<double>(rtt.count()) * bytes /
                                                   std::max(window, 1u))));
  if (!p.pace_started) {
    p.pace_started = true;
    double phase = PacingPhase() + static_cast<double>(p.id % n) / n;
    if (phase >= 1) phase -= 1;  // every path's phase is uniform across connections
    p.pace_due = now + Duration(static_cast<int64_t>(phase * interval.count()));
    p.pace_interval = interval;
  } else if (interval != p.pace_interval && p.pace_due > now) {
    // A new share (or RTT) rescales the wait still to go, not the whole interval: the paths of
    // every connection, told of a larger share by ACKs at about the same time, keep their
    // spread phases instead of all falling due at once.
    p.pace_due = now + Duration(static_cast<int64_t>(
                           static_cast<double>((p.pace_due - now).count()) *
                           static_cast<double>(interval.count()) /
                           static_cast<double>(std::max<int64_t>(1, p.pace_interval.count()))));
  }
  p.pace_interval = interval;
  if (p.pace_due > now) {
    wakeup = std::min(wakeup, p.pace_due);
    return false;
  }
  p.pace_due = now + interval;
  return true;
}

}  // namespace metaroce::core
