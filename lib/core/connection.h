// A MetaRoCE connection (the queue pair): both directions of one reliable connection with N logical
// paths, as a pure state machine.
//
// Sans-I/O contract: the connection reads no clock, opens no socket, starts no thread and draws no
// randomness except from the seed in its config. Every entry point takes `now`. Packets leave
// through the PacketSink given at construction, synchronously, from within the entry point that
// caused them. The caller must call OnTimer(now) no later than NextDeadline().
//
// Memory contract: the connection reads payload from and writes payload to registered memory only,
// through the MemoryTable (which checks keys, bounds and access for every byte range).
//
// Thread-safety: none. A connection, its MemoryTable and its PacketSink belong to one thread.
//
// Owner contract: NextDeadline() is O(1) (kept at the end of every entry point), and an owner of
// many connections never has to walk them: a ConnectionObserver given at construction hears when
// a connection's deadline changes and when it has completions or path events waiting (Endpoint
// keeps its timer heap and its list of connections with output that way).
//
// Errors: Post*() refuse a request with a Status that says why (queue full, bad key, connection in
// error). A request once accepted always produces a completion if it fails, and on success when it
// is signaled (sends) or always (receives). After a fatal error (retry exceeded, remote access
// error) the connection moves to kError and flushes every outstanding request with WR_FLUSH_ERR.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "lib/core/config.h"
#include "lib/core/deadline_heap.h"
#include "lib/core/memory_table.h"
#include "lib/core/packet_sink.h"
#include "lib/core/path_state.h"
#include "lib/core/receive_budget.h"
#include "lib/core/types.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

class Connection;
class ConnectionTestPeer;
class Sender;
class Receiver;

// What a connection tells its owner, synchronously, at the end of the entry point that caused it
// (never from within a PacketSink call).
class ConnectionObserver {
 public:
  virtual ~ConnectionObserver() = default;
  // NextDeadline() changed; `deadline` is its new value (kNever: no timer).
  virtual void OnDeadlineChanged(Connection& c, Instant deadline) = 0;
  // Completions or path events are waiting, and none were announced since the owner last called
  // c.TakeOutputAnnouncement(). Announced once: a connection the owner has taken stays silent
  // until its owner polls it and leaves output behind, or new output arrives after the take.
  virtual void OnOutputReady(Connection& c) = 0;
  // A verification hook, called during OnPacket right after payload was written to memory:
  // `placed` is the destination range as it now holds, for bytes [offset, offset + size) of
  // message `msg_seq`. Simulators and tests check every placed byte here without keeping each
  // message's buffer. Default: nothing.
  virtual void OnPlaced(Connection& c, uint32_t msg_seq, uint32_t offset,
                        std::span<const std::byte> placed) {
    (void)c, (void)msg_seq, (void)offset, (void)placed;
  }
};

// Counters of one connection (both directions). Names follow Soft-RoCE's where they mean the same.
struct ConnectionCounters {
  uint64_t sent_pkts = 0;            // data packets sent, retransmissions included
  uint64_t rcvd_pkts = 0;            // data packets accepted
  uint64_t retransmits = 0;          // data packets sent again (gap, timeout, go-back-N, reroute)
  uint64_t gap_retransmits = 0;      // ... of which triggered by a SACK gap
  uint64_t timeout_retransmits = 0;  // ... of which by a probe timeout (tail loss)
  uint64_t tail_probes = 0;          // ... of which a path's newest packet in the tail [R5d]
  uint64_t rerouted_packets = 0;     // ... of which moved off a failed path
  uint64_t hedged_packets = 0;       // ... of which copied off an overtaken path (sent)
  uint64_t congestion_loss_cuts = 0; // losses with a queue around them: windows halved
  uint64_t duplicate_request = 0;    // received data packets that were already received
  uint64_t out_of_window = 0;        // received PSNs beyond the SACK window (dropped)
  uint64_t bad_token = 0;            // packets dropped for a wrong connection token
  uint64_t bad_path = 0;             // packets dropped for a path id out of range
  uint64_t reorder_drops = 0;        // reorder-buffer baseline: dropped for lack of room
  uint64_t seq_err_naks_sent = 0;    // go-back-N: out-of-order packets refused
  uint64_t rcvd_rnr_err = 0;         // RNR NAKs received
  uint64_t rnr_naks_sent = 0;
  uint64_t access_naks_sent = 0;
  uint64_t acks_sent = 0;
  uint64_t acks_rcvd = 0;
  uint64_t pulls_sent = 0;    // responder: pulls granted (congestion.md §6)
  uint64_t pulls_rcvd = 0;    // requester: pulls received
  uint64_t pulled_pkts = 0;   // requester: new data packets sent on a pull
  uint64_t probes_sent = 0;
  uint64_t loss_queries = 0;         // ... of which asked whether overdue packets arrived [R5d]
  uint64_t retry_exceeded_err = 0;
  uint64_t messages_completed = 0;   // requester: send work requests completed successfully
  uint64_t messages_received = 0;    // responder: messages fully placed
};

class Connection {
 public:
  enum class State : uint8_t { kReady, kError };

