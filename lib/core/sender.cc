// Requester side. Rule numbers [R#] refer to docs/spec/paths-and-recovery.md.
#include "lib/core/sender.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/core/connection.h"
#include "lib/core/probes.h"
#include "lib/core/sequence.h"
#include "lib/core/split_mix.h"

namespace metaroce::core {
namespace {

// [R5d] Tail probes per path between two of its progresses, two RTTs apart (a probe is lost like
// any packet: 1 % of the time at 1 % loss); then only the ordinary deadline.
constexpr uint8_t kMaxTailProbes = 3;

CongestionParams CongestionFrom(const ConnectionConfig& c) {
  CongestionParams p;
  p.mtu = c.mtu;
  // congestion.md §1: the initial window, or the share the responder offered at set-up if larger
  // (it granted that much of its budget for the first RTT).
  const uint64_t initial =
      std::max<uint64_t>(c.initial_window_bytes, c.initial_window_hint_bytes);
  p.initial_cwnd = static_cast<uint32_t>(std::clamp<uint64_t>(
      initial / c.SprayPaths(), c.min_cwnd_bytes, c.max_cwnd_bytes));
  p.min_cwnd = c.min_cwnd_bytes;
  p.max_cwnd = c.max_cwnd_bytes;
  p.ecn_gain = c.ecn_gain;
  p.target_queue_delay = c.target_queue_delay;
  return p;
}

wire::Opcode WireOpcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite: return wire::Opcode::kWrite;
    case WrOpcode::kWriteWithImm: return wire::Opcode::kWriteImm;
    case WrOpcode::kSend: return wire::Opcode::kSend;
    case WrOpcode::kSendWithImm: return wire::Opcode::kSendImm;
  }
  return wire::Opcode::kWrite;
}

bool ConsumesReceive(WrOpcode op) { return op != WrOpcode::kWrite; }

}  // namespace

Sender::Sender(Connection& conn)
    : conn_(conn), cfg_(conn.config_), spray_(cfg_), rng_state_(cfg_.seed),
      plane_progress_(cfg_.plane_count, Instant{0}) {
  const CongestionParams cc = CongestionFrom(cfg_);
  // The responder's share offered at set-up, spread over the paths like the initial window.
  const uint32_t initial_hint =
      cfg_.initial_window_hint_bytes == 0
          ? 0
          : static_cast<uint32_t>(std::clamp<uint64_t>(
                cfg_.initial_window_hint_bytes / cfg_.SprayPaths(), 1, UINT32_MAX));
  paths_.reserve(cfg_.path_count);
  for (uint16_t i = 0; i < cfg_.path_count; ++i) {
    SenderPath& p = paths_.emplace_back(i, cc, cfg_.initial_rtt);
    p.port = cfg_.InitialPort(i);
    p.plane = static_cast<uint8_t>(i % cfg_.plane_count);
    p.window_hint = initial_hint;
  }
}

OutboundMessage* Sender::Find(uint32_t msg_seq) {
  return const_cast<OutboundMessage*>(std::as_const(*this).Find(msg_seq));
}

const OutboundMessage* Sender::Find(uint32_t msg_seq) const {
  const uint32_t i = msg_seq - base_seq_;
  return i < messages_.size() ? &messages_[i] : nullptr;
}

uint32_t Sender::PacketBytes(const OutboundMessage& m, uint32_t index) const {
  const uint64_t offset = uint64_t{index} * cfg_.mtu;
  return static_cast<uint32_t>(std::min<uint64_t>(cfg_.mtu, m.wr.local.length - offset));
}

absl::Status Sender::Post(Instant now, const SendWorkRequest& wr) {
  if (messages_.size() >= cfg_.max_send_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("send queue full (", cfg_.max_send_queue, " outstanding requests)"));
  }
  if (wr.local.length > cfg_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("message of ", wr.local.length,
                                                   " bytes exceeds max_message_bytes ",
                                                   cfg_.max_message_bytes));
  }
  const std::byte* src = nullptr;
  if (wr.local.length > 0) {
    std::byte* p = nullptr;
    switch (conn_.memory_.ResolveLocal(cfg_.pd, wr.local.lkey, wr.local.addr, wr.local.length,
                                       false, &p)) {
      case AccessError::kNone: break;
      case AccessError::kOutOfBounds:
        return absl::OutOfRangeError("LOC_LEN_ERR: local buffer is outside its memory region");
      case AccessError::kUnknownKey:
      case AccessError::kNotPermitted:
        return absl::PermissionDeniedError(
            "LOC_PROT_ERR: lkey names no memory region of this connection's protection domain");
    }
    src = p;
  }
  if (messages_.empty()) {
    base_seq_ = next_msg_seq_;
    last_progress_ = now;  // the no-progress clock starts when work appears
  }
  OutboundMessage& m = messages_.emplace_back();
  m.wr = wr;
  m.src = src;
  m.msg_seq = next_msg_seq_++;
  m.posted_at = now;
  if (ConsumesReceive(wr.opcode)) m.recv_seq = next_recv_seq_++;
  m.stream_offset = next_stream_offset_;
  next_stream_offset_ += wr.local.length;
  m.packets = std::max<uint32_t>(1, (wr.local.length + cfg_.mtu - 1) / cfg_.mtu);
  m.acked.assign((m.packets + 63) / 64, 0);
  m.transmissions.assign(m.packets, 0);
  Pump(now);
  return absl::OkStatus();
}

bool Sender::OrderedCompletion() const {
  // [B2] a reorder buffer acknowledges data it holds but has not placed; only in order is an
  // acknowledged message known to be placed (every byte before it has arrived, so it was drained).
  return cfg_.ordered_completion || cfg_.profile.placement == PlacementPolicy::kReorderBuffer;
}

