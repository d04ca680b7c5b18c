// The requester half of a connection (internal to Connection): outbound messages, their
// segmentation and spraying over paths, per-path loss recovery, congestion windows, path health
// and source-port rotation. docs/spec/paths-and-recovery.md is the normative description; comments
// below cite its rules as [R#].
//
// One class, four units (docs/architecture.md, "The sender's units"): queueing and sending
// (sender.cc), the path a new packet takes (Spray, spray.h: a class of its own, with its own
// tests), loss detection (sender_loss.cc) and path health (path_health.cc). The last two are
// Sender members in their own translation units, declared below in their own groups; the
// per-path state they share is SenderPath (sender_path.h). Entry points (Post, OnAck, OnTimer,
// Pump) are sender.cc's and call the others in order.
// Not thread-safe: the Connection's owner calls it from one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "lib/core/config.h"
#include "lib/core/path_congestion.h"
#include "lib/core/path_state.h"
#include "lib/core/ring_queue.h"
#include "lib/core/rotation_bucket.h"
#include "lib/core/rtt_estimator.h"
#include "lib/core/sender_path.h"
#include "lib/core/sent_ring.h"
#include "lib/core/spray.h"
#include "lib/core/sequence.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

class Connection;

// One send work request while it is outstanding.
struct OutboundMessage {
  SendWorkRequest wr;
  const std::byte* src = nullptr;  // resolved local buffer
  uint32_t msg_seq = 0;
  uint32_t recv_seq = 0;          // meaningful when the opcode consumes a receive
  uint64_t stream_offset = 0;     // position of its first byte in the connection's byte stream
  uint32_t packets = 0;           // number of MTU-sized packets (>= 1)
  uint32_t next_to_send = 0;      // segmentation cursor: first packet never sent
  uint32_t acked_count = 0;
  std::vector<uint64_t> acked;    // bit per packet
  std::vector<uint8_t> transmissions;  // per packet, saturating
  uint32_t rnr_episodes = 0;
  Instant rnr_until{0};
  Instant posted_at{0};  // when Post() accepted it (the msg_completed probe's latency)
  bool done = false;
  WcStatus status = WcStatus::kSuccess;

  bool IsAcked(uint32_t i) const { return (acked[i / 64] >> (i % 64)) & 1u; }

  // Back to a value-initialized message when retired (RingQueue), keeping the per-packet arrays'
  // storage, up to kKeptPackets packets, for the message posted into its slot next: an ACK
  // retires many small messages at once and the application posts as many again, one by one,
  // which with one spare array kept for the whole queue had cost a malloc and a free a message
  // (mrperf write_bw -s 64). 1,024 packets: a ping-pong of 1 MiB messages (741 packets at MTU
  // 1500) allocates none either, and the queue's smallest array, which stays when it empties,
  // holds at most 4 x 1.1 KiB.
  static constexpr size_t kKeptPackets = 1024;
  void Recycle() {
    std::vector<uint64_t> kept_acked = std::move(acked);
    std::vector<uint8_t> kept_transmissions = std::move(transmissions);
    *this = OutboundMessage{};
    if (kept_transmissions.capacity() <= kKeptPackets) {
      kept_acked.clear();
      kept_transmissions.clear();
      acked = std::move(kept_acked);
      transmissions = std::move(kept_transmissions);
    }
  }
};

class Sender {
 public:
  Sender(Connection& conn);

  absl::Status Post(Instant now, const SendWorkRequest& wr);
  void OnAck(Instant now, const wire::Packet& ack);
  void OnTimer(Instant now);
  Instant NextDeadline() const;
  // Sends whatever windows allow.
  void Pump(Instant now);
  absl::Status RequestRotation(Instant now, uint16_t path_id);
  // Completes every outstanding message: `culprit` (default: the oldest) gets `status`, the
  // others WR_FLUSH_ERR.
  void Flush(Instant now, std::optional<uint32_t> culprit, WcStatus status);

  PathStats Stats(uint16_t path_id) const;
  size_t outstanding() const { return messages_.size(); }

