// The responder half of a connection (internal to Connection): per-path receive windows and ACK
// generation, the checks every data packet passes before it touches memory, placement (direct,
// in-order only, or through a reorder buffer), receive matching and responder completions.
// Rules [R#] and [M#] refer to docs/spec/paths-and-recovery.md and messages-and-memory.md.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "lib/core/config.h"
#include "lib/core/packet_sink.h"
#include "lib/core/receive_budget.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

class Connection;

// The responder's view of one path: which PSNs arrived, and when to say so.
struct ReceiverPath {
  uint32_t cum_psn = 0;      // next PSN expected; all below arrived (or were abandoned)
  wire::SackBitmap bitmap;   // bit k: PSN cum_psn + 1 + k arrived
  uint32_t ce_count = 0;     // CE-marked data packets seen (cumulative, echoed in ACKs)
  uint16_t peer_port = 0;    // source port of the latest packet on this path: ACKs go there
  uint32_t unacked_in_order = 0;
  uint32_t last_psn = 0;     // PSN of the latest accepted packet (for delayed ACKs)
  Instant ack_deadline = kNever;
  bool seq_nak_sent = false;  // go-back-N: one SEQUENCE_ERROR NAK per gap
  uint64_t rx_packets = 0;

  // Records `psn` as arrived. Precondition: inside the window and not yet arrived.
  void MarkReceived(uint32_t psn);
  // Moves the cumulative point forward to `psn` (PSNs below it will never be sent) [R7].
  void AdvanceTo(uint32_t psn);
};

// State of one incoming message until it is complete.
struct InboundMessage {
  wire::Opcode opcode = wire::Opcode::kWrite;
  uint32_t msg_len = 0;
  uint32_t packets = 0;
  uint32_t received = 0;
  std::vector<uint64_t> got;  // bit per packet placed
  uint32_t recv_seq = 0;
  uint32_t imm = 0;
  wire::Syndrome refused = wire::Syndrome::kAck;  // != kAck: every packet is answered so

  bool Got(uint32_t i) const { return (got[i / 64] >> (i % 64)) & 1u; }
};

struct PostedReceive {
  RecvWorkRequest wr;
  std::byte* buf = nullptr;
  bool done = false;
  bool claimed = false;     // [M3] a message named it and passed the checks
  uint32_t claimed_by = 0;  // ... that message's msg_seq
  Completion completion;
};

class Receiver {
 public:
  explicit Receiver(Connection& conn);

  absl::Status PostRecv(const RecvWorkRequest& wr);
  void OnData(Instant now, const wire::Packet& p, const RxMeta& meta);
  void OnProbe(Instant now, const wire::Packet& p, const RxMeta& meta);
  void OnTimer(Instant now);
  Instant NextDeadline() const;
  // A pull the host's pacer released as its `turn`-th (congestion.md §6): an ACK with
  // flags::kPull | kDelayedAck (it was deferred: no RTT sample), sent twice, on path turn mod
  // the connection's paths.
  void SendPull(Instant now, uint64_t turn);
  // Completes every posted receive with WR_FLUSH_ERR and stops accepting data.
  void Flush();

  size_t posted() const { return receives_.size(); }
  uint64_t rx_packets(uint16_t path) const { return paths_[path].rx_packets; }

 private:
  bool IsComplete(uint32_t msg_seq) const;
  // Where a packet that passed Check goes: its message's state, whether its data is already
  // placed or waiting in the reorder buffer (then only its PSN is recorded), and where its
  // payload goes otherwise.
  struct Placement {
    InboundMessage* message = nullptr;  // in inbound_; valid until the message completes
    bool duplicate = false;
    std::byte* dst = nullptr;
  };
  // Checks a new packet against its message, memory and receives [M2-M4]. Returns kAck with
  // `*at` filled in when it may be placed; otherwise the NAK to answer with.
  wire::Syndrome Check(const wire::Packet& p, Placement* at);
  // Places the payload of `p`, a packet of message `m`, at `dst`.
  void Place(const wire::Packet& p, InboundMessage& m, std::span<const std::byte> payload,
             std::byte* dst);
  void CompleteMessage(uint32_t msg_seq);
  void CompleteReceive(uint32_t recv_seq, const Completion& c);
  void SendAck(Instant now, uint16_t path_id, uint32_t trigger_psn, uint16_t flags,
               wire::Syndrome syndrome = wire::Syndrome::kAck, uint32_t msg_seq = 0);
  void AfterAccept(Instant now, uint16_t path_id, const wire::Packet& p, bool follows_top);
  // Reorder-buffer placement [B2].
  bool Buffer(const wire::Packet& p, std::byte* dst);
  void DrainReorderBuffer();

  Connection& conn_;
  const ConnectionConfig& cfg_;
  std::vector<ReceiverPath> paths_;
  absl::flat_hash_map<uint32_t, InboundMessage> inbound_;
  // The bitmap of the message completed last, for the next one to arrive: with one completed
  // for each one begun, receiving allocates none per message. Larger ones are freed.
  static constexpr size_t kSpareGotWords = 64;
  std::vector<uint64_t> spare_got_;
  // The message Check found last (packets of one message come in runs): the next packet of it
  // costs a compare, not a hash and a probe. Cleared wherever inbound_ may move or drop it.
  uint32_t last_inbound_seq_ = 0;
  InboundMessage* last_inbound_ = nullptr;
  uint32_t completed_below_ = 0;                  // every msg_seq below is complete
  absl::flat_hash_set<uint32_t> completed_above_;  // complete msg_seqs at or above it
  std::deque<PostedReceive> receives_;             // recv_seq recv_base_ .. +size-1
  uint32_t recv_base_ = 0;
  bool failed_ = false;
  // Reorder buffer: packets waiting for their turn, keyed by (msg_seq, offset).
  struct Buffered {
    wire::Packet header;  // payload span points into `bytes`
    std::vector<std::byte> bytes;
    std::byte* dst = nullptr;
  };
  std::map<std::pair<uint32_t, uint32_t>, Buffered> reorder_;
  uint64_t reorder_bytes_ = 0;
  // The pacer granted the packet being processed a pull at once: its first ACK carries it.
  bool pull_owed_ = false;
  // [B3] DCQCN: the notification point, and a CNP the next ACK carries.
  CnpLimiter cnp_limiter_;
  bool cnp_owed_ = false;
  uint8_t pulls_granted_ = 0;  // pulls granted on this connection, mod 256: every ACK's pull_seq
  uint32_t deliver_msg_ = 0;     // next (msg_seq, offset) to place in order
  uint32_t deliver_offset_ = 0;
  // Delayed-ACK deadlines as armed, (path, deadline), earliest first: each is armed delayed_ack
  // after an arrival, so the order armed is (with a monotonic clock) the order due, and the front
  // entry that is still its path's deadline is the earliest (NextDeadline, without a walk of the
  // paths). An entry whose path has sent its ACK since is stale and dropped at the front.
  mutable std::deque<std::pair<uint16_t, Instant>> ack_deadlines_;
};

}  // namespace metaroce::core
