// Responder side. Rule numbers refer to docs/spec/paths-and-recovery.md [R#],
// messages-and-memory.md [M#] and baselines.md [B#].
#include "lib/core/receiver.h"

#include <algorithm>
#include <cstring>

#include "lib/core/connection.h"
#include "lib/core/probes.h"
#include "lib/core/sequence.h"

namespace metaroce::core {

void ReceiverPath::MarkReceived(uint32_t psn) {
  const int32_t d = SeqDistance(cum_psn, psn);
  if (d > 0) {
    bitmap.Set(static_cast<uint32_t>(d - 1));
    return;
  }
  // psn == cum_psn: advance over it and every contiguous PSN already received above it.
  const uint32_t advance = 1 + bitmap.LeadingRun();
  bitmap.ShiftDown(advance);
  cum_psn += advance;
}

void ReceiverPath::AdvanceTo(uint32_t psn) {
  const int32_t d = SeqDistance(cum_psn, psn);
  if (d <= 0) return;
  const bool psn_arrived = static_cast<uint32_t>(d - 1) < wire::kSackBits &&
                           bitmap.Test(static_cast<uint32_t>(d - 1));
  bitmap.ShiftDown(static_cast<uint32_t>(d));
  cum_psn = psn;
  if (psn_arrived) MarkReceived(psn);
}

Receiver::Receiver(Connection& conn)
    : conn_(conn), cfg_(conn.config_), paths_(conn.config_.path_count) {}

absl::Status Receiver::PostRecv(const RecvWorkRequest& wr) {
  if (receives_.size() >= cfg_.max_recv_queue) {
    return absl::ResourceExhaustedError("receive queue full");
  }
  std::byte* buf = nullptr;
  if (wr.local.length > 0) {
    switch (conn_.memory_.ResolveLocal(cfg_.pd, wr.local.lkey, wr.local.addr, wr.local.length,
                                       true, &buf)) {
      case AccessError::kNone: break;
      case AccessError::kOutOfBounds:
        return absl::OutOfRangeError("LOC_LEN_ERR: receive buffer is outside its memory region");
      case AccessError::kNotPermitted:
        return absl::PermissionDeniedError(
            "LOC_PROT_ERR: receive buffer's region lacks LOCAL_WRITE access");
      case AccessError::kUnknownKey:
        return absl::PermissionDeniedError(
            "LOC_PROT_ERR: lkey names no memory region of this connection's protection domain");
    }
  }
  PostedReceive& r = receives_.emplace_back();
  r.wr = wr;
  r.buf = buf;
  return absl::OkStatus();
}

bool Receiver::IsComplete(uint32_t msg_seq) const {
  // The set is empty while messages complete in order (usually): no hash of msg_seq then.
  return SeqLess(msg_seq, completed_below_) ||
         (!completed_above_.empty() && completed_above_.contains(msg_seq));
}

wire::Syndrome Receiver::Check(const wire::Packet& p, Placement* at) {
  const auto& d = p.data;
  // [M1] shape: the message must be within the requester's send window and cut at the MTU.
  const int32_t ahead = SeqDistance(completed_below_, d.msg_seq);
  if (ahead < 0 || static_cast<uint32_t>(ahead) >= cfg_.PeerSendQueue() ||
      d.msg_len > cfg_.max_message_bytes || d.offset % cfg_.mtu != 0 ||
      (d.offset >= d.msg_len && !(d.offset == 0 && d.msg_len == 0)) ||
      p.payload.size() != std::min<uint64_t>(cfg_.mtu, d.msg_len - d.offset)) {
    return wire::Syndrome::kInvalidRequestNak;
  }
  bool inserted = false;
  if (last_inbound_ == nullptr || last_inbound_seq_ != d.msg_seq) {
    auto [it, fresh] = inbound_.try_emplace(d.msg_seq);  // may move the others: none is cached
    inserted = fresh;
    last_inbound_seq_ = d.msg_seq;
    last_inbound_ = &it->second;
  }
  InboundMessage& m = *last_inbound_;
  if (inserted) {
    m.opcode = p.opcode;
    m.msg_len = d.msg_len;
    m.packets = std::max<uint32_t>(1, (d.msg_len + cfg_.mtu - 1) / cfg_.mtu);
    m.got.swap(spare_got_);  // empty, or the last completed message's (CompleteMessage)
    m.got.assign((m.packets + 63) / 64, 0);
    m.recv_seq = d.recv_seq;
    m.imm = d.imm;
  } else if (m.opcode != p.opcode || m.msg_len != d.msg_len ||
             (wire::ConsumesReceive(p.opcode) && m.recv_seq != d.recv_seq)) {
    return wire::Syndrome::kInvalidRequestNak;  // packets of one message disagree
  }
  if (m.refused != wire::Syndrome::kAck) return m.refused;
  at->message = &m;
  if (m.Got(d.offset / cfg_.mtu) || reorder_.contains({d.msg_seq, d.offset})) {
    at->duplicate = true;
    at->dst = nullptr;
    return wire::Syndrome::kAck;  // duplicate data: caller records the PSN only
  }
  // [M2] every Write packet is checked for key, bounds and access before memory is touched; [M7]
  // only regions of the connection's protection domain are found.
  std::byte* target = nullptr;
  if (wire::IsWrite(p.opcode)) {
    const AccessError denied = conn_.memory_.ResolveRemoteWrite(cfg_.pd, d.rkey, d.remote_addr,
                                                                p.payload.size(), &target);
    if (denied != AccessError::kNone) {
      MR_PROBE6(access_error, cfg_.local_conn_id, p.path_id, d.rkey, d.remote_addr,
                p.payload.size(), static_cast<uint8_t>(denied));
      m.refused = wire::Syndrome::kRemoteAccessNak;  // [M2] the whole message is refused
      return m.refused;
    }
  }
  // [M3] Sends and Write-with-immediate consume the receive they name.
  if (wire::ConsumesReceive(p.opcode)) {
    if (SeqLess(d.recv_seq, recv_base_)) return wire::Syndrome::kInvalidRequestNak;
    const uint32_t idx = d.recv_seq - recv_base_;
    if (idx >= receives_.size()) return wire::Syndrome::kRnrNak;  // [M5]
    PostedReceive& r = receives_[idx];
    if (r.done) return wire::Syndrome::kInvalidRequestNak;
    // [M3] one receive, one message: another message naming it is refused.
    if (r.claimed && r.claimed_by != d.msg_seq) return wire::Syndrome::kInvalidRequestNak;
    if (p.opcode == wire::Opcode::kSend || p.opcode == wire::Opcode::kSendImm) {
      if (d.msg_len > r.wr.local.length) {
        // [M4] too long for the receive: it completes with LOC_LEN_ERR, the requester is told.
        Completion c;
        c.wr_id = r.wr.wr_id;
        c.status = WcStatus::kLocLenErr;
        c.opcode = WcOpcode::kRecv;
        c.byte_len = d.msg_len;
        c.conn_id = cfg_.local_conn_id;
        CompleteReceive(d.recv_seq, c);
        m.refused = wire::Syndrome::kInvalidRequestNak;
        return m.refused;
      }
      target = r.buf == nullptr ? nullptr : r.buf + d.offset;
    }
    r.claimed = true;
    r.claimed_by = d.msg_seq;
  }
  at->duplicate = false;
  at->dst = target;
  return wire::Syndrome::kAck;
}

void Receiver::OnData(Instant now, const wire::Packet& p, const RxMeta& meta) {
  if (failed_) return;
  ReceiverPath& path = paths_[p.path_id];
  path.peer_port = meta.src_port;
  if (meta.ce) ++path.ce_count;
  if (meta.ce && cfg_.dcqcn && cnp_limiter_.OnMarked(now, cfg_.dcqcn->cnp_interval)) {
    cnp_owed_ = true;  // [B3] the ACK sent next (at once if this one is accepted)
  }
  if (conn_.budget_ != nullptr) {
    conn_.budget_->OnData(now, conn_.activity_, static_cast<uint32_t>(p.payload.size()));  // cc §5
    // §6: every arrival took the link, accepted or not; the pacer counts those it did not pull.
    PullPacer& pacer = conn_.budget_->pacer();
    // A first window's arrivals were granted by the offer (§5.3): the pacer counts them as pulled.
    const bool pulled = (p.flags & wire::flags::kPulled) != 0;
    const bool granted =
        pulled || conn_.budget_->TakePrepaid(conn_.activity_,
                                             static_cast<uint32_t>(p.payload.size()));
    pacer.OnArrival(now, static_cast<uint32_t>(wire::kDataHeadersSize + p.payload.size()),
                    granted, meta.ce);
    // Data that asks for no pull: the requester has nothing more (a FILLER says nothing).
    if (!(p.flags & (wire::flags::kWantsPull | wire::flags::kFiller)) && pacer.enabled()) {
      pacer.CancelPulls(cfg_.local_conn_id);
    }
  }
  // [R9] classify the PSN against the path's window.
  const int32_t d = SeqDistance(path.cum_psn, p.psn);
  if (d < 0 || (d > 0 && static_cast<uint32_t>(d) <= wire::kSackBits &&
                path.bitmap.Test(static_cast<uint32_t>(d - 1)))) {
    ++conn_.counters_.duplicate_request;
    SendAck(now, p.path_id, p.psn, 0);  // tell the requester again what arrived
    return;
  }
  if (static_cast<uint32_t>(d) > wire::kSackBits) {
    ++conn_.counters_.out_of_window;
    return;
  }
  if (cfg_.profile.placement == PlacementPolicy::kInOrderOnly && d != 0) {
    // [B1] go-back-N takes PSNs in order only; one SEQUENCE_ERROR NAK per gap.
    if (!path.seq_nak_sent) {
      path.seq_nak_sent = true;
      ++conn_.counters_.seq_err_naks_sent;
      SendAck(now, p.path_id, p.psn, 0, wire::Syndrome::kSequenceErrorNak);
    }
    return;
  }
  // [R10] a packet that directly follows the highest PSN received on the path (in order, or
  // extending the run above a gap the requester already knows of) may wait for a coalesced ACK;
  // one that opens a gap or fills one is ACKed at once.
  const uint32_t top = path.bitmap.HighestPlusOne();  // 0: nothing above cum_psn
  const bool follows_top = static_cast<uint32_t>(d) == (top == 0 ? 0 : top + 1);
  if ((p.flags & wire::flags::kFiller) || IsComplete(p.data.msg_seq)) {
    // [R8] the PSN is new but its data is already here: record the PSN, place nothing.
    if (!(p.flags & wire::flags::kFiller)) ++conn_.counters_.duplicate_request;
    path.MarkReceived(p.psn);
    AfterAccept(now, p.path_id, p, follows_top);
    return;
  }
  Placement at;
  const wire::Syndrome verdict = Check(p, &at);
  if (verdict != wire::Syndrome::kAck) {
    // A refused packet's PSN stays unacknowledged, so a lost NAK costs a retransmission and a
    // new NAK, never a silent loss [M6].
    MR_PROBE6(nak_sent, cfg_.local_conn_id, p.path_id, p.psn, static_cast<uint8_t>(verdict),
              p.data.msg_seq, static_cast<uint8_t>(p.opcode));
    if (verdict == wire::Syndrome::kRnrNak) ++conn_.counters_.rnr_naks_sent;
    if (verdict == wire::Syndrome::kRemoteAccessNak) ++conn_.counters_.access_naks_sent;
    SendAck(now, p.path_id, p.psn, 0, verdict, p.data.msg_seq);
    return;
  }
  const bool fresh = !at.duplicate;
  if (!fresh) {
    ++conn_.counters_.duplicate_request;  // data already placed or waiting: PSN only
  } else if (cfg_.profile.placement == PlacementPolicy::kReorderBuffer &&
             (p.data.msg_seq != deliver_msg_ || p.data.offset != deliver_offset_)) {
    if (!Buffer(p, at.dst)) {
      ++conn_.counters_.reorder_drops;  // no room: the PSN stays a gap, to be retransmitted
      return;
    }
  } else {
    Place(p, *at.message, p.payload, at.dst);
    if (cfg_.profile.placement == PlacementPolicy::kReorderBuffer) DrainReorderBuffer();
  }
  // congestion.md §6: one pull per data unit that asked for one, at its first arrival (a
  // duplicate, a hedge's second copy, a refused packet pull nothing: the requester's pulls in
  // circulation stay as many as it started with). The ACK that goes now carries it.
  if (fresh && (p.flags & wire::flags::kWantsPull) && conn_.budget_ != nullptr) {
    if (conn_.budget_->pacer().RequestPull(now, cfg_.local_conn_id)) {
      pull_owed_ = true;
      ++pulls_granted_;
      ++conn_.counters_.pulls_sent;
    }
  }
  ++path.rx_packets;
  ++conn_.counters_.rcvd_pkts;
  path.MarkReceived(p.psn);
  AfterAccept(now, p.path_id, p, follows_top);
}

void Receiver::Place(const wire::Packet& p, InboundMessage& m, std::span<const std::byte> payload,
                     std::byte* dst) {
  const uint32_t msg_seq = p.data.msg_seq;
  if (!payload.empty()) std::memcpy(dst, payload.data(), payload.size());
  if (conn_.observer_ != nullptr) {
    conn_.observer_->OnPlaced(conn_, msg_seq, p.data.offset,
                              std::span<const std::byte>(dst, payload.size()));
  }
  if (cfg_.profile.placement == PlacementPolicy::kReorderBuffer) {
    deliver_offset_ += static_cast<uint32_t>(payload.size());
    if (deliver_offset_ >= p.data.msg_len) {
      ++deliver_msg_;
      deliver_offset_ = 0;
    }
  }
  const uint32_t index = p.data.offset / cfg_.mtu;
  m.got[index / 64] |= uint64_t{1} << (index % 64);
  if (++m.received == m.packets) CompleteMessage(msg_seq);
}

bool Receiver::Buffer(const wire::Packet& p, std::byte* dst) {
  if (reorder_bytes_ + p.payload.size() > cfg_.profile.reorder_buffer_bytes) return false;
  Buffered& b = reorder_[{p.data.msg_seq, p.data.offset}];
  b.header = p;
  b.bytes.assign(p.payload.begin(), p.payload.end());
  b.header.payload = b.bytes;
  b.dst = dst;
  reorder_bytes_ += p.payload.size();
  return true;
}

void Receiver::DrainReorderBuffer() {
  for (;;) {
    auto it = reorder_.find({deliver_msg_, deliver_offset_});
    if (it == reorder_.end()) return;
    Buffered b = std::move(it->second);
    reorder_.erase(it);
    reorder_bytes_ -= b.bytes.size();
    last_inbound_ = nullptr;  // operator[] may insert, and move what is cached
    Place(b.header, inbound_[b.header.data.msg_seq], b.bytes, b.dst);
  }
}

void Receiver::CompleteMessage(uint32_t msg_seq) {
  auto it = inbound_.find(msg_seq);
  InboundMessage& m = it->second;
  ++conn_.counters_.messages_received;
  // The receive is the one this message claimed ([M3]: no other message can complete it), so it
  // is still posted and not done; checked anyway, as memory safety must not rest on that.
  const uint32_t idx = m.recv_seq - recv_base_;
  if (wire::ConsumesReceive(m.opcode) && !SeqLess(m.recv_seq, recv_base_) &&
      idx < receives_.size() && !receives_[idx].done) {
    Completion c;
    c.wr_id = receives_[idx].wr.wr_id;
    c.status = WcStatus::kSuccess;
    c.opcode = m.opcode == wire::Opcode::kWriteImm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
    c.byte_len = m.msg_len;
    c.has_imm = wire::CarriesImm(m.opcode);
    c.imm = m.imm;
    c.conn_id = cfg_.local_conn_id;
    CompleteReceive(m.recv_seq, c);
  }
  if (last_inbound_ == &it->second) last_inbound_ = nullptr;
  if (m.got.capacity() <= kSpareGotWords) spare_got_.swap(m.got);  // for the next message
  inbound_.erase(it);
  if (msg_seq == completed_below_) {
    ++completed_below_;
    while (completed_above_.erase(completed_below_) > 0) ++completed_below_;
  } else {
    completed_above_.insert(msg_seq);
  }
}

void Receiver::CompleteReceive(uint32_t recv_seq, const Completion& c) {
  PostedReceive& r = receives_[recv_seq - recv_base_];
  r.done = true;
  r.completion = c;
  if (!cfg_.ordered_completion) conn_.EmitCompletion(c);
  while (!receives_.empty() && receives_.front().done) {
    if (cfg_.ordered_completion) conn_.EmitCompletion(receives_.front().completion);
    receives_.pop_front();
    ++recv_base_;
  }
}

void Receiver::AfterAccept(Instant now, uint16_t path_id, const wire::Packet& p,
                           bool follows_top) {
  ReceiverPath& path = paths_[path_id];
  path.last_psn = p.psn;
  path.seq_nak_sent = false;
  // [R10] ACK at once when the packet opened or filled a gap, when asked, or every ack_every
  // packets. Packets arriving above a gap already reported are coalesced like in-order ones:
  // the requester learnt of the gap from the first ACK, and acking each of them (one ACK per
  // packet for a whole RTT after every loss) cost the peer more CPU than the loss itself.
  if (!follows_top || (p.flags & wire::flags::kAckRequest) || pull_owed_ || cnp_owed_ ||
      ++path.unacked_in_order >= cfg_.ack_every) {
    SendAck(now, path_id, p.psn, 0);
  } else if (path.ack_deadline == kNever) {
    path.ack_deadline = now + cfg_.delayed_ack;
    // In order of deadline: a clock that stepped back (a caller's, not a monotonic one) inserts.
    if (ack_deadlines_.empty() || ack_deadlines_.back().second <= path.ack_deadline) {
      ack_deadlines_.emplace_back(path_id, path.ack_deadline);
    } else {
      auto at = ack_deadlines_.end();
      while (at != ack_deadlines_.begin() && std::prev(at)->second > path.ack_deadline) --at;
      ack_deadlines_.emplace(at, path_id, path.ack_deadline);
    }
  }
}

void Receiver::OnProbe(Instant now, const wire::Packet& p, const RxMeta& meta) {
  if (failed_) return;
  ReceiverPath& path = paths_[p.path_id];
  path.peer_port = meta.src_port;
  path.AdvanceTo(p.psn);  // [R7] PSNs below the probe's will never be sent
  SendAck(now, p.path_id, p.psn, wire::flags::kProbeReply);
}

void Receiver::SendAck(Instant now, uint16_t path_id, uint32_t trigger_psn, uint16_t flags,
                       wire::Syndrome syndrome, uint32_t msg_seq) {
  ReceiverPath& path = paths_[path_id];
  // The ACK is written straight from this state (no wire::Packet built and read back).
  wire::BaseFields h;
  h.opcode = wire::Opcode::kAck;
  h.flags = flags | (pull_owed_ ? wire::flags::kPull : 0) | (cnp_owed_ ? wire::flags::kCnp : 0);
  cnp_owed_ = false;
  if (conn_.budget_ != nullptr && conn_.budget_->pacer().enabled()) {
    h.flags |= wire::flags::kPulling;
  }
  pull_owed_ = false;
  h.dest_conn = cfg_.remote_conn_id;
  h.path_id = path_id;
  h.token = cfg_.tx_token;
  wire::Packet::Ack a;
  a.pull_seq = pulls_granted_;
  a.cum_psn = path.cum_psn;
  a.ack_psn = trigger_psn;
  a.ce_count = path.ce_count;
  a.window_hint = conn_.budget_ == nullptr ? 0 : conn_.budget_->Hint(now);
  a.syndrome = syndrome;
  if (syndrome == wire::Syndrome::kRnrNak) {
    a.rnr_delay_us = static_cast<uint16_t>(std::min<int64_t>(
        0xffff, std::chrono::duration_cast<std::chrono::microseconds>(cfg_.rnr_delay).count()));
  }
  a.msg_seq = msg_seq;
  if (cfg_.profile.placement != PlacementPolicy::kInOrderOnly) a.sack = path.bitmap;
  std::array<std::byte, wire::kAckPacketSize> buf;
  wire::WriteAckPacket(h, a, buf.data());
  TxMeta meta;
  meta.conn_id = cfg_.local_conn_id;
  meta.path_id = path_id;
  meta.plane = static_cast<uint8_t>(path_id % cfg_.plane_count);
  // [R10] every MetaRoCE datagram is addressed to the MetaRoCE port (one port to steer and
  // filter); an ACK carries the path's source port back as its own source port.
  meta.src_port = path.peer_port;
  meta.dst_port = cfg_.udp_port;
  conn_.sink_.Transmit(meta, buf, {});
  MR_PROBE8(packet_sent, meta.conn_id, meta.path_id, trigger_psn, static_cast<uint8_t>(h.opcode),
            0, false, meta.src_port, h.flags);
  ++conn_.counters_.acks_sent;
  path.unacked_in_order = 0;
  path.ack_deadline = kNever;
}

void Receiver::SendPull(Instant now, uint64_t turn) {
  if (failed_) return;
  // The pulled packet goes where the pull comes from: path `turn` mod paths, so that the host's
  // pulls, one after the other, name every path index (and every plane: path mod planes) in
  // turn, whichever connections they go to. A path that has received nothing yet has no port
  // to answer to: the next one that has.
  const uint16_t n = cfg_.SprayPaths();
  uint16_t path_id = n;
  for (uint16_t i = 0; i < n && path_id == n; ++i) {
    const auto p = static_cast<uint16_t>((turn + i) % n);
    if (paths_[p].peer_port != 0) path_id = p;
  }
  if (path_id == n) return;  // nothing received: no pull was asked for
  ++pulls_granted_;
  ++conn_.counters_.pulls_sent;
  // congestion.md §6: a pull on its own goes twice. Every ACK carries the count of pulls
  // granted, so the copy is harmless; a pull lost on its way leaves a requester that has
  // nothing else in flight waiting two of its pull gaps for its PROBE's answer.
  for (int copy = 0; copy < 2; ++copy) {
    SendAck(now, path_id, paths_[path_id].last_psn,
            wire::flags::kPull | wire::flags::kDelayedAck);
  }
}

void Receiver::OnTimer(Instant now) {
  if (failed_) return;
  for (uint16_t i = 0; i < paths_.size(); ++i) {
    if (paths_[i].ack_deadline <= now) {
      MR_PROBE3(timer_fired, cfg_.local_conn_id, i, probe::kTimerDelayedAck);
      SendAck(now, i, paths_[i].last_psn, wire::flags::kDelayedAck);
    }
  }
}

Instant Receiver::NextDeadline() const {
  if (failed_) return kNever;
  while (!ack_deadlines_.empty()) {
    const auto [path_id, deadline] = ack_deadlines_.front();
    if (paths_[path_id].ack_deadline == deadline) return deadline;
    ack_deadlines_.pop_front();  // its ACK went
  }
  return kNever;
}

void Receiver::Flush() {
  failed_ = true;
  for (PostedReceive& r : receives_) {
    if (r.done) continue;
    r.done = true;
    r.completion = Completion{};
    r.completion.wr_id = r.wr.wr_id;
    r.completion.status = WcStatus::kWrFlushErr;
    r.completion.opcode = WcOpcode::kRecv;
    r.completion.conn_id = cfg_.local_conn_id;
    if (!cfg_.ordered_completion) conn_.EmitCompletion(r.completion);
  }
  while (!receives_.empty()) {
    if (cfg_.ordered_completion) conn_.EmitCompletion(receives_.front().completion);
    receives_.pop_front();
    ++recv_base_;
  }
  reorder_.clear();
  reorder_bytes_ = 0;
  for (ReceiverPath& p : paths_) p.ack_deadline = kNever;
  ack_deadlines_.clear();
}

}  // namespace metaroce::core