 private:
  // ---- Queueing and sending (sender.cc): messages, segmentation, the pull clock (congestion.md
  // §6), transmission, what an ACK or a NAK acknowledges, completions. The path each new packet
  // takes is the spray's (spray_, spray.h).
  OutboundMessage* Find(uint32_t msg_seq);
  const OutboundMessage* Find(uint32_t msg_seq) const {
    const uint32_t i = msg_seq - base_seq_;
    return i < messages_.size() ? &messages_[i] : nullptr;
  }
  // The next data unit to send: the reroute queue's front (then *queued points at it), else the
  // next one never sent (*queued null).
  bool NextPacket(Instant now, PacketRef* out, const Reroute** queued);
  // Reorder-buffer baseline [B2]: may a packet ending at stream position `end` be sent without
  // overrunning the responder's buffer?
  bool WithinReorderWindow(uint64_t end) const;
  // congestion.md §6: the share is below one packet per path (the connection is paced).
  // (In the header, as the few others below that loss detection asks per packet from its own
  // translation unit: a call across units is not inlined.)
  bool Paced() const {
    const uint32_t hint = paths_.front().window_hint;
    return hint != 0 && hint < cfg_.mtu;
  }
  // ... and the responder pulls it: new data waits for pulls.
  bool Clocked() const { return pull_seen_ && Paced(); }
  // A clocked connection without a pull may send a new packet unsolicited while fewer than its
  // share in packets (PullWindow) of pulls are owed to it: that many pulls circulate between
  // it and the responder. When they are all owed and nothing is in flight, a wait of twice its
  // usual gap between pulls (before it knows one, twice the share's interval; at least four
  // RTTs) sends a PROBE, whose reply carries the responder's pull_seq: a pull whose every copy
  // was lost comes back with it. After twice that wait it forgives the pulls owed and sends
  // again. Otherwise sets pace_wakeup_.
  bool UnsolicitedAllowed(Instant now);
  // A PROBE at snd_una on a usable path, asking for an ACK (and its pull_seq) and nothing else.
  void SendPullProbe();
  // The share in packets, rounded up, at least 1, plus pull_bonus_.
  uint32_t PullWindow() const;
  // Data waits to be sent after the packet being sent (flags::kWantsPull).
  bool MoreToSend() const {
    if (!reroute_.empty()) return true;
    const OutboundMessage* m = Find(segment_seq_);
    if (m != nullptr && !m->done && m->next_to_send < m->packets) return true;
    return SeqLess(segment_seq_ + 1, next_msg_seq_);  // a later message, never sent yet
  }
  uint32_t PacketBytes(const OutboundMessage& m, uint32_t index) const;
  // `bytes`: PacketBytes of `ref`. `queued`: data moved or hedged off another path, sent as a
  // retransmission on its new path.
  void SendNew(Instant now, SenderPath& path, PacketRef ref, uint32_t bytes,
               const Reroute* queued);
  bool OrderedCompletion() const;
  // The retransmit probe's reason codes (lib/core/probes.h).
  enum class Why : uint8_t { kGap = 0, kTimeout = 1, kGoBackN = 2, kRnr = 3, kTailProbe = 6 };
  void Retransmit(Instant now, SenderPath& path, uint32_t psn, Why why);
  // Returns false when the connection failed (retry limit) and nothing was sent.
  bool Transmit(Instant now, SenderPath& path, uint32_t psn, bool retransmission,
                bool counts_as_retry);
  // A PROBE on `path` at `psn`: every PSN below it acknowledged or abandoned [R7], so the
  // responder skips nothing and answers with an ACK of the path (PROBE_REPLY).
  void TransmitProbe(SenderPath& path, uint32_t psn);
  struct AckTally {
    uint32_t bytes = 0, packets = 0;
    Duration rtt_sample{0};
    Instant newest_sent{INT64_MIN / 2};  // latest send of a newly acknowledged, once-sent packet
  };
  void AckPsn(Instant now, SenderPath& path, uint32_t psn, const wire::Packet& ack, AckTally& t);
  void MarkDataAcked(Instant now, PacketRef ref);
  // Moves snd_una past the resolved PSNs at its front; an idle path gives its ring back.
  void AdvanceUna(SenderPath& path);
  // Nothing outstanding on the path: frees its per-PSN storage (SentRing, retransmissions).
  void ReleaseIdle(SenderPath& path);
  void CompleteMessage(Instant now, OutboundMessage& m, WcStatus status);
  void RetireAndReport();
  void OnNak(Instant now, SenderPath& path, const wire::Packet& ack);
  // Clocked, with more to send, no pull in hand and every pull owed: it may not send.
  bool WaitingForPulls() const {
    return Clocked() && MoreToSend() && pull_paths_.empty() && pulls_owed_ >= PullWindow();
  }
  // Fewer packets wait to be sent (new data and rerouted units, no later message) than the
  // connection sprays paths: the next packets are probably their paths' last for now.
  bool NearTail() const;

