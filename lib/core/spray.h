// The spray: which path a connection's next new packet takes (docs/spec/congestion.md §1, §3,
// §6; docs/spec/paths-and-recovery.md [R5b]). The one place the path-choice policy lives: a new
// policy is a change to this unit (and its tests, tests/unit/core/spray_test.cc), not to the
// Sender, which asks it for each new packet (and once more when none can go) and sends the
// packet where it says.
//
// What it reads of each path (SenderPath, sender_path.h): id, plane, state, gbn_resending and
// outstanding() (is the path open: Open), inflight_bytes, its window (congestion.cwnd() and
// window_hint: Window), tx_order (was it ever sent on), its RTT estimate (srtt, for pacing) and its
// pacing schedule (pace_*). Of the connection, what the caller passes in a SprayRequest: its bytes
// in flight (all paths and Active ones), its latest RTT sample, whether it is clocked by pulls, the
// path a pull came on, and whether the packet is a reroute or a hedge. Of the config: mtu,
// SprayPaths(), connection_max_inflight_bytes, seed and RecoveryCap().
//
// What it decides: a path, or none (the packet waits): the connection's caps (bytes in flight,
// the responder's share) admit the packet; then the path with the fewest bytes in flight whose
// window takes it, ties in round-robin order from a cursor that moves past each path chosen; a
// path below one packet of window is paced at one packet per PacingRtt * bytes / window and taken
// only when its time has come (when not, it lowers the caller's wakeup to when). A hedge avoids
// its own path and tries its plane first.
//
// What it never does: send, arm or read a timer, change a path's state, window, RTT, PSNs or
// bytes in flight, or allocate. The only path fields it writes are the pacing schedule (pace_*)
// of paced paths it asks; its own state is the round-robin cursor (the pacing phase is derived
// from the seed when a path's schedule starts).
//
// Preconditions: `cfg` is valid (ConnectionConfig::Validate: 1..256 paths, mtu > 0,
// fail_after_timeouts > 0) and outlives the Spray; the paths passed are the connection's, by id
// (paths[i].id == i), at least SprayPaths() of them, the same every call.
//
// Determinism: the cursor starts at (seed - 1) % SprayPaths() and the pacing phase is drawn from
// the seed; given the same paths, requests and instants, the choices are the same. Not
// thread-safe: owned by one Sender, called from its owner's thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "lib/core/config.h"
#include "lib/core/sender_path.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

// What a pick is told beyond the paths.
struct SprayRequest {
  uint32_t bytes = 0;  // the packet's payload
  // A path with nothing in flight takes the packet whatever its window: the connection is clocked
  // by pulls, or the packet fits the responder's whole share (congestion.md §6). Otherwise such a
  // path whose window is below `bytes` is paced.
  bool clocked = false;
  // Data moved off another path (a reroute [R5]) or a copy of it (a hedge [R5b]); null for new data.
  const Reroute* queued = nullptr;
  // A path to try first (a pull's: PulledPath), taken when open and its window has room; -1: none.
  int preferred = -1;
  uint64_t inflight_bytes = 0;         // the connection's bytes in flight, every path
  uint64_t active_inflight_bytes = 0;  // ... on Active paths (what the responder's share caps)
  Duration latest_rtt{0};              // the connection's latest RTT sample, any path (0: none)
};

class Spray {
 public:
  // `cfg` must outlive the Spray (the Connection's config does).
  explicit Spray(const ConnectionConfig& cfg);

  // The path the packet goes on, or null when it must wait. `paths`: the connection's paths, by
  // id (paths[i].id == i), at least SprayPaths() of them; only the first SprayPaths() are chosen.
  // A pick moves the round-robin cursor past the path it returns, and may start or advance the
  // schedule of paced paths it asks; a paced path it passes over, not yet due, lowers `wakeup` to
  // when it is (the caller's timer must wake the connection then; the caller resets it).
  SenderPath* Pick(Instant now, std::span<SenderPath> paths, const SprayRequest& r,
                   Instant& wakeup);

  // The path a pulled packet should take: the first, in round-robin order, that was never sent on
  // and is usable (the responder has no port for it to pull on yet), else `pull_path`, the path
  // the pull came on.
  uint16_t PulledPath(std::span<const SenderPath> paths, uint16_t pull_path) const;
  // The first usable path in round-robin order (where a PROBE asking for pulls goes), or null.
  SenderPath* FirstUsableInTurn(std::span<SenderPath> paths) const;

