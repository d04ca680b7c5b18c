// The RDM endpoint: libfabric's messages, tagged messages and RMA writes to any peer in its
// address vector, over one MetaRoCE connection per peer opened on first use (docs/ofi.md).
//
// Sends: a message up to eager_size goes in one Send (header and payload copied into a buffer
// of the eager pool); a larger one is announced (kRts) and written by the receiver's request
// (kCts) in chunks, each copied into a chunk buffer and written with a Write-with-immediate into
// the receiver's chunk buffer, which the receiver copies into the matched receive. RMA writes
// go the same two ways to a memory registration of the target (kWrite, kWriteRts), which
// answers each with kAck. A peer's connection is set up by the connection manager; until it is
// up, the peer's sends wait in order. Messages to this endpoint itself never leave it.
//
// Receives: matched in order of arrival against posted receives (lib/ofi/matching.h); a message
// no receive matches waits (its payload copied out, or its rendezvous parked) until one is
// posted, or is found by FI_PEEK / FI_CLAIM.
//
// Errors: a peer whose connection fails or cannot be made fails every operation waiting on it
// with an error completion (err: the FI_E* of the ibv_wc_status in prov_errno); its next send
// tries a new connection. Every method requires the domain's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "lib/ofi/connection_manager.h"
#include "lib/ofi/info.h"
#include "lib/ofi/matching.h"
#include "lib/ofi/objects.h"
#include "lib/ofi/peer_protocol.h"

namespace metaroce::ofi {

// A list of the application's buffers (iov), with its total length.
struct IoList {
  absl::InlinedVector<iovec, 2> iov;  // inline: a message of one or two buffers allocates none
  size_t length = 0;
  static IoList Of(const iovec* v, size_t count);
  static IoList Of(const void* buf, size_t len);
  // Copies `n` bytes from `src` to the list starting at byte `offset`; returns bytes copied.
  size_t CopyIn(size_t offset, const std::byte* src, size_t n) const;
  // Copies `n` bytes at `offset` of the list into `dst`.
  void CopyOut(size_t offset, std::byte* dst, size_t n) const;
};

class Endpoint {
 public:
  // Receive slots kept posted beyond the peer's credits, for control messages (kCts, kAck,
  // kCredit), which spend no credit; a burst beyond them meets the transport's RNR retry.
  static constexpr uint32_t kControlSlots = 16;

  fid_ep fid;  // first

  Endpoint(Domain& domain, const fi_info& info, void* context);
  ~Endpoint();

  // Before closing: progress until this endpoint's sends complete (at most 1 s), then
  // kLingerForAcks more, so that the transport's ACKs of what it received last leave.
  void Linger();
  static constexpr std::chrono::milliseconds kLingerForAcks{5};

  // fi_ep_bind's targets.
  int Bind(struct fid* bfid, uint64_t flags);
  // fi_enable: needs an AV and both CQs (or counters); opens the listener and the connection
  // manager.
  int Enable();
  int GetName(void* addr, size_t* addrlen);

  // Whether a transmit gives a completion entry. kByFlags (fi_send, fi_sendmsg, fi_write, ...):
  // yes, unless the transmit CQ was bound with FI_SELECTIVE_COMPLETION and `flags` lack
  // FI_COMPLETION; FI_INJECT among the flags only says the buffer is free on return (fi_msg(3):
  // it does not suppress the completion). kNever: the fi_inject family (fi_inject, fi_tinject,
  // fi_injectdata, fi_inject_write, ...), which generate none (fi_msg(3), fi_rma(3)). Counters
  // count either way.
  enum class Report : uint8_t { kByFlags, kNever };

  // The data operations. `flags`: FI_COMPLETION, FI_INJECT, FI_REMOTE_CQ_DATA, ...
  ssize_t Send(const IoList& data, void** desc, fi_addr_t dest, void* context, uint64_t flags,
               bool tagged, uint64_t tag, uint64_t cq_data, Report report = Report::kByFlags);
  ssize_t Recv(const IoList& buf, void** desc, fi_addr_t src, void* context, uint64_t flags,
               bool tagged, uint64_t tag, uint64_t ignore);
  ssize_t Write(const IoList& data, void** desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                void* context, uint64_t flags, uint64_t cq_data,
                Report report = Report::kByFlags);
  ssize_t Cancel(void* context);

  // Progress (Domain::Progress): the connection manager's results, then the completions of this
  // endpoint's connections.
  void TakeConnections();
  void OnSendCompletion(const api::WorkCompletion& wc);
  void OnRecvCompletion(const api::WorkCompletion& wc);
  void RetryWaiting();

  Domain& domain() { return domain_; }
  uint64_t tx_op_flags() const { return tx_op_flags_; }
  uint64_t rx_op_flags() const { return rx_op_flags_; }
  bool enabled() const { return manager_ != nullptr; }

 private:
  struct Peer;
  struct Link;
  struct TxOp;
  struct RxOp;
  struct Arrival;
  struct RndvRecv;
  struct Chunk;
  struct WrContext;