  // ---- Loss detection (sender_loss.cc): [R4] losses by transmission order, [R5a] overtaken
  // paths, the probe timeout, [R5d] tail probes and loss queries.
  // [R4] retransmits now, on `path`, every PSN whose latest transmission precedes one known to
  // have arrived (delivered_order); each transmission is examined once, in the order made.
  void DetectLosses(Instant now, SenderPath& path);
  // [R5a] a packet sent on `acked` at `newest_sent` arrived: a sibling whose oldest outstanding
  // packet went earlier by more than ReorderMargin is overtaken (its PTO due after one ACK
  // delay); at the connection's tail the others get ProbeTailBehind.
  void CheckOvertaken(Instant now, const SenderPath& acked, Instant newest_sent);
  // RACK's rule across paths for the tail: arms `path`'s tail probe when a packet sent after its
  // newest outstanding one was delivered on the path just acknowledged, `acked` ([R5d]).
  // `acked_srtt`: the smoothed RTT of `acked`. Precondition: TailProbesDue() or
  // TailQueriesDue() (then the probe armed is a loss query).
  void ProbeTailBehind(Instant now, SenderPath& path, Duration acked_srtt, Instant newest_sent);
  // How late a packet on `path` may be before it is overdue: beyond its expected delay (its
  // srtt) when `than` is null, else beyond a packet on `than` sent at the same time.
  Duration OvertakenTimeout(const SenderPath& path, const SenderPath* than) const;
  // RACK's reordering margin (RFC 8985 §6.2) for a packet on `path` compared with one on a path
  // of smoothed RTT `than_srtt`: the difference of their srtts, a quarter of `path`'s min RTT,
  // and the peer's ACK delay.
  Duration ReorderMargin(const SenderPath& path, Duration than_srtt) const;
  // [R5] (re)arms the path's deadline: none with nothing outstanding; the expected delay when
  // overtaken; else the PTO (backed off, at least twice the peak RTT), at most RecoveryCap();
  // then ArmTailProbe, whose probe may come first.
  void ArmPto(Instant now, SenderPath& path);
  // [R5d] Once the connection has nothing more to send, a path with packets outstanding that has
  // sent fewer than kMaxTailProbes probes since its last progress probes its tail, if that comes
  // before the ordinary deadline: the first probe when its newest outstanding packet is overdue
  // (an RTT after it went, plus ReorderMargin) or two RTTs after `since` (its latest
  // transmission, or the ACK that re-arms its deadline), whichever is first; each further probe
  // two RTTs after the one before.
  // A clocked connection, whether its data waits on pulls or it has nothing more to send, arms a
  // loss query instead, whenever the path's newest outstanding packet falls overdue: a PROBE,
  // whose reply judges the transmissions it followed (ResolveLossQuery). Up to kMaxTailProbes
  // since progress too.
  void ArmTailProbe(Instant now, SenderPath& path, Instant since);
  // ArmTailProbe of every path, each since its latest transmission, when the connection has just
  // sent its last packet for now (MoreToSend() false): the connection-wide tests (tail probes on
  // and selective; loss queries when clocked) asked once, not per path.
  void ArmTailProbes(Instant now);
  // ArmTailProbe past its tests: `query` says whether it arms a loss query or a tail probe.
  void ArmTailProbeAllowed(Instant now, SenderPath& path, Instant since, bool query);
  // TailProbeAllowed: PathMayTailProbe (the path's probes, state and packets outstanding) and
  // TailProbesDue (the connection's: tail probes on, selective recovery, nothing more to send).
  bool TailProbeAllowed(const SenderPath& path) const;
  bool PathMayTailProbe(const SenderPath& path) const;
  // (A clocked connection's tail asks with loss queries instead: TailQueriesDue.)
  bool TailProbesDue() const {  // asked per ACK and per packet sent (CheckOvertaken, ArmPto)
    return cfg_.tail_probes && cfg_.profile.recovery == RecoveryPolicy::kSelective &&
           !MoreToSend() && !Clocked();
  }
  // A connection its responder clocks asks instead of guessing, at its tail as while it waits
  // for pulls: LossQueryAllowed is PathMayQuery (the path's queries, state and packets
  // outstanding), tail probes on and selective, clocked, and either nothing more to send
  // (TailQueriesDue) or WaitingForPulls.
  bool TailQueriesDue() const {
    return cfg_.tail_probes && cfg_.profile.recovery == RecoveryPolicy::kSelective &&
           !MoreToSend() && Clocked();
  }
  bool PathMayQuery(const SenderPath& path) const;
  bool LossQueryAllowed(const SenderPath& path) const;
  // When `e`, outstanding on `path`, is overdue: RACK's expected delay plus ReorderMargin.
  Instant OverdueAt(const SenderPath& path, const SentPacket& e) const;
  // Sends the path's loss query (a PROBE at snd_una) and remembers what it follows.
  void SendLossQuery(Instant now, SenderPath& path);
  // A PROBE_REPLY answered the path's loss query: the transmissions it followed, overdue when it
  // went and still unacknowledged, are lost and retransmitted at once.
  void ResolveLossQuery(Instant now, SenderPath& path);
  // Makes `due` the path's deadline, as a tail probe's, if it is earlier than the one armed; a
  // `due` at or before `now` becomes the next instant (now + 1 ns).
  void ArmTailProbeAt(Instant now, SenderPath& path, Instant due);
  // The PSN a tail-loss probe resends ([R5] step 4, [R5d]): the highest outstanding one not
  // waiting for an RNR delay; next_psn when there is none.
  uint32_t TailProbePsn(Instant now, const SenderPath& path) const;
  // [R5d] the path's deadline was its tail probe's: a tail probe or, for a connection waiting for
  // pulls, a loss query; then the ordinary deadline.
  void FireTailProbe(Instant now, SenderPath& path);