bool Sender::NextPacket(Instant now, PacketRef* out, const Reroute** queued) {
  // Data moved off a failed path [R5] or hedged off an overtaken one [R5b] goes first.
  *queued = nullptr;
  while (!reroute_.empty()) {
    const PacketRef ref = reroute_.front().ref;
    const OutboundMessage* m = Find(ref.msg_seq);
    if (m == nullptr || m->done || m->IsAcked(ref.index)) {
      reroute_.pop_front();
      continue;
    }
    *out = ref;
    *queued = &reroute_.front();
    return true;
  }
  for (;;) {
    OutboundMessage* m = Find(segment_seq_);
    if (m == nullptr) return false;
    if (m->done || m->next_to_send == m->packets) {
      ++segment_seq_;
      continue;
    }
    // A fenced request starts only when every earlier one has completed (then it is the front).
    if (m->next_to_send == 0 && (m->wr.flags & send_flags::kFence) && m->msg_seq != base_seq_) {
      return false;
    }
    if (m->rnr_until > now) return false;  // the responder asked us to wait
    *out = PacketRef{m->msg_seq, m->next_to_send};
    return true;
  }
}

bool Sender::WithinReorderWindow(uint64_t end) const {
  // Everything before the first unacknowledged byte has been placed or buffered, and the
  // responder's in-order point is at or after it; so a packet ending within buffer capacity of
  // that byte always finds room (a receive window, as every reorder-buffer transport has).
  for (const OutboundMessage& m : messages_) {
    if (m.done) continue;
    for (uint32_t w = 0; w < m.acked.size(); ++w) {
      const uint64_t missing = ~m.acked[w];
      if (missing == 0) continue;
      const uint32_t index = w * 64 + static_cast<uint32_t>(__builtin_ctzll(missing));
      if (index >= m.packets) break;
      const uint64_t first_unacked = m.stream_offset + uint64_t{index} * cfg_.mtu;
      return end - first_unacked <= cfg_.profile.reorder_buffer_bytes;
    }
  }
  return true;
}

bool Sender::Paced() const {
  const uint32_t hint = paths_.front().window_hint;
  return hint != 0 && hint < cfg_.mtu;
}

bool Sender::NearTail() const {
  if (SeqLess(segment_seq_ + 1, next_msg_seq_)) return false;  // a later message waits
  const OutboundMessage* m = Find(segment_seq_);
  uint64_t left = reroute_.size();
  if (m != nullptr && !m->done) left += m->packets - m->next_to_send;
  return left < cfg_.SprayPaths();
}

bool Sender::MoreToSend() const {
  if (!reroute_.empty()) return true;
  const OutboundMessage* m = Find(segment_seq_);
  if (m != nullptr && !m->done && m->next_to_send < m->packets) return true;
  return SeqLess(segment_seq_ + 1, next_msg_seq_);  // a later message, never sent yet
}

uint32_t Sender::PullWindow() const {
  const uint64_t share = uint64_t{paths_.front().window_hint} * cfg_.SprayPaths();
  return static_cast<uint32_t>(std::max<uint64_t>(1, (share + cfg_.mtu - 1) / cfg_.mtu)) +
         pull_bonus_;
}

bool Sender::UnsolicitedAllowed(Instant now) {
  if (pulls_owed_ < PullWindow()) return true;
  if (inflight_bytes_ > 0) return false;  // its ACK, or its loss, comes first
  const uint64_t share = uint64_t{paths_.front().window_hint} * cfg_.SprayPaths();
  const Duration rtt = Spray::PacingRtt(paths_.front(), latest_rtt_);
  const Duration interval = std::min(
      RecoveryCap(), Duration(static_cast<int64_t>(static_cast<double>(rtt.count()) * cfg_.mtu /
                                                   static_cast<double>(std::max<uint64_t>(share, 1)))));
  const Duration wait = std::max(2 * (pull_gap_ > Duration(0) ? pull_gap_ : interval), 4 * rtt);
  if (last_new_at_ + 2 * wait <= now) {
    pulls_owed_ = 0;
    return true;
  }
  if (!pull_probed_ && last_new_at_ + wait <= now) SendPullProbe();
  pace_wakeup_ = std::min(pace_wakeup_, last_new_at_ + (pull_probed_ ? 2 : 1) * wait);
  return false;
}

void Sender::SendPullProbe() {
  pull_probed_ = true;
  if (SenderPath* path = spray_.FirstUsableInTurn(paths_)) TransmitProbe(*path, path->snd_una);
}

