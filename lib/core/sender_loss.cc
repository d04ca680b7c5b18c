// Loss detection of the requester (members of Sender, declared in sender.h under "Loss
// detection"): which transmissions an ACK proves lost ([R4]), which paths their siblings have
// overtaken ([R5a]), the probe timeout and the tail probes and loss queries for the losses no
// later packet reveals ([R5], [R5d]). Rule numbers refer to docs/spec/paths-and-recovery.md.
// What an ACK acknowledges (AckPsn) is sender.cc's; what a path's expiry proves, path_health.cc's.
#include <algorithm>

#include "lib/core/connection.h"
#include "lib/core/probes.h"
#include "lib/core/sender.h"
#include "lib/core/sequence.h"

namespace metaroce::core {
namespace {

// [R5d] Tail probes per path between two of its progresses, two RTTs apart (a probe is lost like
// any packet: 1 % of the time at 1 % loss); then only the ordinary deadline.
constexpr uint8_t kMaxTailProbes = 3;

}  // namespace

void Sender::ArmPto(Instant now, SenderPath& path) {
  path.tail_probe_armed = path.loss_query_armed = false;
  if (path.outstanding() == 0) {
    path.pto_deadline = kNever;
    return;
  }
  // [R5] a path's own recovery must be able to finish before the connection's verdict: its
  // fail_after_timeouts expiries fit in half of no_progress_timeout, whatever the estimator says.
  // (An RTT sample taken across a host stall gives srtt + 4 rttvar of about the stall itself, and
  // with the backoff a lone path's failure came seconds after no_progress_timeout had ended the
  // connection beside idle, working paths.)
  const Duration cap = RecoveryCap();
  if (path.overtaken) {  // [R5a] the tail-loss probe is due like any packet on this path
    path.pto_deadline = now + std::min(OvertakenTimeout(path, nullptr), cap);
    return;
  }
  // A path paced below one packet per RTT has rare samples of its own: the connection's latest
  // one, on whichever path, tells the queue it waits behind now (congestion is not failure).
  const uint32_t backoff = std::min<uint32_t>(path.timeouts_without_progress, 6);
  // And never shorter than twice the connection's peak RTT: a clocked path's own estimator is
  // rare and stale, and a packet sent into queues that stood at that delay recently may meet
  // them again (all-to-all of 128 hosts, 2:1 oversubscribed spines: 3,020 timeouts of packets
  // merely queued past the 50 us floor; 673 with this bound, 0.67 -> 0.82 of the ideal).
  const Duration pto = std::max({path.rtt.ProbeTimeout(cfg_.min_probe_timeout),
                                 latest_rtt_ + 4 * path.rtt.rttvar(), 2 * peak_rtt_});
  path.pto_deadline = now + std::min(pto * (1u << backoff), cap);
  ArmTailProbe(now, path, now);
}

void Sender::ArmTailProbe(Instant now, SenderPath& path, Instant since) {
  // [R5d] RACK-TLP's probe (RFC 8985 §7) for the tail a path's SACK gaps and its siblings'
  // overtaking cannot expose: the last packets the connection sent. Like RFC 8985's, it is due
  // two RTTs after the latest transmission or progress, with no floor; and, like RACK's reorder
  // timer (§6.2), as soon as the newest packet outstanding is overdue: an RTT after it went plus
  // the reordering margin (a path's own ACK for an older packet would otherwise push the probe
  // for the newest two RTTs on: two hosts, 10 connections at 1 % loss, a 160 us run spent its last
  // 15 us waiting so). It is a guess and no evidence against the path; a probe is lost like any
  // packet, so up to kMaxTailProbes go, two RTTs apart. (Without tail probes the last messages
  // waited for the 50 us floor of the ordinary deadline: 30 connections at 1 % loss, 40 us of a
  // 480 us run with nothing to send.)
  // A clocked connection waiting for pulls with more to send queries instead: its data waits on
  // the pull a lost packet took with it, and a PROBE is a header, not data the responder did not
  // pull (data probes into a full link spiralled at 2,000 connections).
  const bool query = LossQueryAllowed(path);
  if (!query && !TailProbeAllowed(path)) return;
  ArmTailProbeAllowed(now, path, since, query);
}

void Sender::ArmTailProbes(Instant now) {
  // With nothing more to send, the connection-wide tests are these: tail probes on, selective
  // recovery, and whether the responder clocks it (then every path's probe is a loss query);
  // what is left of ArmTailProbe's tests is the path's own.
  if (!cfg_.tail_probes || cfg_.profile.recovery != RecoveryPolicy::kSelective) return;
  const bool query = Clocked();
  for (SenderPath& p : paths_) {
    if (query ? PathMayQuery(p) : PathMayTailProbe(p)) {
      ArmTailProbeAllowed(now, p, p.last_tx_at, query);
    }
  }
}

void Sender::ArmTailProbeAllowed(Instant now, SenderPath& path, Instant since, bool query) {
  const Duration rtt = latest_rtt_ > Duration(0) ? latest_rtt_ : path.rtt.srtt();
  Instant due = since + 2 * rtt + cfg_.delayed_ack;
  if ((query ? path.loss_queries : path.tail_probes) == 0) {
    if (const uint32_t newest = TailProbePsn(since, path); newest != path.next_psn) {
      due = std::min(due, OverdueAt(path, path.at(newest)));
    }
  }
  path.loss_query_armed = query;
  ArmTailProbeAt(now, path, due);
}

void Sender::ArmTailProbeAt(Instant now, SenderPath& path, Instant due) {
  // A probe already overdue when it is armed goes at the next instant, not at one already past:
  // the connection's last packet arms its siblings' probes from their own latest transmissions,
  // and after OnTimer(now) no deadline may be at or before `now` (an owner would find the timer
  // due again and again without its ever firing, for the entry point that armed it was the
  // timer's own).
  due = std::max(due, now + Duration(1));
  if (due < path.pto_deadline) {
    path.pto_deadline = due;
    path.tail_probe_armed = true;
  }
}

bool Sender::PathMayTailProbe(const SenderPath& path) const {
  return path.tail_probes < kMaxTailProbes && !path.overtaken && path.outstanding() > 0 &&
         (path.state == PathState::kActive || path.state == PathState::kSuspect);
}

bool Sender::TailProbeAllowed(const SenderPath& path) const {
  return PathMayTailProbe(path) && TailProbesDue();  // last: the costlier test
}

bool Sender::LossQueryAllowed(const SenderPath& path) const {
  return cfg_.tail_probes && cfg_.profile.recovery == RecoveryPolicy::kSelective &&
         Clocked() && (!MoreToSend() || WaitingForPulls()) && PathMayQuery(path);
}

bool Sender::PathMayQuery(const SenderPath& path) const {
  return path.loss_queries < kMaxTailProbes && !path.overtaken && path.outstanding() > 0 &&
         (path.state == PathState::kActive || path.state == PathState::kSuspect);
}

uint32_t Sender::TailProbePsn(Instant now, const SenderPath& path) const {
  for (uint32_t psn = path.next_psn; psn != path.snd_una;) {
    --psn;
    const SentPacket& e = path.at(psn);
    if (!e.acked && e.rnr_until <= now) return psn;
  }
  return path.next_psn;
}

Instant Sender::OverdueAt(const SenderPath& path, const SentPacket& e) const {
  // An RTT after it went (the connection's latest sample or the path's srtt, whichever is larger;
  // for a paced connection at least its peak RTT: its packets cross queues its own rare samples
  // do not see), plus the reordering margin, without the ACK delay when it asked for an ACK.
  const Duration rtt = latest_rtt_ > Duration(0) ? latest_rtt_ : path.rtt.srtt();
  const Duration expected = std::max({rtt, path.rtt.srtt(), Paced() ? peak_rtt_ : Duration(0)});
  const Duration margin =
      ReorderMargin(path, expected) - (e.ack_requested ? cfg_.delayed_ack : Duration(0));
  return e.sent_at + expected + margin;
}

Duration Sender::ReorderMargin(const SenderPath& path, Duration than_srtt) const {
  // RACK's rule (RFC 8985 §6.2) across paths: a packet is overdue once it is later than
  // expected by a quarter of the path's minimum RTT (its smoothed RTT before a sample), its
  // expected delay exceeding that of a packet on a path of smoothed RTT `than_srtt` by the
  // difference of their smoothed RTTs; plus the peer's ACK delay.
  const Duration slower = std::max(Duration(0), path.rtt.srtt() - than_srtt);
  const Duration reorder =
      path.rtt.min_rtt() > Duration(0) ? path.rtt.min_rtt() / 4 : path.rtt.srtt();
  return slower + reorder + cfg_.delayed_ack;
}

Duration Sender::OvertakenTimeout(const SenderPath& path, const SenderPath* than) const {
  return than == nullptr ? path.rtt.srtt() + ReorderMargin(path, path.rtt.srtt())
                         : ReorderMargin(path, than->rtt.srtt());
}

void Sender::DetectLosses(Instant now, SenderPath& path) {
  // [R4] a PSN whose latest transmission precedes a transmission known to have arrived is lost:
  // one path is one FIFO route, so it cannot be merely late. Retransmit it now, same path.
  // Transmissions are examined once each, in the order they were made, up to delivered_order:
  // a PSN's first transmission at the PSN cursor, a retransmission in `retransmits`. A PSN
  // waiting for an RNR delay is not lost: its retry is the RNR timer's ([M5]).
  const auto lost = [&](uint32_t psn, const SentPacket& e) {
    MR_PROBE6(sack_gap, cfg_.local_conn_id, path.id, psn, path.snd_una, path.next_psn,
              e.transmissions);
    // congestion.md §4: an overflow drop (a queue around it) cuts the window; a random one not.
    if (path.congestion.OnLoss(now, path.rtt.srtt())) ++conn_.counters_.congestion_loss_cuts;
    Retransmit(now, path, psn, Why::kGap);
  };
  if (SeqLess(path.loss_scan_psn, path.snd_una)) path.loss_scan_psn = path.snd_una;
  while (!failed_ && SeqLess(path.loss_scan_psn, path.next_psn)) {
    const uint32_t psn = path.loss_scan_psn;
    const SentPacket& e = path.at(psn);
    if (e.first_tx_order >= path.delivered_order) break;  // first transmissions go in PSN order
    ++path.loss_scan_psn;
    // Sent again since: its latest transmission is in `retransmits`.
    if (e.transmissions == 1 && !e.acked && e.rnr_until <= now) lost(psn, e);
  }
  while (!failed_ && path.retransmits_head < path.retransmits.size()) {
    const SenderPath::Retransmission r = path.retransmits[path.retransmits_head];
    if (r.tx_order >= path.delivered_order) break;
    ++path.retransmits_head;
    if (!path.IsOutstanding(r.psn)) continue;
    const SentPacket& e = path.at(r.psn);
    if (e.acked || e.last_tx_order != r.tx_order || e.rnr_until > now) continue;  // superseded
    lost(r.psn, e);
  }
  if (failed_) return;
  if (path.retransmits_head == path.retransmits.size()) {
    path.retransmits.clear();
    path.retransmits_head = 0;
  } else if (path.retransmits_head > path.retransmits.size() / 2) {
    path.retransmits.erase(path.retransmits.begin(),
                           path.retransmits.begin() + static_cast<ptrdiff_t>(path.retransmits_head));
    path.retransmits_head = 0;
  }
}

void Sender::CheckOvertaken(Instant now, const SenderPath& acked, Instant newest_sent) {
  // [R5a] A packet sent on `acked` at newest_sent has arrived. A sibling path whose oldest
  // outstanding packet was sent earlier than that by more than the two paths' difference in
  // delay allows (OvertakenTimeout) has lost it, or its route is slower than its estimate says:
  // either way its probe timeout is due, after one more ACK delay (its ACK may be behind this
  // one in the same batch), and until it makes progress its timer runs at its expected delay
  // (ArmPto). A stalled host delays every path alike, so this evidence needs no timer floor.
  if (cfg_.profile.spray != SprayPolicy::kAllPaths) return;
  const Duration acked_srtt = acked.rtt.srtt();
  // The connection's half of [R5d]'s test, the same for every path: asked at most once per ACK,
  // when a sibling first needs it (nothing below changes what is left to send).
  enum { kUnknown, kDue, kNotDue } tail_probes = kUnknown;
  for (SenderPath& other : paths_) {
    if (other.outstanding() == 0 || &other == &acked) continue;
    // The usual case first, before anything else of the sibling is read: its oldest packet,
    // sent once, went at or after newest_sent. So did every later PSN (a path's PSNs are first
    // sent in order): nothing of it is overdue, and nothing is behind the packet delivered.
    const SentPacket& oldest_packet = other.at(other.snd_una);
    if (oldest_packet.transmissions == 1 && oldest_packet.sent_at >= newest_sent) continue;
    if (other.state != PathState::kActive && other.state != PathState::kSuspect) continue;
    if (newest_sent <= other.last_timeout_at) continue;  // not newer than its last expiry
    if (plane_progress_[other.plane] <= other.stall_suspected_at) continue;  // see OnPathTimeout
    if (oldest_packet.rnr_until != Instant{0}) continue;  // the responder asked it to wait
    // OvertakenTimeout(other, &acked) is never negative (config.cc: delayed_ack >= 0): a packet
    // that went after newest_sent is not overdue, and its margin is not computed.
    const Duration out_for = newest_sent - oldest_packet.sent_at;
    if (out_for > Duration(0) && out_for > ReorderMargin(other, acked_srtt)) {
      other.overtaken = true;
      other.pto_deadline = std::min(other.pto_deadline, now + cfg_.delayed_ack);
      continue;
    }
    if (tail_probes == kUnknown) tail_probes = TailProbesDue() || TailQueriesDue() ? kDue : kNotDue;
    if (tail_probes == kDue) ProbeTailBehind(now, other, acked_srtt, newest_sent);
  }
}

void Sender::ProbeTailBehind(Instant now, SenderPath& path, Duration acked_srtt,
                             Instant newest_sent) {
  // [R5d] RACK's loss rule (RFC 8985 §6.2) across paths, for the connection's tail, where it has
  // nothing new to send: a packet sent before one just delivered is overdue once it has been out
  // for that packet's RTT (RACK.rtt) plus the reordering margin between the two paths. Its tail
  // probe is due then, not an RTT later by its own path's smoothed RTT, which the queues of the
  // run's busy part still inflate (two hosts, 10 connections at 1 % loss: the last message waited
  // 9.8 us for the probe of a packet lost 0.7 us before four delivered siblings). A probe, not a
  // verdict: the path's state and window do not change, and at most kMaxTailProbes go. (A
  // clocked connection's probe is a loss query, brought forward alike.)
  const bool query = Clocked();
  if (query ? !PathMayQuery(path) : !PathMayTailProbe(path)) return;
  const uint32_t newest = TailProbePsn(now, path);
  if (newest == path.next_psn) return;
  const SentPacket& e = path.at(newest);
  if (e.sent_at >= newest_sent) return;
  const Duration margin = ReorderMargin(path, acked_srtt) -
                          (e.ack_requested ? cfg_.delayed_ack : Duration(0));
  const Instant due = std::max(now, e.sent_at + (now - newest_sent) + margin);
  path.loss_query_armed = query;
  ArmTailProbeAt(now, path, due);
}

void Sender::FireTailProbe(Instant now, SenderPath& path) {
  // [R5d] no evidence, no state change: the newest packet again, then the ordinary deadline
  // (armed once, below: the probe is not a retransmission that re-arms it).
  // Which kind of probe goes is decided now, not when it was armed: a connection that has
  // started waiting for pulls since asks with a PROBE after the overdue packets, whose reply
  // says whether they arrived (a tail probe sends nothing while more waits to be sent, and the
  // query ArmPto would then arm is already overdue: a deadline left at `now` by its own expiry).
  // A query armed before a pull came sends nothing: the connection is sending again.
  const bool query_armed = path.loss_query_armed;
  path.tail_probe_armed = path.loss_query_armed = false;
  if (LossQueryAllowed(path)) {
    SendLossQuery(now, path);
  } else if (!query_armed) {
    ++path.tail_probes;
    if (const uint32_t probe = TailProbePsn(now, path); probe != path.next_psn && !MoreToSend()) {
      Retransmit(now, path, probe, Why::kTailProbe);
    }
  }
  if (!failed_) ArmPto(now, path);
}

void Sender::SendLossQuery(Instant now, SenderPath& path) {
  ++path.loss_queries;
  path.loss_query_order = path.tx_order;
  path.loss_query_at = now;
  TransmitProbe(path, path.snd_una);
  ++conn_.counters_.loss_queries;
}

void Sender::ResolveLossQuery(Instant now, SenderPath& path) {
  // [R5d] The PROBE went after these transmissions on the same route, and when they were already
  // overdue: not acknowledged by its reply, they were lost. (Transmissions not yet overdue then
  // may still have been behind it at the host, whose NIC may send a PROBE first: not judged.)
  const uint64_t order = path.loss_query_order;
  const Instant asked = path.loss_query_at;
  path.loss_query_order = 0;
  for (uint32_t psn = path.snd_una; SeqLess(psn, path.next_psn) && !failed_; ++psn) {
    const SentPacket& e = path.at(psn);
    if (e.acked || e.last_tx_order > order || e.rnr_until > now) continue;
    if (OverdueAt(path, e) > asked) continue;
    Retransmit(now, path, psn, Why::kGap);
  }
}

}  // namespace metaroce::core