  // Usable, not resending go-back-N, room in its SACK window: the path can take a new packet.
  static bool Open(const SenderPath& p) {
    return p.Usable() && !p.gbn_resending && p.outstanding() < wire::kSackBits;
  }
  // A path's sending window: its cwnd, or min(cwnd, window_hint) when the hint is below one packet
  // (a rate: paced). A hint of one packet or more caps the connection instead: ConnectionShare().
  uint32_t Window(const SenderPath& p) const {
    // congestion.md §1: a share of at least one packet per path caps the connection as a whole
    // (Pick), each path's cwnd its own; below one packet it is each path's rate.
    const uint32_t cwnd = p.congestion.cwnd();
    return p.window_hint == 0 || p.window_hint >= cfg_.mtu ? cwnd
                                                           : std::min(cwnd, p.window_hint);
  }
  // window_hint x paths, or no limit (UINT64_MAX). The hint is the same on every path.
  uint64_t ConnectionShare(std::span<const SenderPath> paths) const {
    // The responder's share is per path on average: the connection may have the sum of its paths'
    // in flight, spread as their windows allow (a slow path's cwnd leaves the rest to the fast).
    const uint32_t hint = paths.front().window_hint;
    if (hint == 0 || hint < cfg_.mtu) return UINT64_MAX;
    return uint64_t{hint} * cfg_.SprayPaths();
  }
  // The RTT a paced path's interval is computed from: the connection's latest sample, or the
  // path's srtt before there is one.
  static Duration PacingRtt(const SenderPath& p, Duration latest_rtt) {
    // A paced path sends a packet every several RTTs: its own samples are rare and old, and its
    // smoothed RTT older still. The connection's latest sample, on any path, tells the queue now:
    // pacing at window / latest RTT keeps the bytes in flight at the window on average whatever
    // the queueing delay, and lets the rate recover as soon as the queue drains.
    return latest_rtt == Duration(0) ? p.rtt.srtt() : latest_rtt;  // none yet: initial_rtt
  }

 private:
  // Pick's choice made the long way: the first path, in the order of (bytes in flight,
  // round-robin rank), that takes the packet; each paced path before it asked PacedPathDue.
  SenderPath* PickInOrder(Instant now, std::span<SenderPath> paths, const SprayRequest& r,
                          Instant& wakeup);
  // A path paced below one packet per RTT (idle, `window`, its Window(), below `bytes`): is its
  // next packet due? Starts or rescales its schedule; when it is not due, lowers `wakeup` to when
  // it is.
  bool PacedPathDue(Instant now, SenderPath& p, uint32_t bytes, uint32_t window,
                    Duration latest_rtt, Instant& wakeup);
  // In [0, 1): where the connection's paced packets start within their interval, drawn from the
  // seed (path i's at this plus i / SprayPaths(), mod 1).
  double PacingPhase() const;

  const ConnectionConfig& cfg_;
  uint16_t cursor_;  // round-robin: the path ranked first by the next pick
};

// In the header: the Sender asks it at least twice per packet (the last ask of each Pump finds no
// room), and inlined the request it passes is never built in memory. The long way is spray.cc's.
inline SenderPath* Spray::Pick(Instant now, std::span<SenderPath> paths, const SprayRequest& r,
                               Instant& wakeup) {
  const uint32_t bytes = r.bytes;
  const bool clocked = r.clocked;
  const Reroute* const queued = r.queued;
  const int preferred = r.preferred;
  if (r.inflight_bytes > 0 && r.inflight_bytes + bytes > cfg_.connection_max_inflight_bytes) {
    return nullptr;
  }
  // The responder's share counts the bytes in flight on Active paths only: a path gone Suspect
  // may be dead, and its stranded bytes must not hold back the live paths, whose progress is
  // what lets the dead one's expiries count toward its failure ([R5]).
  if (const uint64_t share = ConnectionShare(paths); share != UINT64_MAX) {
    if (r.active_inflight_bytes > 0 && r.active_inflight_bytes + bytes > share) return nullptr;
  }
  if (preferred >= 0 && preferred < cfg_.SprayPaths()) {
    SenderPath& p = paths[preferred];
    if (Open(p) && (p.inflight_bytes == 0 || p.inflight_bytes + bytes <= Window(p))) {
      return &p;
    }
  }
  const bool hedge = queued != nullptr && queued->hedge;
  const uint16_t n = cfg_.SprayPaths();
  // Fewest bytes in flight first, ties in round-robin order: with the connection's share
  // binding rather than the paths' windows, every path has room, and first-fit in round-robin
  // order would give each the same rate, a path behind a queue too, whose packets then hold the
  // share the longest. Fewest in flight gives each path a rate inverse to its delay (Little's
  // law), so the load moves off queued routes (a permutation of 1,024 hosts: 0.547 -> 0.573 of
  // its ideal; see congestion.md §3).
  // A hedge tries its own plane first: progress there is what lets the overtaken path's
  // expiries count [R5a], and it leaves the other planes' share of the load alone.
  // Usually the first path in that order takes the packet: it is found without sorting (the
  // fewest bytes in flight, ties to the first in round-robin order), and PickInOrder, which
  // sorts, is asked only when it does not (nothing was changed by looking at it: only a paced
  // path passed over is, and a paced path goes to PickInOrder too).
  if (!hedge) {
    // Round-robin order from the cursor is [cursor, n) then [0, cursor): two plain scans.
    const uint16_t cursor = static_cast<uint16_t>(cursor_ % n);
    uint16_t first = cursor;
    uint32_t least = paths[cursor].inflight_bytes;
    for (uint16_t idx = cursor + 1; idx < n; ++idx) {
      if (paths[idx].inflight_bytes < least) least = paths[idx].inflight_bytes, first = idx;
    }
    for (uint16_t idx = 0; idx < cursor; ++idx) {
      if (paths[idx].inflight_bytes < least) least = paths[idx].inflight_bytes, first = idx;
    }
    SenderPath& p = paths[first];
    const uint32_t window = Window(p);
    if (Open(p) && (least > 0 ? least + bytes <= window : bytes <= window || clocked)) {
      cursor_ = static_cast<uint16_t>(first + 1 == n ? 0 : first + 1);
      return &p;
    }
  }
  return PickInOrder(now, paths, r, wakeup);
}

}  // namespace metaroce::core