  // ---- Path health (path_health.cc): [R5] expiries toward failure, [R5a] the stall gate, [R5b]
  // hedges, [R5c] silence, states, [R7] rotation and probing, congestion.md §4 degraded paths.
  // [R5] the path's deadline expired: a tail probe's (FireTailProbe), else an expiry that
  // retransmits the tail, goes Suspect, and counts toward failure when it is evidence against the
  // path ([R5a] stall gate, [R5c] silence); FailPath at FailAfter.
  void OnPathTimeout(Instant now, SenderPath& path);
  // True when every PSN outstanding on `path` carries a data unit already acknowledged through
  // another path (or of a message done): its retransmissions would be FILLERs [R8].
  bool OnlyFillersOutstanding(const SenderPath& path) const;
  // [R5b] queues a copy of every unacknowledged data unit outstanding on `path` for another path.
  void Hedge(Instant now, SenderPath& path);
  // no_progress_timeout / (2 * fail_after_timeouts): the longest PTO, probe interval while work
  // waits, and connection-wide silence before a path fails for it ([R5], [R5c], [R7]).
  Duration RecoveryCap() const { return cfg_.RecoveryCap(); }
  // Expiries without progress before failing (twice as many while the connection is congested).
  uint32_t FailAfter(Instant now, const SenderPath& path) const;
  // [R5] Failed: its unacknowledged data is queued for other paths, its PSN space abandoned,
  // and its port rotated (Rotate).
  void FailPath(Instant now, SenderPath& path, PathEventReason reason);
  // Moves the path to `to` and reports it (a PathEvent); nothing when it is there already.
  // Keeps active_inflight_bytes_ the bytes in flight on Active paths.
  void SetState(Instant now, SenderPath& path, PathState to, PathEventReason reason);
  // congestion.md §4: an Active path marked alone (its siblings mostly not) for degraded_hold is
  // rotated (kPersistentCongestion).
  void CheckDegraded(Instant now, SenderPath& path);
  // [R7] the reply to the Probing path's latest probe: an RTT sample of the new route, and Active
  // again after probes_to_activate replies.
  void OnProbeReply(Instant now, SenderPath& path);
  // [R7] a rotation held down or rate-limited falls due; a Probing path's probe goes unanswered
  // (fail_after_timeouts of them rotate it again).
  void OnRotationAndProbeTimers(Instant now, SenderPath& path);
  // [R7] a PROBE at snd_una on a Probing path, and when the next goes (backed off, less while
  // the connection is stuck).
  void SendProbe(Instant now, SenderPath& path);
  // Rotates now and returns true, or (within the hold-down, or without a token of the rate
  // limit) schedules it and returns false.
  bool Rotate(Instant now, SenderPath& path, PathEventReason reason);