  // `memory`, `sink`, `observer` (optional) and `budget` (optional) must outlive the connection.
  // The config must pass Validate(). `budget` is the host's receive budget, whose share every ACK
  // of this connection carries as its window_hint (receive_budget.h); none: ACKs carry no hint.
  Connection(const ConnectionConfig& config, MemoryTable& memory, PacketSink& sink,
             ConnectionObserver* observer = nullptr, ReceiveBudget* budget = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Requester side: queue a Write, Write-with-immediate, Send or Send-with-immediate. The local
  // buffer is checked now (LOC_PROT_ERR / LOC_LEN_ERR are reported as refusals) and read when its
  // packets are sent, so it must stay untouched until the completion.
  absl::Status PostSend(Instant now, const SendWorkRequest& wr);
  // Responder side: post a receive buffer. Receives match incoming Sends and Write-with-immediate
  // in posting order (the n-th receive matches the message carrying recv_seq n).
  absl::Status PostRecv(Instant now, const RecvWorkRequest& wr);

  // Processes one packet addressed to this connection (already parsed; dest_conn matched).
  void OnPacket(Instant now, const wire::Packet& packet, const RxMeta& meta);
  // Runs every timer due at or before `now`.
  void OnTimer(Instant now);
  // Earliest instant at which OnTimer must be called, or kNever. O(1).
  Instant NextDeadline() const { return deadline_; }

  // Moves up to out.size() completions into `out`; returns how many. Output left behind is
  // announced again (ConnectionObserver::OnOutputReady).
  size_t PollCompletions(std::span<Completion> out);
  // Moves up to out.size() path events (state changes, port rotations) into `out`.
  size_t PollEvents(std::span<PathEvent> out);
  bool has_output() const { return !completions_.empty() || !events_.empty(); }
  // The owner takes the announcement of output: the next output is announced anew.
  void TakeOutputAnnouncement() { output_announced_ = false; }
  // For the owner's timer heap (DeadlineHeap) only.
  HeapSlot& deadline_slot() { return deadline_slot_; }

  // Responder side, for the Endpoint: sends a pull the host's pull pacer released for this
  // connection as its `turn`-th (an ACK with flags::kPull on path turn mod paths,
  // congestion.md §6).
  void SendPull(Instant now, uint64_t turn);
  // Operator request: rotate a path's source port now (subject to the hold-down), then probe it.
  absl::Status RequestRotation(Instant now, uint16_t path_id);
  // The owner gives up on the connection (its peer is known to be gone, or it is being torn
  // down): it enters kError and every outstanding request and posted receive completes with
  // WR_FLUSH_ERR; nothing more is sent. No-op when already in error.
  void Abort(Instant now);

  State state() const { return state_; }
  WcStatus error_status() const { return error_status_; }
  uint32_t local_id() const { return config_.local_conn_id; }
  const ConnectionConfig& config() const { return config_; }
  const ConnectionCounters& counters() const { return counters_; }
  PathStats path_stats(uint16_t path_id) const;
  uint16_t path_count() const { return config_.path_count; }
  // Send work requests accepted and not yet completed.
  size_t outstanding_sends() const;
  size_t posted_receives() const;

 private:
  friend class ConnectionTestPeer;
  friend class Sender;
  friend class Receiver;

  // Enters kError: the message `culprit_msg_seq` (if still outstanding) completes with `status`,
  // every other outstanding request with WR_FLUSH_ERR.
  void Fail(Instant now, WcStatus status, std::optional<uint32_t> culprit_msg_seq);
  void EmitCompletion(const Completion& c) { completions_.push_back(c); }
  void EmitEvent(const PathEvent& e) { events_.push_back(e); }
  // Which halves an entry point may change: only they are asked for their next deadline at its
  // end (a data packet is the receiver's alone, an ACK the sender's alone). The sender and the
  // receiver change only their own state, and Fail() ends every deadline (kError: kNever).
  enum Halves : uint8_t { kSenderHalf = 1, kReceiverHalf = 2, kBothHalves = 3 };
  // End of every entry point: refresh the deadline of `halves`, announce changes and output to
  // the observer.
  void AfterEntry(Halves halves);
  void AnnounceOutput();
  class EntryScope;

  ConnectionConfig config_;
  MemoryTable& memory_;
  PacketSink& sink_;
  ConnectionObserver* observer_;
  ReceiveBudget* budget_;
  ActivityMark activity_;  // this connection's registration in budget_
  Instant deadline_ = kNever;
  Instant sender_deadline_ = kNever;    // sender_->NextDeadline() as of the latest entry point
  Instant receiver_deadline_ = kNever;  // ... that could change it
  HeapSlot deadline_slot_;
  bool output_announced_ = false;
  State state_ = State::kReady;
  WcStatus error_status_ = WcStatus::kSuccess;
  ConnectionCounters counters_;
  std::deque<Completion> completions_;
  std::deque<PathEvent> events_;
  std::unique_ptr<Sender> sender_;
  std::unique_ptr<Receiver> receiver_;
};

}  // namespace metaroce::core