void Sender::Pump(Instant now) {
  if (failed_) return;
  for (SenderPath& p : paths_) {
    if (!gbn_pending_) break;
    // Go-back-N resend [B1]: everything from the resend point, in order.
    if (p.gbn_resending) p.gbn_resend = SeqMax(p.gbn_resend, p.snd_una);
    while (p.gbn_resending && SeqLess(p.gbn_resend, p.next_psn) && !failed_) {
      const uint32_t psn = p.gbn_resend++;
      if (!p.at(psn).acked) Retransmit(now, p, psn, Why::kGoBackN);
    }
    p.gbn_resending = false;
  }
  gbn_pending_ = false;
  PacketRef ref;
  const Reroute* queued = nullptr;
  pace_wakeup_ = kNever;
  // Pulls left over when nothing waits are given up: the pacer's slot for each is gone, and
  // the next burst's first packet goes unsolicited, counted as such.
  if (!pull_paths_.empty() && !MoreToSend()) pull_paths_.clear();
  while (!failed_ && NextPacket(now, &ref, &queued)) {
    OutboundMessage* m = Find(ref.msg_seq);
    const uint32_t bytes = PacketBytes(*m, ref.index);
    if (cfg_.profile.placement == PlacementPolicy::kReorderBuffer &&
        !WithinReorderWindow(m->stream_offset + uint64_t{ref.index} * cfg_.mtu + bytes)) {
      return;
    }
    // congestion.md §6: a clocked connection's new data goes on pulls (a reroute is recovery:
    // it goes unsolicited, and the responder's pacer counts it so).
    // Before its first pull, its share is a window for whole packets (the shares of all the
    // responder's requesters together are its budget) and a rate for the rest.
    const bool clocked = Clocked();
    bool on_pull = false, whole_share = false;
    if (clocked && queued == nullptr) {
      on_pull = !pull_paths_.empty();
      if (!on_pull && !UnsolicitedAllowed(now)) return;
    } else if (queued == nullptr && Paced()) {
      whole_share =
          inflight_bytes_ + bytes <= uint64_t{paths_.front().window_hint} * cfg_.SprayPaths();
    }
    SprayRequest ask;
    ask.bytes = bytes;
    ask.clocked = clocked || whole_share;
    ask.queued = queued;
    ask.preferred = on_pull ? spray_.PulledPath(paths_, pull_paths_.front()) : -1;
    ask.inflight_bytes = inflight_bytes_;
    ask.active_inflight_bytes = active_inflight_bytes_;
    ask.latest_rtt = latest_rtt_;
    SenderPath* path = spray_.Pick(now, paths_, ask, pace_wakeup_);
    if (path == nullptr) return;
    if (on_pull) {
      pull_paths_.pop_front();
      sending_on_pull_ = true;
    }
    if (queued == nullptr) last_new_at_ = now, pull_probed_ = false;
    if (queued != nullptr) {
      const Reroute moved = *queued;
      reroute_.pop_front();
      SendNew(now, *path, ref, bytes, &moved);
    } else {
      ++m->next_to_send;
      SendNew(now, *path, ref, bytes, nullptr);
    }
  }
}

void Sender::SendNew(Instant now, SenderPath& path, PacketRef ref, uint32_t bytes,
                     const Reroute* queued) {
  path.ring.Reserve(path.snd_una, path.next_psn, path.next_psn + 1, &spare_ring_);
  const uint32_t psn = path.next_psn++;
  SentPacket& e = path.at(psn);
  e = SentPacket{};
  e.ref = ref;
  e.bytes = bytes;
  path.inflight_bytes += e.bytes;
  inflight_bytes_ += e.bytes;
  if (path.state == PathState::kActive) active_inflight_bytes_ += e.bytes;
  if (!Transmit(now, path, psn, queued != nullptr, true)) return;
  if (queued != nullptr) {
    MR_PROBE5(retransmit, cfg_.local_conn_id, path.id, psn,
              queued->hedge ? probe::kRetransmitHedge : probe::kRetransmitReroute,
              e.transmissions);
    ++path.stats.retransmits;
    ++conn_.counters_.retransmits;
    if (queued->hedge) ++conn_.counters_.hedged_packets;
  }
  if (path.pto_deadline == kNever) ArmPto(now, path);
  // [R5d] the connection's last packet for now: every path's tail is as long as it will get.
  if (!MoreToSend()) ArmTailProbes(now);
}