  Connection& conn_;
  const ConnectionConfig& cfg_;
  std::vector<SenderPath> paths_;
  Spray spray_;  // which path each new packet takes (spray.h)
  RingQueue<OutboundMessage> messages_;  // msg_seq base_seq_ .. base_seq_+size-1
  std::unique_ptr<SentPacket[]> spare_ring_;  // a smallest SentRing storage, for the next path
  uint32_t base_seq_ = 0;                 // msg_seq of messages_.front()
  uint32_t next_msg_seq_ = 0;
  uint32_t next_recv_seq_ = 0;
  uint64_t next_stream_offset_ = 0;
  uint32_t segment_seq_ = 0;              // message being segmented
  std::deque<Reroute> reroute_;           // data moved off failed [R5] or overtaken [R5b] paths
  std::deque<std::pair<uint16_t, uint32_t>> rnr_waits_;  // (path, psn) retried at rnr_until
  bool gbn_pending_ = false;  // some path is resending go-back-N: Pump walks the paths
  uint64_t inflight_bytes_ = 0;
  uint64_t active_inflight_bytes_ = 0;    // ... of it on Active paths (the share counts those)
  uint64_t rng_state_;
  Instant pace_wakeup_ = kNever;          // earliest paced path that new data waits for
  // congestion.md §6: pulls seen while paced (the responder clocks this connection), pulls not
  // used yet, the latest new data packet, and whether the packet being sent uses a pull.
  bool pull_seen_ = false;
  // Pulls not used yet (at most 256), each with the path it came on: the packet it lets through
  // goes there (the responder spreads its pulls over the paths in turn, so its links and planes
  // take the pulled packets in turn), unless a path was never sent on (Spray::PulledPath).
  std::deque<uint16_t> pull_paths_;
  uint8_t pull_seq_seen_ = 0;  // the responder's pull count, as of the latest ACK (mod 256)
  uint32_t pulls_owed_ = 0;  // new packets sent asking for a pull, not yet answered by one
  // Pulls the responder granted at once (its pacer had room) add one to the allowance, pulls
  // that waited take one off: the allowance follows the host's spare capacity.
  uint32_t pull_bonus_ = 0;
  // Time between the latest two pulls this connection received (0: fewer than two yet): how
  // long a pull takes to come now, which a lost one is judged against.
  Duration pull_gap_{0};
  Instant last_pull_at_ = kNever;
  bool pull_probed_ = false;  // a PROBE asked for the pulls owed since the latest new packet
  Instant last_new_at_{INT64_MIN / 2};
  bool sending_on_pull_ = false;
  // Shared by the units: the RTT samples (sender.cc takes them; loss detection and pacing read).
  Duration latest_rtt_{0};                // latest RTT sample of any path
  // The connection's peak RTT: the largest recent sample of any path, moving a sixteenth of the
  // way toward each smaller one (an upper envelope, as srtt is a mean). Bounds the PTO below.
  Duration peak_rtt_{0};
  Instant last_congestion_signal_{INT64_MIN / 2};  // latest CE mark or RTT above target, any path
  // Path health's (path_health.cc): the [R7] rotation token bucket.
  RotationBucket rotations_;  // [R7] rate limit; full at the first rotation
  Instant last_progress_{0};
  // [R5c] the latest failure of a path for the connection's silence as a whole.
  Instant last_silence_failure_{INT64_MIN / 2};
  std::vector<Instant> plane_progress_;  // [R5a] latest ACK with progress on a path of each plane
  Instant rnr_resume_at_ = kNever;  // earliest end of an RNR pause of some message
  bool failed_ = false;
  // [B3] the go-back-N profile's rate limiter; on the heap, so other connections pay a pointer.
  std::unique_ptr<DcqcnRate> dcqcn_;
};

}  // namespace metaroce::core
