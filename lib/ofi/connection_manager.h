// Opens an endpoint's connections to its peers in the background: the set-up exchange
// (lib/api/exchange.h) blocks on TCP for a round trip or more, and an RDM endpoint connects on
// first use, from inside a send, where the application must not wait (two endpoints sending to
// each other first would each wait for the other's accept).
//
// Two threads: the acceptor waits on the endpoint's listener and accepts every request naming
// this endpoint (its nonce, or nonce 0: whichever endpoint listens here, address.h) and
// speaking this provider's protocol; the connector runs the
// requests of Connect() one after another. Both put what they made, or why they failed, into
// one queue the endpoint takes from (TakeResults) during its progress, under its own lock. The
// threads call only the context's control methods, which are safe beside the application's
// progress calls in every mode (lib/api/context.h).
//
// Private data of a request and of its answer (PeerHello, each side's):
//   0 version u16 | 2 eager_size u32 | 6 recv_slots u32 | 10 target nonce u32 |
//   14 the sender's EndpointAddress (kAddressBytes)            all big-endian
// (target nonce: the nonce of the endpoint the message is meant for).
// A request with another version or eager size is refused with the reason.
//
// Threading: every method from any thread. Destroying it stops and joins both threads; results
// not taken are destroyed (their connections closed).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/api/context.h"
#include "lib/ofi/address.h"

namespace metaroce::ofi {

struct PeerHello {
  uint16_t version = 0;
  uint32_t eager_size = 0;
  uint32_t recv_slots = 0;
  uint32_t target_nonce = 0;
  EndpointAddress::Bytes address{};

  std::vector<std::byte> Encode() const;
  static absl::StatusOr<PeerHello> Decode(std::span<const std::byte> bytes);
};

class ConnectionManager {
 public:
  struct Result {
    EndpointAddress::Bytes peer{};             // the peer's address
    std::unique_ptr<api::Connection> connection;  // null when `status` is an error
    absl::Status status;
    uint32_t peer_recv_slots = 0;              // the credits the peer gives us
    bool accepted = false;                     // the peer asked (else we did)
  };

  // `options`: the connections' CQs, paths and timeout (private_data is set here). `hello`: what
  // this endpoint tells its peers (target_nonce is set per request).
  ConnectionManager(api::Context& context, std::unique_ptr<api::Listener> listener,
                    api::ConnectOptions options, PeerHello hello);
  ~ConnectionManager();
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Starts connecting to `peer` (its exchange at planes[0]:tcp_port); the outcome comes out of
  // TakeResults.
  void Connect(const EndpointAddress& peer);
  std::vector<Result> TakeResults();
  uint16_t port() const { return port_; }

 private:
  // Between attempts to reach a peer that refused (not listening yet), within the set-up
  // timeout.
  static constexpr absl::Duration kRefusedRetry = absl::Milliseconds(50);

  void AcceptLoop();
  void ConnectLoop();
  void Deliver(Result r);

  api::Context& context_;
  std::unique_ptr<api::Listener> listener_;
  const api::ConnectOptions options_;
  const PeerHello hello_;
  const uint16_t port_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::deque<EndpointAddress> requests_;
  std::vector<Result> results_;
  std::atomic<bool> has_results_{false};  // results_ is not empty (read without mu_)
  std::thread acceptor_;
  std::thread connector_;
};

}  // namespace metaroce::ofi