bool Sender::Transmit(Instant now, SenderPath& path, uint32_t psn, bool retransmission,
                      bool counts_as_retry) {
  SentPacket& e = path.at(psn);
  OutboundMessage* m = Find(e.ref.msg_seq);
  const bool filler = m == nullptr || m->done || m->IsAcked(e.ref.index);
  if (!counts_as_retry) {
    // A retry the responder asked for (RNR) is limited by rnr_retry, not max_transmissions.
  } else if (!filler) {
    uint8_t& n = m->transmissions[e.ref.index];
    if (n >= cfg_.max_transmissions) {
      ++conn_.counters_.retry_exceeded_err;
      conn_.Fail(now, WcStatus::kRetryExcErr, m->msg_seq);
      return false;
    }
    if (n < 255) ++n;
  } else if (e.counted >= cfg_.max_transmissions) {
    // §9: a FILLER counts against its PSN, by the same rule as a data unit: a PSN the
    // responder kept answering with RNR before its data unit arrived elsewhere has used none
    // of its budget.
    ++conn_.counters_.retry_exceeded_err;
    conn_.Fail(now, WcStatus::kRetryExcErr, std::nullopt);
    return false;
  }
  if (counts_as_retry && e.counted < 255) ++e.counted;
  e.last_tx_order = ++path.tx_order;
  if (e.transmissions == 0) {
    e.first_tx_order = e.last_tx_order;
  } else if (cfg_.profile.recovery == RecoveryPolicy::kSelective) {
    path.retransmits.push_back({e.last_tx_order, psn});  // DetectLosses examines it in turn
  }
  if (e.transmissions < 255) ++e.transmissions;
  e.sent_at = path.last_tx_at = now;

  // The headers are written straight from this state (no wire::Packet built and read back).
  wire::BaseFields h;
  h.dest_conn = cfg_.remote_conn_id;
  h.path_id = path.id;
  h.psn = psn;
  h.token = cfg_.tx_token;
  wire::Packet::Data d;
  d.msg_seq = e.ref.msg_seq;
  d.offset = e.ref.index * cfg_.mtu;
  std::span<const std::byte> payload;
  if (filler) {
    // [R8] the data already arrived through another path: fill the PSN only.
    h.opcode = wire::Opcode::kWrite;
    h.flags = wire::flags::kFiller | wire::flags::kAckRequest;
    d.msg_len = d.offset;
  } else {
    const SendWorkRequest& wr = m->wr;
    h.opcode = WireOpcode(wr.opcode);
    d.msg_len = wr.local.length;
    if (wire::IsWrite(h.opcode)) {
      d.rkey = wr.rkey;
      d.remote_addr = wr.remote_addr + d.offset;
    }
    if (ConsumesReceive(wr.opcode)) d.recv_seq = m->recv_seq;
    if (wire::CarriesImm(h.opcode)) d.imm = wr.imm;
    if (e.bytes > 0) payload = std::span<const std::byte>(m->src + d.offset, e.bytes);
    // [R3] ask for an ACK at once on a message's last packet, and when the window is full
    // unless an earlier such request is still unanswered: an ACK-clocked sender fills its window
    // after every ACK, and asking each time made the responder ACK every few packets.
    const bool last = e.ref.index + 1 == m->packets;
    const bool window_full = path.inflight_bytes + cfg_.mtu > spray_.Window(path) ||
                             inflight_bytes_ + cfg_.mtu > spray_.ConnectionShare(paths_) ||
                             path.outstanding() >= wire::kSackBits;
    const bool ask_for_room = window_full && path.delivered_order >= path.ack_request_order;
    if (ask_for_room) path.ack_request_order = e.last_tx_order;
    // And on the connection's last packets for now, fewer than it has paths: each may be its
    // path's last, whose loss only the tail probe finds, and a probe need not wait out the
    // responder's delayed ACK for a packet that asked for one.
    if (last || ask_for_room || retransmission || NearTail()) h.flags |= wire::flags::kAckRequest;
  }
  e.ack_requested = (h.flags & wire::flags::kAckRequest) != 0;
  if (retransmission) h.flags |= wire::flags::kRetransmit;
  // congestion.md §6: a paced connection asks the responder to pull it while it has more to
  // send, and says which packets went on a pull.
  if (!filler && Paced() && MoreToSend()) {
    h.flags |= wire::flags::kWantsPull;
    if (!retransmission) ++pulls_owed_;  // a retransmission's pull replaces its original's
  }
  if (sending_on_pull_) {
    h.flags |= wire::flags::kPulled;
    sending_on_pull_ = false;
    ++conn_.counters_.pulled_pkts;
  }

  std::array<std::byte, wire::kDataHeadersSize> headers;
  wire::WriteDataHeaders(h, d, static_cast<uint16_t>(payload.size()), headers.data());
  TxMeta meta;
  meta.conn_id = cfg_.local_conn_id;
  meta.path_id = path.id;
  meta.plane = path.plane;
  meta.src_port = path.port;
  meta.dst_port = cfg_.udp_port;
  conn_.sink_.Transmit(meta, headers, payload);
  MR_PROBE8(packet_sent, meta.conn_id, meta.path_id, psn, static_cast<uint8_t>(h.opcode),
            payload.size(), retransmission, meta.src_port, h.flags);
  ++path.stats.tx_packets;
  path.stats.tx_bytes += payload.size();
  ++conn_.counters_.sent_pkts;
  return true;
}

void Sender::Retransmit(Instant now, SenderPath& path, uint32_t psn, Why why) {
  // Go-back-N resends everything after a gap by design, so one unlucky packet would exhaust its
  // budget under heavy loss; like ibverbs, only the connection-level retry limit applies there.
  // A tail probe [R5d] is a guess that the packet is lost, not a failed attempt to deliver it.
  const bool counts = why != Why::kRnr && why != Why::kGoBackN && why != Why::kTailProbe;
  if (!Transmit(now, path, psn, true, counts)) return;
  MR_PROBE5(retransmit, cfg_.local_conn_id, path.id, psn, static_cast<uint8_t>(why),
            path.at(psn).transmissions);
  ++path.stats.retransmits;
  ++conn_.counters_.retransmits;
  if (why == Why::kGap) ++conn_.counters_.gap_retransmits;
  if (why == Why::kTimeout) ++conn_.counters_.timeout_retransmits;
  if (why == Why::kTailProbe) ++conn_.counters_.tail_probes;
  // [R5d] the tail probe's deadline counted from this PSN's previous transmission.
  if (path.tail_probe_armed) ArmPto(now, path);
}