  Peer& PeerAt(const EndpointAddress::Bytes& address);
  Peer* PeerOf(fi_addr_t addr, int& err);
  void Connect(Peer& peer);
  // A transmit's checks (iov limit, inject size, FI_MR_LOCAL descriptors, queue room) and its
  // peer: 0, or the -FI_E* the call returns.
  ssize_t CheckTransmit(const IoList& data, void** desc, fi_addr_t dest, uint64_t flags,
                        Peer** peer);
  // Takes `op` to its peer (its bytes copied first for FI_INJECT): delivered here when the peer
  // is this endpoint, queued while the peer's connection is being made, or started.
  void Launch(Peer& peer, TxOp* op, const IoList& data, uint64_t flags, Report report);
  void AttachLink(ConnectionManager::Result r);
  // The peer's connection could not be made: logs why, and its waiting operations complete with
  // FI_EHOSTUNREACH (prov_errno RETRY_EXC_ERR).
  void FailPeer(Peer& peer, const absl::Status& why);
  void FailLink(Link& link, core::WcStatus status);

  // Sending on a link: a Send of `header` and `payload` (copied into an eager buffer, or
  // `buffer` already filled), or a Write-with-immediate of a filled chunk buffer. Queued behind
  // the link's earlier sends while it has no credit.
  bool SendMessage(Link& link, const MessageHeader& header, const IoList* payload,
                   size_t payload_offset, size_t payload_len, TxOp* op, bool control);
  void SendWrite(Link& link, BufferPool::Buffer buf, uint32_t len, uint64_t remote_addr,
                 uint32_t rkey, uint32_t imm, TxOp* op, bool app_buffer);
  void Post(Link& link, WrContext* ctx);
  void Drain(Link& link);
  void ReturnCredits(Link& link);
  void StartOp(Peer& peer, TxOp* op);

  // Receive side.
  void PostSlots(Link& link);
  void OnMessage(Link& link, const MessageHeader& h, std::span<const std::byte> payload);
  // A matched message to its receive (frees both); an eager one's bytes copied in.
  void Deliver(Arrival* a, RxOp* rx);
  // FI_DISCARD of a message taken from the unexpected queue (frees it): an eager one's bytes
  // are dropped; a rendezvous one is fetched into nothing, so that its sender completes.
  void Discard(Arrival* a);
  void DeliverEager(const Arrival& a, std::span<const std::byte> bytes, RxOp* rx);
  // Unexpected messages that came before their sender was in the address vector get their
  // source now (once per change of the address vector).
  void ResolveUnknownSources();
  void StartRendezvous(RndvRecv* r);
  void RequestChunks(RndvRecv* r);
  void FinishRendezvous(RndvRecv* r);
  void OnWrite(Link& link, const MessageHeader& h, std::span<const std::byte> payload);
  Mr* CheckWrite(uint64_t key, uint64_t addr, uint64_t len, std::byte** dst);
  void SendAck(Link& link, uint64_t send_id, core::WcStatus status);
  void DeliverSelf(TxOp* op);

  // Memory: a work request's buffer back to its pool; the embedded engine's registrations of
  // the application's buffers for zero-copy rendezvous (nullopt: refused, use chunk buffers).
  void ReleaseBuffer(const WrContext& c);
  std::optional<api::MemoryRegion> Register(void* base, size_t length, uint32_t access);
  void Unregister(std::optional<api::MemoryRegion>& region);
  void DeleteOp(TxOp* op);  // unregisters its buffer

  // Completions.
  void CompleteTx(TxOp* op, int err, core::WcStatus status);
  void CompleteRx(RxOp* rx, const Arrival& a, size_t len, int err);
  uint64_t SourceOf(Link& link);
  fi_addr_t FiAddrOf(const EndpointAddress::Bytes& bytes) const;

  Domain& domain_;
  void* context_;
  uint64_t tx_op_flags_ = 0;
  uint64_t rx_op_flags_ = 0;
  bool directed_recv_ = false;
  bool selective_tx_ = false;
  bool selective_rx_ = false;
  Av* av_ = nullptr;
  Cq* tx_cq_ = nullptr;
  Cq* rx_cq_ = nullptr;
  Cntr* send_cntr_ = nullptr;
  Cntr* recv_cntr_ = nullptr;
  Cntr* write_cntr_ = nullptr;
  Cntr* remote_write_cntr_ = nullptr;
  uint16_t source_port_ = 0;  // the listener's port FI_SOURCE named (0: any)
  EndpointAddress address_;
  EndpointAddress::Bytes address_bytes_{};
  std::unique_ptr<ConnectionManager> manager_;

  absl::flat_hash_map<std::string, std::unique_ptr<Peer>> peers_;
  std::vector<Peer*> peer_by_addr_;        // by fi_addr (PeerOf), for the AV's generation
  uint64_t peer_by_addr_generation_ = 0;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Link>> links_;  // by local connection id
  absl::flat_hash_map<uint64_t, TxOp*> tx_by_id_;               // ops a peer may name
  absl::flat_hash_map<uint32_t, Chunk*> chunks_;                // by immediate
  std::list<std::unique_ptr<RndvRecv>> rendezvous_;
  std::deque<RndvRecv*> waiting_chunks_;  // receives waiting for a chunk buffer
  MatchQueue tagged_;
  MatchQueue untagged_;
  uint64_t next_send_id_ = 1;
  uint32_t next_chunk_id_ = 1;
  uint64_t resolved_generation_ = 0;  // of the AV, when unknown sources were last resolved
  bool links_waiting_ = false;  // a link holds work back (RetryWaiting drains them)
  size_t tx_outstanding_ = 0;
  size_t rx_posted_ = 0;
};

}  // namespace metaroce::ofi
