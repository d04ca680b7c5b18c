// Requester side. Rule numbers [R#] refer to docs/spec/paths-and-recovery.md.
#include "lib/core/sender.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/core/connection.h"
#include "lib/core/probes.h"
#include "lib/core/sequence.h"

namespace metaroce::core {
namespace {

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
  if (cfg_.dcqcn) dcqcn_ = std::make_unique<DcqcnRate>(*cfg_.dcqcn);
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

bool Sender::NearTail() const {
  if (SeqLess(segment_seq_ + 1, next_msg_seq_)) return false;  // a later message waits
  const OutboundMessage* m = Find(segment_seq_);
  uint64_t left = reroute_.size();
  if (m != nullptr && !m->done) left += m->packets - m->next_to_send;
  return left < cfg_.SprayPaths();
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
    if (dcqcn_ && !dcqcn_->MaySend(now)) {  // [B3] DCQCN's rate, before any window
      pace_wakeup_ = std::min(pace_wakeup_, dcqcn_->NextSendAt());
      return;
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
  if (dcqcn_) dcqcn_->OnSent(now, static_cast<uint32_t>(headers.size() + payload.size()));
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
  if (dcqcn_ && (ack.flags & wire::flags::kCnp)) dcqcn_->OnCnp(now);
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
    OnProbeReply(now, path);
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
    OnRotationAndProbeTimers(now, path);
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