void Sender::TransmitProbe(SenderPath& path, uint32_t psn) {
  wire::BaseFields h;
  h.opcode = wire::Opcode::kProbe;
  h.dest_conn = cfg_.remote_conn_id;
  h.path_id = path.id;
  h.psn = psn;
  h.token = cfg_.tx_token;
  std::array<std::byte, wire::kProbePacketSize> headers;
  wire::WriteBaseHeader(h, 0, headers.data());
  TxMeta meta{cfg_.local_conn_id, path.id, path.plane, path.port, cfg_.udp_port};
  conn_.sink_.Transmit(meta, headers, {});
  MR_PROBE8(packet_sent, meta.conn_id, meta.path_id, h.psn, static_cast<uint8_t>(h.opcode), 0,
            false, meta.src_port, h.flags);
  ++conn_.counters_.probes_sent;
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
  // With nothing more to send, WaitingForPulls() is false (no path arms a loss query) and
  // TailProbesDue() is this: what is left of ArmTailProbe's tests is the path's own.
  if (!cfg_.tail_probes || cfg_.profile.recovery != RecoveryPolicy::kSelective) return;
  for (SenderPath& p : paths_) {
    if (PathMayTailProbe(p)) ArmTailProbeAllowed(now, p, p.last_tx_at, false);
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

bool Sender::WaitingForPulls() const {
  return Clocked() && MoreToSend() && pull_paths_.empty() && pulls_owed_ >= PullWindow();
}

bool Sender::LossQueryAllowed(const SenderPath& path) const {
  return cfg_.tail_probes && cfg_.profile.recovery == RecoveryPolicy::kSelective &&
         WaitingForPulls() && path.loss_queries < kMaxTailProbes && !path.overtaken &&
         path.outstanding() > 0 &&
         (path.state == PathState::kActive || path.state == PathState::kSuspect);
}

bool Sender::TailProbesDue() const {
  return cfg_.tail_probes && cfg_.profile.recovery == RecoveryPolicy::kSelective && !MoreToSend();
}

bool Sender::PathMayTailProbe(const SenderPath& path) const {
  return path.tail_probes < kMaxTailProbes && !path.overtaken && path.outstanding() > 0 &&
         (path.state == PathState::kActive || path.state == PathState::kSuspect);
}

bool Sender::TailProbeAllowed(const SenderPath& path) const {
  return PathMayTailProbe(path) && TailProbesDue();  // last: the costlier test
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

Duration Sender::RecoveryCap() const { return cfg_.RecoveryCap(); }

uint32_t Sender::FailAfter(Instant now, const SenderPath& path) const {
  const uint32_t n = path.overtaken
                         ? std::min(cfg_.fail_after_overtaken, cfg_.fail_after_timeouts)
                         : cfg_.fail_after_timeouts;
  // congestion.md §4: while the connection sees congestion (CE marks or queueing delay on any of
  // its paths within the recovery cap), a silent path is first of all a path behind a full
  // queue: it takes twice the evidence to fail it.
  return now - last_congestion_signal_ < RecoveryCap() ? 2 * n : n;
}

Duration Sender::OvertakenTimeout(const SenderPath& path, const SenderPath* than) const {
  return than == nullptr ? path.rtt.srtt() + ReorderMargin(path, path.rtt.srtt())
                         : ReorderMargin(path, than->rtt.srtt());
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

void Sender::AckPsn(Instant now, SenderPath& path, uint32_t psn, const wire::Packet& ack,
                    AckTally& t) {
  SentPacket& e = path.at(psn);
  if (e.acked) return;
  e.acked = true;
  t.bytes += e.bytes;
  ++t.packets;
  path.inflight_bytes -= e.bytes;
  inflight_bytes_ -= e.bytes;
  if (path.state == PathState::kActive) active_inflight_bytes_ -= e.bytes;
  ++path.stats.acked_packets;
  // [R4] evidence of delivery: packets transmitted before this one have arrived or are lost.
  // With several transmissions we cannot tell which copy arrived, so only the first counts.
  const uint64_t order = e.transmissions > 1 ? e.first_tx_order : e.last_tx_order;
  path.delivered_order = std::max(path.delivered_order, order);
  if (e.transmissions == 1) t.newest_sent = std::max(t.newest_sent, e.sent_at);
  // Karn: an RTT sample only from a packet sent once, acknowledged by the ACK it triggered.
  if (e.transmissions == 1 && psn == ack.ack.ack_psn && !(ack.flags & wire::flags::kDelayedAck)) {
    t.rtt_sample = now - e.sent_at;
  }
  MarkDataAcked(now, e.ref);
}

void Sender::AdvanceUna(SenderPath& path) {
  while (path.snd_una != path.next_psn && path.at(path.snd_una).acked) ++path.snd_una;
  if (path.snd_una == path.next_psn) ReleaseIdle(path);
}

void Sender::ReleaseIdle(SenderPath& path) {
  path.ring.Release(&spare_ring_);
  std::vector<SenderPath::Retransmission>().swap(path.retransmits);
  path.retransmits_head = 0;
  path.loss_scan_psn = path.next_psn;
}

void Sender::MarkDataAcked(Instant now, PacketRef ref) {
  OutboundMessage* m = Find(ref.msg_seq);
  if (m == nullptr || m->done || m->IsAcked(ref.index)) return;
  m->acked[ref.index / 64] |= uint64_t{1} << (ref.index % 64);
  if (++m->acked_count == m->packets) CompleteMessage(now, *m, WcStatus::kSuccess);
}

void Sender::CompleteMessage(Instant now, OutboundMessage& m, WcStatus status) {
  if (m.done) return;
  m.done = true;
  m.status = status;
  MR_PROBE7(msg_completed, cfg_.local_conn_id, m.msg_seq, static_cast<uint8_t>(m.wr.opcode),
            static_cast<uint8_t>(status), (now - m.posted_at).count(), m.wr.local.length,
            m.wr.wr_id);
  if (status == WcStatus::kSuccess) ++conn_.counters_.messages_completed;
  if (!OrderedCompletion() &&
      (status != WcStatus::kSuccess || (m.wr.flags & send_flags::kSignaled))) {
    Completion c;
    c.wr_id = m.wr.wr_id;
    c.status = status;
    c.opcode = m.wr.opcode == WrOpcode::kWrite || m.wr.opcode == WrOpcode::kWriteWithImm
                   ? WcOpcode::kRdmaWrite
                   : WcOpcode::kSend;
    c.byte_len = m.wr.local.length;
    c.conn_id = cfg_.local_conn_id;
    conn_.EmitCompletion(c);
  }
}

void Sender::RetireAndReport() {
  while (!messages_.empty() && messages_.front().done) {
    OutboundMessage& m = messages_.front();
    if (OrderedCompletion() &&
        (m.status != WcStatus::kSuccess || (m.wr.flags & send_flags::kSignaled))) {
      Completion c;
      c.wr_id = m.wr.wr_id;
      c.status = m.status;
      c.opcode = m.wr.opcode == WrOpcode::kWrite || m.wr.opcode == WrOpcode::kWriteWithImm
                     ? WcOpcode::kRdmaWrite
                     : WcOpcode::kSend;
      c.byte_len = m.wr.local.length;
      c.conn_id = cfg_.local_conn_id;
      conn_.EmitCompletion(c);
    }
    messages_.pop_front();  // its slot keeps a small message's arrays for the next one posted
    ++base_seq_;
  }
  if (SeqLess(segment_seq_, base_seq_)) segment_seq_ = base_seq_;
}

void Sender::OnAck(Instant now, const wire::Packet& ack) {
  if (failed_) return;
  SenderPath& path = paths_[ack.path_id];
  ++conn_.counters_.acks_rcvd;
  // congestion.md §5.1: the latest hint of an ACK or a NAK that passes the checks, on whichever
  // path, is the share of every path of the connection: it replaces the set-up offer of paths
  // that have had no ACK yet, and a path paced at one packet per many RTTs learns of a larger
  // share without waiting for its own next ACK, which its small share would delay.
  const auto take_hint = [&] {
    if (ack.ack.window_hint == path.window_hint) return;
    for (SenderPath& p : paths_) p.window_hint = ack.ack.window_hint;
    if (!Paced()) {  // §6: pulls clock paced shares only
      pull_seen_ = false;
      pull_paths_.clear();
      pulls_owed_ = pull_bonus_ = 0;
      pull_gap_ = Duration(0);
      last_pull_at_ = kNever;
    }
  };
  // §6: pull_seq counts the pulls granted, so a lost ACK's pull comes with the next ACK, and a
  // copy or an ACK overtaken by a newer one adds none.
  const auto take_pull = [&] {
    // A responder that pulls says so in every ACK: a paced connection is clocked from its first
    // ACK, not from its first pull, which waits behind every other requester's.
    if ((ack.flags & wire::flags::kPulling) && Paced()) pull_seen_ = true;
    const uint8_t fresh = static_cast<uint8_t>(ack.ack.pull_seq - pull_seq_seen_);
    if (fresh == 0 || fresh >= 128) return;
    pull_seq_seen_ = ack.ack.pull_seq;
    conn_.counters_.pulls_rcvd += fresh;
    if (!Paced()) return;
    pull_seen_ = true;
    for (uint8_t i = 0; i < fresh && pull_paths_.size() < wire::kSackBits; ++i) {
      pull_paths_.push_back(ack.path_id);
    }
    if (last_pull_at_ != kNever) {
      const Duration gap = now - last_pull_at_;
      pull_gap_ = gap;
    }
    last_pull_at_ = now;
    pulls_owed_ -= std::min<uint32_t>(pulls_owed_, fresh);
    // A pull in the asking packet's own ACK found the responder's pacer idle; one that waited
    // (sent on its own: DELAYED_ACK) found it busy.
    if ((ack.flags & wire::flags::kPull) && !(ack.flags & wire::flags::kDelayedAck)) {
      pull_bonus_ = std::min<uint32_t>(pull_bonus_ + 1, wire::kSackBits);
    } else {
      pull_bonus_ -= std::min<uint32_t>(pull_bonus_, fresh);
    }
  };
  if (ack.ack.syndrome != wire::Syndrome::kAck) {
    take_hint();
    take_pull();
    OnNak(now, path, ack);
    RetireAndReport();
    Pump(now);
    return;
  }
  if ((ack.flags & wire::flags::kProbeReply) && path.state == PathState::kProbing &&
      ack.ack.ack_psn == path.probe_psn) {
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
  const uint32_t cum = ack.ack.cum_psn;
  if (SeqLess(path.next_psn, cum)) return;  // acknowledges PSNs never sent: ignore
  take_hint();
  take_pull();
  const uint32_t inflight_before = path.inflight_bytes;
  AckTally t;
  for (uint32_t psn = path.snd_una; SeqLess(psn, cum); ++psn) AckPsn(now, path, psn, ack, t);
  ack.ack.sack.ForEachSet([&](uint32_t k) {
    const uint32_t psn = cum + 1 + k;
    if (path.IsOutstanding(psn)) AckPsn(now, path, psn, ack, t);
  });
  AdvanceUna(path);
  if ((ack.flags & wire::flags::kProbeReply) && path.loss_query_order != 0) {
    ResolveLossQuery(now, path);
  }

  // ECN echo: the count is cumulative, so an older ACK overtaken by a newer one says nothing.
  // The responder's count starts at 0, so the first ACK's marks count too.
  uint32_t ce_delta = 0;
  if (SeqLess(path.last_ce_count, ack.ack.ce_count)) {
    ce_delta = ack.ack.ce_count - path.last_ce_count;
    path.last_ce_count = ack.ack.ce_count;
  }
  path.stats.ce_marks += ce_delta;

  if (t.packets > 0) {
    last_progress_ = now;
    plane_progress_[path.plane] = now;
    path.timeouts_without_progress = path.attributed_timeouts = 0;
    path.overtaken = false;
    path.tail_probes = path.loss_queries = 0;
    if (path.state == PathState::kSuspect) {
      SetState(now, path, PathState::kActive, PathEventReason::kProgress);
    }
    if (t.rtt_sample > Duration(0)) {
      path.rtt.AddSample(t.rtt_sample);
      latest_rtt_ = t.rtt_sample;
      peak_rtt_ = std::max(t.rtt_sample, peak_rtt_ - (peak_rtt_ - t.rtt_sample) / 16);
      MR_PROBE5(rtt_sample, cfg_.local_conn_id, path.id, t.rtt_sample.count(),
                path.rtt.srtt().count(), path.port);
    }
    path.congestion.OnAck(now, t.bytes, t.packets, ce_delta, t.rtt_sample, path.rtt.srtt(),
                          path.rtt.min_rtt());
    if (path.congestion.last_signal() == now) last_congestion_signal_ = now;
    const double used = path.congestion.cwnd() == 0
                            ? 0
                            : std::min(1.0, double(inflight_before) / path.congestion.cwnd());
    path.utilization = 0.9 * path.utilization + 0.1 * used;
    ArmPto(now, path);
    CheckOvertaken(now, path, t.newest_sent);
    CheckDegraded(now, path);
  }
  if (cfg_.profile.recovery == RecoveryPolicy::kSelective) DetectLosses(now, path);
  RetireAndReport();
  Pump(now);
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

void Sender::OnNak(Instant now, SenderPath& path, const wire::Packet& ack) {
  last_progress_ = now;  // the responder is alive and talking
  path.timeouts_without_progress = path.attributed_timeouts = 0;
  const uint32_t psn = ack.ack.ack_psn;
  const bool outstanding = path.IsOutstanding(psn) && !path.at(psn).acked;
  switch (ack.ack.syndrome) {
    case wire::Syndrome::kRnrNak: {
      ++conn_.counters_.rcvd_rnr_err;
      MR_PROBE5(rnr, cfg_.local_conn_id, path.id, psn, ack.ack.msg_seq, ack.ack.rnr_delay_us);
      if (!outstanding) return;
      SentPacket& e = path.at(psn);
      OutboundMessage* m = Find(e.ref.msg_seq);
      if (m == nullptr || m->done) return;
      if (m->rnr_until <= now) {
        // A new RNR episode for this message [M5]; 7 means retry forever, as in ibverbs.
        if (cfg_.rnr_retry != 7 && ++m->rnr_episodes > cfg_.rnr_retry) {
          conn_.Fail(now, WcStatus::kRnrRetryExcErr, m->msg_seq);
          return;
        }
        const Duration delay = ack.ack.rnr_delay_us != 0
                                   ? Duration(std::chrono::microseconds(ack.ack.rnr_delay_us))
                                   : cfg_.rnr_delay;
        m->rnr_until = now + delay;
        rnr_resume_at_ = std::min(rnr_resume_at_, m->rnr_until);
      }
      e.rnr_until = m->rnr_until;
      rnr_waits_.emplace_back(path.id, psn);
      return;
    }
    case wire::Syndrome::kSequenceErrorNak: {
      // [B1] go back to the PSN the responder expects; once per RTT for the same point.
      const uint32_t expected = ack.ack.cum_psn;
      if (SeqLess(path.next_psn, expected)) return;
      AckTally t;
      for (uint32_t p = path.snd_una; SeqLess(p, expected); ++p) AckPsn(now, path, p, ack, t);
      AdvanceUna(path);
      if (t.packets > 0) ArmPto(now, path);
      if (now - path.gbn_last_goback >= path.rtt.srtt() || t.packets > 0) {
        path.gbn_resending = gbn_pending_ = true;
        path.gbn_resend = path.snd_una;
        path.gbn_last_goback = now;
      }
      return;
    }
    case wire::Syndrome::kRemoteAccessNak:
    case wire::Syndrome::kInvalidRequestNak:
    case wire::Syndrome::kRemoteOperationalNak: {
      if (!outstanding) return;
      const WcStatus status = ack.ack.syndrome == wire::Syndrome::kRemoteAccessNak
                                  ? WcStatus::kRemAccessErr
                              : ack.ack.syndrome == wire::Syndrome::kInvalidRequestNak
                                  ? WcStatus::kRemInvReqErr
                                  : WcStatus::kRemOpErr;
      conn_.Fail(now, status, path.at(psn).ref.msg_seq);
      return;
    }
    case wire::Syndrome::kAck:
      return;
  }
}

void Sender::OnTimer(Instant now) {
  if (failed_) return;
  // A message paused by RNR resumes segmentation when its wait ends.
  if (rnr_resume_at_ <= now) {
    rnr_resume_at_ = kNever;
    for (const OutboundMessage& m : messages_) {
      if (m.rnr_until > now) rnr_resume_at_ = std::min(rnr_resume_at_, m.rnr_until);
    }
  }
  // RNR retries that are due [M5].
  for (size_t i = 0; i < rnr_waits_.size() && !failed_;) {
    auto [pid, psn] = rnr_waits_[i];
    SenderPath& path = paths_[pid];
    const bool live = path.IsOutstanding(psn) && !path.at(psn).acked &&
                      path.at(psn).rnr_until != Instant{0};
    if (!live) {
      rnr_waits_.erase(rnr_waits_.begin() + static_cast<ptrdiff_t>(i));
      continue;
    }
    if (path.at(psn).rnr_until <= now) {
      MR_PROBE3(timer_fired, cfg_.local_conn_id, pid, probe::kTimerRnr);
      path.at(psn).rnr_until = Instant{0};
      rnr_waits_.erase(rnr_waits_.begin() + static_cast<ptrdiff_t>(i));
      Retransmit(now, path, psn, Why::kRnr);
      continue;
    }
    ++i;
  }
  for (SenderPath& path : paths_) {
    if (failed_) return;
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
    if (path.pto_deadline <= now) OnPathTimeout(now, path);
  }
  if (failed_) return;
  if (!messages_.empty() && now - last_progress_ >= cfg_.no_progress_timeout) {
    MR_PROBE3(timer_fired, cfg_.local_conn_id, 0xffff, probe::kTimerNoProgress);
    ++conn_.counters_.retry_exceeded_err;
    conn_.Fail(now, WcStatus::kRetryExcErr, base_seq_);
    return;
  }
  RetireAndReport();
  Pump(now);
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
    if (tail_probes == kUnknown) tail_probes = TailProbesDue() ? kDue : kNotDue;
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
  // verdict: the path's state and window do not change, and at most kMaxTailProbes go.
  if (!PathMayTailProbe(path)) return;
  const uint32_t newest = TailProbePsn(now, path);
  if (newest == path.next_psn) return;
  const SentPacket& e = path.at(newest);
  if (e.sent_at >= newest_sent) return;
  const Duration margin = ReorderMargin(path, acked_srtt) -
                          (e.ack_requested ? cfg_.delayed_ack : Duration(0));
  const Instant due = std::max(now, e.sent_at + (now - newest_sent) + margin);
  path.loss_query_armed = false;
  ArmTailProbeAt(now, path, due);
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

bool Sender::OnlyFillersOutstanding(const SenderPath& path) const {
  for (uint32_t psn = path.snd_una; SeqLess(psn, path.next_psn); ++psn) {
    const SentPacket& e = path.at(psn);
    if (e.acked) continue;
    const OutboundMessage* m = Find(e.ref.msg_seq);
    if (m != nullptr && !m->done && !m->IsAcked(e.ref.index)) return false;
  }
  return true;
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

uint32_t Sender::TailProbePsn(Instant now, const SenderPath& path) const {
  for (uint32_t psn = path.next_psn; psn != path.snd_una;) {
    --psn;
    const SentPacket& e = path.at(psn);
    if (!e.acked && e.rnr_until <= now) return psn;
  }
  return path.next_psn;
}

void Sender::OnPathTimeout(Instant now, SenderPath& path) {
  MR_PROBE3(timer_fired, cfg_.local_conn_id, path.id, probe::kTimerPathTimeout);
  if (path.outstanding() == 0) {
    path.pto_deadline = kNever;
    return;
  }
  if (path.tail_probe_armed) {
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

bool Sender::Rotate(Instant now, SenderPath& path, PathEventReason reason) {
  if (now - path.last_rotation < cfg_.rotation_holddown) {
    path.rotate_at = path.last_rotation + cfg_.rotation_holddown;  // [R7] hold-down
    path.rotate_reason = reason;
    return false;
  }
  if (const Duration wait = RotationTokenWait(now); wait > Duration(0)) {
    path.rotate_at = now + wait;  // [R7] rate limit: when the next token is whole
    path.rotate_reason = reason;
    return false;
  }
  rotation_tokens_ -= 1;
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

Duration Sender::RotationTokenWait(Instant now) {
  const double burst = cfg_.rotation_burst;
  if (rotation_tokens_at_ == kNever) {
    rotation_tokens_ = burst;
  } else {
    const double elapsed_s = std::chrono::duration<double>(now - rotation_tokens_at_).count();
    rotation_tokens_ = std::min(burst, rotation_tokens_ + elapsed_s * cfg_.rotation_rate);
  }
  rotation_tokens_at_ = now;
  if (rotation_tokens_ >= 1) return Duration(0);
  const double wait_s = (1 - rotation_tokens_) / cfg_.rotation_rate;
  return std::max(Duration(1), std::chrono::duration_cast<Duration>(
                                   std::chrono::duration<double>(wait_s)) + Duration(1));
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

void Sender::Flush(Instant now, std::optional<uint32_t> culprit, WcStatus status) {
  failed_ = true;
  // Without a named culprit the oldest outstanding request carries the status.
  const uint32_t culprit_seq = culprit.value_or(base_seq_);
  for (OutboundMessage& m : messages_) {
    CompleteMessage(now, m, m.msg_seq == culprit_seq ? status : WcStatus::kWrFlushErr);
  }
  RetireAndReport();
  reroute_.clear();
  rnr_waits_.clear();
  for (SenderPath& p : paths_) {
    p.pto_deadline = p.next_probe_at = p.rotate_at = kNever;
  }
  rnr_resume_at_ = kNever;
}

Instant Sender::NextDeadline() const {
  if (failed_) return kNever;
  Instant t = kNever;
  for (const SenderPath& p : paths_) {
    if (p.pto_deadline < t) t = p.pto_deadline;
    if (p.rotate_at < t) t = p.rotate_at;
    if (p.state == PathState::kProbing && p.next_probe_at < t) t = p.next_probe_at;
  }
  for (const auto& [pid, psn] : rnr_waits_) {
    const SenderPath& p = paths_[pid];
    if (p.IsOutstanding(psn) && p.at(psn).rnr_until != Instant{0}) {
      t = std::min(t, p.at(psn).rnr_until);
    }
  }
  if (!messages_.empty()) t = std::min(t, last_progress_ + cfg_.no_progress_timeout);
  return std::min({t, rnr_resume_at_, pace_wakeup_});
}

PathStats Sender::Stats(uint16_t path_id) const {
  const SenderPath& p = paths_[path_id];
  PathStats s = p.stats;
  s.path_id = p.id;
  s.src_port = p.port;
  s.plane = p.plane;
  s.state = p.state;
  s.srtt = p.rtt.srtt();
  s.rttvar = p.rtt.rttvar();
  s.min_rtt = p.rtt.min_rtt();
  s.cwnd_bytes = p.congestion.cwnd();
  s.inflight_bytes = p.inflight_bytes;
  s.window_hint_bytes = p.window_hint;
  s.ecn_fraction = p.congestion.ecn_fraction();
  s.utilization = p.utilization;
  return s;
}

}  // namespace metaroce::core
