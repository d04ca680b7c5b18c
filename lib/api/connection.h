// A connection (the queue pair): one reliable MetaRoCE connection to one peer, made by
// Context::Connect or Listener::Accept.
//
// Data path: PostSend/PostRecv put the request into the connection's lock-free send or receive
// ring and wake its owner worker; they return at once. The owner posts it into the protocol core;
// a request the core refuses (bad lkey: LOC_PROT_ERR, buffer outside its region or too long:
// LOC_LEN_ERR, connection in error: WR_FLUSH_ERR) completes with that status on the CQ, signaled
// or not, with the request's wr_id. A request whose queue in the core is full waits in the ring.
// Waking costs a fence and a load while the worker is awake, and one system call when it sleeps:
// in this process (Context::Create) an eventfd write, in an attached context (Context::Attach)
// a write to that worker's doorbell socket (lib/engine/doorbell.h); the rings themselves are in
// memory shared with metaroced, so no post makes a control call.
//
// In the context's inline mode (ContextOptions::workers == 0) the request waits in the ring
// until the application's next Context::Poll(), which posts it into the core and transmits.
//
// Threading, threaded or attached mode: PostSend from one thread at a time, PostRecv from one
// thread at a time (may be another thread), PollEvents from one thread at a time; Stats,
// RequestRotation and Abort from any thread (control path: they wait for the owner worker, or,
// attached, for the daemon's answer). Inline mode: posts and PollEvents from the context's
// driving thread only; Stats, RequestRotation, Abort and the destructor from any thread, between
// two iterations of Context::Poll() (lib/api/context.h). Ownership: the Context
// must outlive the connection. Destroying the connection removes it from the engine; work still
// outstanding is discarded without completions (as ibv_destroy_qp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/api/exchange.h"
#include "lib/api/exchange_socket.h"
#include "lib/core/path_state.h"
#include "lib/core/types.h"
#include "lib/engine/channels.h"
#include "lib/engine/worker.h"

namespace metaroce::engine {
class Engine;
struct Doorbell;
}

namespace metaroce::api {

using SendWorkRequest = core::SendWorkRequest;
using RecvWorkRequest = core::RecvWorkRequest;
using Sge = core::Sge;
using PathEvent = core::PathEvent;
using ConnectionStats = engine::ConnectionSnapshot;

class ConnectionControl;  // lib/api/backend.h

// How posts wake a connection's owner worker: Engine::Wake(worker) when the engine is in this
// process, RingDoorbell(*doorbell, doorbell_fd) when it is metaroced's.
struct WakeTarget {
  engine::Engine* engine = nullptr;
  int worker = 0;
  const engine::Doorbell* doorbell = nullptr;
  int doorbell_fd = -1;
};

class Connection {
 public:
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // ResourceExhausted when the ring is full (poll completions, then retry; inline mode: poll the
  // context too).
  absl::Status PostSend(const SendWorkRequest& wr);
  absl::Status PostRecv(const RecvWorkRequest& wr);
  // Post lists: posts a prefix of `wrs` and returns its length (0 only when the ring is full);
  // one wake-up for the whole list.
  size_t PostSends(std::span<const SendWorkRequest> wrs);
  size_t PostRecvs(std::span<const RecvWorkRequest> wrs);

  // Path events (state changes, source port rotations) since the last call.
  size_t PollEvents(std::span<PathEvent> out);
  // Counters and per-path telemetry, taken on the owner worker.
  absl::StatusOr<ConnectionStats> Stats() const;
  // Operator request: move a path to a new source port now.
  absl::Status RequestRotation(uint16_t path_id);
  // Gives up on the connection (e.g. its peer is gone): it enters error and every outstanding
  // request and posted receive completes with WR_FLUSH_ERR on its CQ (ibv_modify_qp to ERR).
  absl::Status Abort();

  // Whether the connection has failed (then every request completes with WR_FLUSH_ERR), and
  // with what status; as last published by the owner worker.
  bool in_error() const { return channel_->state().error; }
  core::WcStatus error_status() const { return channel_->state().error_status; }

  uint32_t local_id() const { return local_.conn_id; }
  uint32_t remote_id() const { return peer_.conn_id; }
  int owner_worker() const { return channel_->owner(); }
  const ConnectionParameters& local_parameters() const { return local_; }
  const ConnectionParameters& peer_parameters() const { return peer_; }
  // The opaque bytes the peer sent (ConnectOptions::private_data on its side).
  std::span<const std::byte> peer_private_data() const { return peer_.private_data; }
  // The exchange's TCP socket when ConnectOptions::keep_exchange_socket was set (once; then an
  // empty socket, fd -1).
  ExchangeSocket TakeExchangeSocket() { return std::move(exchange_socket_); }

 private:
  friend class Context;
  friend class Listener;
  Connection(std::shared_ptr<engine::ConnectionChannel> channel, WakeTarget wake,
             std::unique_ptr<ConnectionControl> control, ConnectionParameters local,
             ConnectionParameters peer);
  // Tells the owner worker that a ring has work (cheap when it is awake).
  void Wake() const;

  std::shared_ptr<engine::ConnectionChannel> channel_;
  const WakeTarget wake_;
  std::unique_ptr<ConnectionControl> control_;
  ConnectionParameters local_;
  ConnectionParameters peer_;
  ExchangeSocket exchange_socket_;
};

}  // namespace metaroce::api
