// Path health of the requester (members of Sender, declared in sender.h under "Path health"):
// what a path's probe timeout proves and when it counts toward failure ([R5], [R5a], [R5c]),
// hedges off overtaken paths ([R5b]), the Active / Suspect / Failed / Probing states, port
// rotation with its hold-down and token bucket, probing of a new route ([R7]), and persistent
// congestion (congestion.md §4). Rule numbers refer to docs/spec/paths-and-recovery.md.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/core/connection.h"
#include "lib/core/probes.h"
#include "lib/core/sender.h"
#include "lib/core/sequence.h"
#include "lib/core/split_mix.h"

namespace metaroce::core {

void Sender::OnPathTimeout(Instant now, SenderPath& path) {
  MR_PROBE3(timer_fired, cfg_.local_conn_id, path.id, probe::kTimerPathTimeout);
  if (path.outstanding() == 0) {
    path.pto_deadline = kNever;
    return;
  }
  if (path.tail_probe_armed) {
    FireTailProbe(now, path);
    return;
  }
  // [R5] step 1: a path whose every outstanding PSN waits for the responder (RNR, [M5]) is not
  // silent: the expiry re-arms and does nothing else. It is not the path's latest expiry either,
  // which would set aside the progress made before it (step 2, [R5a]).
  const uint32_t probe = TailProbePsn(now, path);
  if (cfg_.profile.recovery == RecoveryPolicy::kSelective && probe == path.next_psn) {
    ArmPto(now, path);
    return;
  }
  // [R5b] Whatever the expiry proves, the data units waiting on an overtaken path get a second
  // chance on a live one: its messages complete, and the application's next ones give the
  // path's siblings fresh evidence.
  // A path whose ACKs carried marks or queueing delay within its last two RTTs is slow behind a
  // queue, not lost: a second copy of its data would only add to the queue (a permutation of
  // 1,024 hosts hedged 37,000 packets, 7 % of its load, onto routes as congested).
  const bool queued = now - path.congestion.last_signal() <= 2 * path.rtt.srtt();
  if (path.overtaken && !queued) Hedge(now, path);
  // [R5a] An overtaken path's timer runs at its expected delay, which a stall of the peer or of
  // the network as a whole would also exceed: it counts only if some path of its plane made
  // progress since the previous expiry, or no other path has anything outstanding (nothing to
  // compare with: the sender waits on this path alone). Otherwise back to the ordinary timer.
  // A plane whose paths are all silent at once may be stalled as a whole (on a software fabric
  // its routers are descheduled together), and rotating every path of it would be the storm the
  // hysteresis is there to prevent. It may also have lost every route (a dead spine under all its
  // paths): so the evidence is set aside until the plane makes progress again, and the ordinary
  // timer, which the other planes' ACKs no longer re-arm, fails the path if the silence lasts.
  const bool others_outstanding =
      std::any_of(paths_.begin(), paths_.end(), [&](const SenderPath& p) {
        return &p != &path && p.outstanding() > 0 && p.state != PathState::kFailed;
      });
  if (path.overtaken && plane_progress_[path.plane] <= path.last_timeout_at && others_outstanding) {
    path.overtaken = false;
    path.stall_suspected_at = now;
    ArmPto(now, path);
    return;
  }
  // [R5] An ordinary expiry is evidence against this path only if the connection made progress
  // since the path's previous expiry, or nothing else is outstanding. When every path is silent
  // at once, the peer, this host or the network as a whole has stalled: the expiry still sends
  // its tail-loss probe, but it does not count toward failure (failing every path would be the
  // storm the hysteresis of [R7] is there to prevent, with nowhere to move their data), and the
  // connection's no_progress_timeout judges the silence.
  // (An overtaken path that passed the gate above always is: its plane made progress.)
  const bool attributable = cfg_.profile.spray != SprayPolicy::kAllPaths || !others_outstanding ||
                            last_progress_ > path.last_timeout_at || OnlyFillersOutstanding(path);
  // ... but "every path is silent" is only a fair reading if every path was asked. Paths with
  // nothing outstanding have said nothing: several paths dead behind one route while the rest of
  // the connection is idle would otherwise keep each other's expiries from counting until the
  // connection itself gave up. Their data goes to the idle paths as hedges [R5b]: if the hedges
  // are acknowledged the connection made progress, and this path's next expiry counts.
  const bool idle_sibling =
      !attributable && std::any_of(paths_.begin(), paths_.end(), [&](const SenderPath& p) {
        return &p != &path && p.Usable() && p.outstanding() == 0;
      });  // (asked only of an expiry the silence reading would set aside)
  if (!attributable && !path.overtaken && idle_sibling) Hedge(now, path);
  path.last_timeout_at = now;
  if (cfg_.profile.recovery == RecoveryPolicy::kGoBackN) {
    path.gbn_resending = gbn_pending_ = true;
    path.gbn_resend = path.snd_una;
    path.gbn_last_goback = now;
  } else {
    // [R5] tail loss probe: resend the highest outstanding PSN; its ACK exposes gaps below.
    // (`probe`: not next_psn, checked above; nothing since acknowledged or paused a PSN.)
    // The expiry that reaches the failure count fails the path: no tail probe into it.
    // [R5c] ... and so does an unattributed one once the whole connection has been silent for the
    // recovery cap with nothing idle to ask, one path per cap: every
    // route of the connection may be dead (all its paths hashed onto one dead link), which no
    // stall reading can tell apart, and only a new port finds out. A stall pays a bounded price.
    const bool silence_fails = cfg_.profile.spray == SprayPolicy::kAllPaths && !attributable &&
                               !idle_sibling && now - last_progress_ >= RecoveryCap() &&
                               now - last_silence_failure_ >= RecoveryCap();
    if (silence_fails || (cfg_.profile.spray == SprayPolicy::kAllPaths && attributable &&
                          path.attributed_timeouts + 1 >= FailAfter(now, path))) {
      ++path.stats.timeouts;
      if (path.state == PathState::kActive) {
        SetState(now, path, PathState::kSuspect, PathEventReason::kTimeout);
      }
      if (silence_fails) last_silence_failure_ = now;
      FailPath(now, path, silence_fails ? PathEventReason::kSilence : PathEventReason::kFailed);
      return;
    }
    Retransmit(now, path, probe, Why::kTimeout);
    if (failed_) return;
  }
  ++path.stats.timeouts;
  ++path.timeouts_without_progress;
  if (attributable) ++path.attributed_timeouts;
  if (path.state == PathState::kActive) {
    SetState(now, path, PathState::kSuspect, PathEventReason::kTimeout);
  }
  const bool can_fail_over = cfg_.profile.spray == SprayPolicy::kAllPaths;
  if (can_fail_over && path.attributed_timeouts >= FailAfter(now, path)) {
    FailPath(now, path, PathEventReason::kFailed);
    return;
  }
  ArmPto(now, path);
}

bool Sender::OnlyFillersOutstanding(const SenderPath& path) const {
  for (uint32_t psn = path.snd_una; SeqLess(psn, path.next_psn); ++psn) {
    const SentPacket& e = path.at(psn);
    if (e.acked) continue;
    const OutboundMessage* m = Find(e.ref.msg_seq);
    if (m != nullptr && !m->done && !m->IsAcked(e.ref.index)) return false;
  }
  return true;
}

void Sender::Hedge(Instant now, SenderPath& path) {
  for (uint32_t psn = path.snd_una; SeqLess(psn, path.next_psn); ++psn) {
    SentPacket& e = path.at(psn);
    if (e.acked || e.hedged || e.rnr_until > now) continue;
    const OutboundMessage* m = Find(e.ref.msg_seq);
    if (m == nullptr || m->done || m->IsAcked(e.ref.index)) continue;
    e.hedged = true;
    reroute_.push_back(Reroute{e.ref, path.id, true});
  }
}

uint32_t Sender::FailAfter(Instant now, const SenderPath& path) const {
  const uint32_t n = path.overtaken
                         ? std::min(cfg_.fail_after_overtaken, cfg_.fail_after_timeouts)
                         : cfg_.fail_after_timeouts;
  // congestion.md §4: while the connection sees congestion (CE marks or queueing delay on any of
  // its paths within the recovery cap), a silent path is first of all a path behind a full
  // queue: it takes twice the evidence to fail it.
  return now - last_congestion_signal_ < RecoveryCap() ? 2 * n : n;
}

void Sender::FailPath(Instant now, SenderPath& path, PathEventReason reason) {
  SetState(now, path, PathState::kFailed, reason);
  // [R5] move every unacknowledged packet to the other paths; abandon this PSN space.
  for (uint32_t psn = path.snd_una; SeqLess(psn, path.next_psn); ++psn) {
    SentPacket& e = path.at(psn);
    if (e.acked) continue;
    e.acked = true;  // resolved: abandoned
    inflight_bytes_ -= e.bytes;
    const OutboundMessage* m = Find(e.ref.msg_seq);
    if (m != nullptr && !m->done && !m->IsAcked(e.ref.index)) {
      reroute_.push_back(Reroute{e.ref, path.id, false});
      ++conn_.counters_.rerouted_packets;
    }
  }
  path.inflight_bytes = 0;
  path.snd_una = path.next_psn;
  ReleaseIdle(path);
  path.pto_deadline = kNever;
  path.timeouts_without_progress = path.attributed_timeouts = 0;
  path.overtaken = false;
  path.loss_query_order = 0;
  path.stall_suspected_at = Instant{INT64_MIN / 2};  // a new route starts afresh
  Rotate(now, path, reason);
}

void Sender::SetState(Instant now, SenderPath& path, PathState to, PathEventReason reason) {
  if (path.state == to) return;
  PathEvent ev;
  ev.at = now;
  ev.conn_id = cfg_.local_conn_id;
  ev.path_id = path.id;
  ev.kind = PathEvent::Kind::kStateChange;
  ev.from = path.state;
  ev.to = to;
  ev.old_port = ev.new_port = path.port;
  ev.reason = reason;
  if (ev.from == PathState::kActive) active_inflight_bytes_ -= path.inflight_bytes;
  if (to == PathState::kActive) active_inflight_bytes_ += path.inflight_bytes;
  path.state = to;
  MR_PROBE5(path_state, ev.conn_id, ev.path_id, static_cast<uint8_t>(ev.from),
            static_cast<uint8_t>(to), static_cast<uint8_t>(reason));
  conn_.EmitEvent(ev);
}

void Sender::CheckDegraded(Instant now, SenderPath& path) {
  if (cfg_.profile.spray != SprayPolicy::kAllPaths || path.state != PathState::kActive) return;
  if (path.congestion.ecn_fraction() < cfg_.degraded_ecn_fraction) {
    path.degraded_since = kNever;
    return;
  }
  // congestion.md §4: a route congested alone. When half or more of the other Active paths are
  // marked too (at least half as often), the queue is one they share (the responder's link in
  // an incast), which a new port cannot steer around.
  uint32_t siblings = 0, marked = 0;
  for (const SenderPath& p : paths_) {
    if (&p == &path || p.state != PathState::kActive) continue;
    ++siblings;
    if (p.congestion.ecn_fraction() >= cfg_.degraded_ecn_fraction / 2) ++marked;
  }
  if (siblings > 0 && 2 * marked >= siblings) {
    path.degraded_since = kNever;
    return;
  }
  if (path.degraded_since == kNever) {
    path.degraded_since = now;
  } else if (now - path.degraded_since >= cfg_.degraded_hold) {
    Rotate(now, path, PathEventReason::kPersistentCongestion);
  }
}

void Sender::OnProbeReply(Instant now, SenderPath& path) {
  // The probe's reply measures the new route even when every data packet was retransmitted
  // (Karn's rule gives no sample then). Timed from the round's first probe, a reply to a
  // later copy overestimates the RTT: the safe side for timeouts.
  // paths-and-recovery.md §5: only R > 0 is a sample (a reply in the probe's own instant is
  // a clock that did not move, not a route without delay).
  if (path.probe_unanswered && now > path.probe_started_at) {
    path.rtt.AddSample(now - path.probe_started_at);
  }
  path.probe_unanswered = false;
  path.probe_backoff = 0;
  if (++path.probe_replies >= cfg_.probes_to_activate) {
    path.next_probe_at = kNever;
    path.probe_timeouts = 0;
    SetState(now, path, PathState::kActive, PathEventReason::kProbeReply);
  }
}

void Sender::OnRotationAndProbeTimers(Instant now, SenderPath& path) {
  if (path.rotate_at <= now) {
    MR_PROBE3(timer_fired, cfg_.local_conn_id, path.id, probe::kTimerRotation);
    Rotate(now, path, path.rotate_reason);
  }
  if (path.state == PathState::kProbing && path.next_probe_at <= now) {
    MR_PROBE3(timer_fired, cfg_.local_conn_id, path.id, probe::kTimerProbe);
    bool rotated = false;
    if (++path.probe_timeouts >= cfg_.fail_after_timeouts) {
      path.probe_timeouts = 0;
      rotated = Rotate(now, path, PathEventReason::kProbeTimeout);  // sends its own probe
    }
    if (!rotated && path.state == PathState::kProbing) SendProbe(now, path);
  }
}

void Sender::SendProbe(Instant now, SenderPath& path) {
  path.probe_psn = path.snd_una;  // every PSN below it is acknowledged or abandoned [R7]
  TransmitProbe(path, path.probe_psn);
  // Unanswered probes back off exponentially (a route whose RTT is far above the estimate must
  // get the time to answer), up to 2^10 probe timeouts; a late reply still counts. [R7] While the
  // connection is stuck (work waits and no path is Active) only up to 2^2: the search for a live
  // route must try ports before the connection's verdict, not wait on dead ones (the rotation
  // bucket still bounds how fast ports change).
  const bool stuck = !messages_.empty() && std::none_of(paths_.begin(), paths_.end(),
                                                        [](const SenderPath& p) {
                                                          return p.state == PathState::kActive;
                                                        });
  const uint32_t backoff = std::min(path.probe_backoff, stuck ? 2u : 10u);
  path.next_probe_at = now + path.rtt.ProbeTimeout(cfg_.min_probe_timeout) * (1u << backoff);
  path.probe_backoff = std::min(path.probe_backoff + 1, 10u);
}

bool Sender::Rotate(Instant now, SenderPath& path, PathEventReason reason) {
  if (now - path.last_rotation < cfg_.rotation_holddown) {
    path.rotate_at = path.last_rotation + cfg_.rotation_holddown;  // [R7] hold-down
    path.rotate_reason = reason;
    return false;
  }
  if (const Duration wait = rotations_.Wait(now, cfg_.rotation_burst, cfg_.rotation_rate);
      wait > Duration(0)) {
    path.rotate_at = now + wait;  // [R7] rate limit: when the next token is whole
    path.rotate_reason = reason;
    return false;
  }
  rotations_.Take();
  path.rotate_at = kNever;
  const uint16_t old_port = path.port;
  const uint32_t span = uint32_t{cfg_.rotate_port_hi} - cfg_.rotate_port_lo + 1;
  uint16_t port = old_port;
  for (int attempt = 0; attempt < 32; ++attempt) {
    const auto candidate =
        static_cast<uint16_t>(cfg_.rotate_port_lo + SplitMix64(rng_state_) % span);
    const bool taken = candidate == cfg_.udp_port ||
                       std::any_of(paths_.begin(), paths_.end(),
                                   [&](const SenderPath& p) { return p.port == candidate; });
    if (!taken) {
      port = candidate;
      break;
    }
  }
  path.port = port;
  path.last_rotation = now;
  ++path.stats.rotations;
  PathEvent ev;
  ev.at = now;
  ev.conn_id = cfg_.local_conn_id;
  ev.path_id = path.id;
  ev.kind = PathEvent::Kind::kPortRotated;
  ev.from = ev.to = path.state;
  ev.old_port = old_port;
  ev.new_port = port;
  ev.reason = reason;
  conn_.EmitEvent(ev);
  MR_PROBE6(port_rotated, ev.conn_id, ev.path_id, old_port, port, static_cast<uint8_t>(reason),
            static_cast<uint8_t>(path.state));
  // A new route: forget what the old one taught us.
  path.congestion.Reset();
  path.rtt.Reset();
  path.degraded_since = kNever;
  path.probe_replies = 0;
  path.probe_timeouts = 0;
  SetState(now, path, PathState::kProbing, reason);
  if (!path.probe_unanswered) {
    // A new round. While earlier probes are unanswered their start is kept: a late reply to
    // one of them then overestimates the RTT rather than underestimating it.
    path.probe_started_at = now;
    path.probe_unanswered = true;
  }
  SendProbe(now, path);
  return true;
}

absl::Status Sender::RequestRotation(Instant now, uint16_t path_id) {
  if (path_id >= paths_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", path_id, " does not exist (", paths_.size(), " paths)"));
  }
  if (cfg_.profile.spray != SprayPolicy::kAllPaths) {
    return absl::FailedPreconditionError("single-path transports do not rotate ports");
  }
  Rotate(now, paths_[path_id], PathEventReason::kManual);
  return absl::OkStatus();
}

}  // namespace metaroce::core
