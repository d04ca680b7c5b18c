// The public C++ API of MetaRoCE with the engine embedded in the process (ibverbs nouns):
//
//   Context          the device context: the engine, its workers and their packet ports
//   MemoryRegion     ibv_mr: lkey, rkey, access flags; registered in every worker alike
//   CompletionQueue  ibv_cq (lib/api/completion_queue.h)
//   Connection       the queue pair (lib/api/connection.h)
//   Listener         passive side of the TCP parameter exchange (rdma_cm's listen/accept)
//
// Set-up between two processes: the server calls Listen(port) and Accept(options); the client
// calls Connect(host, port, options). They exchange parameters over TCP (lib/api/exchange.h):
// connection ids, random tokens, paths, initial source ports, per-plane addresses, MTU, queue
// depths, transport profile and the caller's opaque private data; each side checks the other's
// and refuses a mismatch with a Status naming it.
//
// Threading, threaded mode (ContextOptions::workers >= 1): Context, Listener and their methods are
// safe from any thread (control path; they may block up to the options' timeouts); the engine
// workers progress by themselves. Inline mode (workers == 0): there is no engine thread; the
// application drives the engine by calling Poll() and nothing progresses between calls (no
// packet is received or acknowledged, no timer fires, no completion is delivered), so the
// application polls at least as often as it expects answers and keeps polling while any of its
// work is outstanding (a connection whose peer hears nothing for tuning.no_progress_timeout
// fails). Every call on the context, its listeners, connections and completion queues must
// then come from one thread at a time: the driving thread (handing them to another thread needs
// a happens-before, such as a join); control methods run on the calling thread.
//
// Ownership: the Context must outlive every object it created; destroy connections before the
// context. Errors: absl::Status with the fix in the message; nothing is logged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/api/completion_queue.h"
#include "lib/api/host_tuning.h"
#include "lib/api/connection.h"
#include "lib/api/exchange.h"
#include "lib/api/exchange_socket.h"
#include "lib/api/port_factory.h"
#include "lib/core/config.h"
#include "lib/core/memory_table.h"
#include "lib/engine/engine.h"
#include "lib/io/packet_port.h"

namespace metaroce::api {

using MemoryRegion = core::MemoryRegion;
namespace access = core::access;
namespace send_flags = core::send_flags;

struct ContextOptions {
  std::vector<PlaneOptions> planes;  // one per plane, at least one
  PortKind port_kind = PortKind::kAfXdp;
  // Engine worker threads. 0: inline mode: no engine thread; the application's thread runs the
  // engine by calling Context::Poll() (see the threading contract above). Latency-bound
  // applications on few CPUs want it: a request and its answer then cross no thread handoff.
  int workers = 1;
  uint32_t first_queue = 0;          // worker i uses queue first_queue + i of every plane
  std::vector<int> cpus;             // optional: worker i pinned to cpus[i % size] (threaded)
  // Threaded mode: what an idle worker does, and after how many empty loops kPoll sleeps.
  engine::IdleStrategy idle = engine::IdleStrategy::kPoll;
  uint32_t spins_before_sleep = 256;
  uint16_t udp_port = wire::kDefaultUdpPort;
  // Payload bytes per data packet; both peers must agree. Context::Create(options) also takes 0:
  // the largest that fits every plane's interface (Datapath::DefaultMtu).
  uint32_t mtu = 4096;
};

struct ConnectOptions {
  CompletionQueue* send_cq = nullptr;  // required
  CompletionQueue* recv_cq = nullptr;  // required (may be the same queue)
  uint16_t path_count = 8;
  core::TransportProfile profile = core::TransportProfile::MetaRoce();
  bool ordered_completion = false;
  uint32_t max_send_queue = 1024;
  uint32_t max_recv_queue = 1024;
  std::vector<std::byte> private_data;  // up to kMaxPrivateDataBytes, given to the peer as is
  absl::Duration timeout = absl::Seconds(5);  // whole exchange, including waiting for a client
  // Protocol tunables (congestion control, timers); identity, path, profile, mtu and queue
  // fields are taken from the exchange instead. Defaults suit a software host (host_tuning.h).
  core::ConnectionConfig tuning = HostTuning();
  // Keep the exchange's TCP socket open after set-up and hand it to the caller
  // (Connection::TakeExchangeSocket): a channel beside the connection, e.g. for a daemon's
  // liveness and teardown messages. Closed with the connection otherwise.
  bool keep_exchange_socket = false;
};

// Listener::Accept's way to choose, from the client's request, how to accept it: the options to
// accept with, or a Status whose message the client is told as the refusal.
using AcceptDecision =
    std::function<absl::StatusOr<ConnectOptions>(const ConnectionParameters& request)>;

class Context;

class Listener {
 public:
  // Waits for one client (up to options.timeout), runs the exchange and returns the connection.
  // A client whose parameters do not match is refused (it is told why) and the Status says why.
  absl::StatusOr<std::unique_ptr<Connection>> Accept(const ConnectOptions& options);
  // Same, deciding per request: `decide` sees the client's parameters (path count, profile,
  // private data...) before anything is created. `timeout` bounds the wait and the exchange.
  absl::StatusOr<std::unique_ptr<Connection>> Accept(const AcceptDecision& decide,
                                                     absl::Duration timeout);
  // Waits up to `timeout` for a client to be pending (then Accept does not wait); false when
  // none came. For accept loops that must also watch a stop flag.
  absl::StatusOr<bool> WaitForClient(absl::Duration timeout);
  uint16_t port() const { return socket_.local_port(); }

 private:
  friend class Context;
  Listener(Context& context, ExchangeSocket socket)
      : context_(context), socket_(std::move(socket)) {}
  Context& context_;
  ExchangeSocket socket_;
};

class Context {
 public:
  // Starts the engine over this host's interfaces: creates and owns a Datapath
  // (lib/api/port_factory.h: for kAfXdp the steering program on every plane's interface and one
  // AF_XDP socket per worker per plane; detached when the context goes). An empty
  // planes[i].local_ip is the interface's first IPv4 address; mtu 0 the interface's largest.
  // Memory ports need a MemoryPairBroker: use one of the overloads below.
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options);
  // Same over a Datapath the caller made (to read the interfaces first); the context owns it.
  // options.planes and port_kind must match it.
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options,
                                                         std::unique_ptr<Datapath> datapath);
  // Starts the engine: options.workers workers (inline: one shard), each with one port per plane
  // from `factory` (tests, custom ports).
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options,
                                                         PortFactory factory);
  // Stops the engine (its ports close), then detaches the Datapath's programs.
  ~Context();

  // Inline mode, driving thread: one iteration of the engine (receive, post what the
  // connections' rings hold, timers, completions, flush); never blocks. Returns whether it found
  // work (spin on it while it does). Threaded mode: returns false at once; call it freely.
  bool Poll() { return engine_->Poll(); }
  bool is_inline() const { return engine_->is_inline(); }

  // ibv_reg_mr. `access`: access::kLocalWrite | kRemoteWrite | kRemoteRead.
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, size_t length, uint32_t access);
  absl::Status DeregisterMemory(const MemoryRegion& region);

  // `depth` completions per worker (rounded up to a power of two).
  absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(size_t depth);

  // Server side: a TCP listener on bind_address:tcp_port (0: ephemeral, see Listener::port()).
  absl::StatusOr<std::unique_ptr<Listener>> Listen(uint16_t tcp_port,
                                                   std::string_view bind_address = "0.0.0.0");
  // Client side: exchanges parameters with the listener at host:tcp_port.
  absl::StatusOr<std::unique_ptr<Connection>> Connect(std::string_view host, uint16_t tcp_port,
                                                      const ConnectOptions& options);

  const ContextOptions& options() const { return options_; }
  engine::Engine& engine() { return *engine_; }
  // The Datapath the context owns; null when it was created with a PortFactory.
  const Datapath* datapath() const { return datapath_.get(); }
  // Per-worker counters and port statistics (control path).
  std::vector<engine::WorkerStats> Stats() { return engine_->Stats(); }

 private:
  friend class Listener;
  Context(const ContextOptions& options, std::vector<io::IpAddress> addresses)
      : options_(options), addresses_(std::move(addresses)) {}

  // Our half of a new connection: fresh id, random token and source ports.
  absl::StatusOr<ConnectionParameters> MakeLocalParameters(const ConnectOptions& options);
  absl::StatusOr<std::unique_ptr<Connection>> CreateConnection(const ConnectOptions& options,
                                                               const ConnectionParameters& ours,
                                                               const ConnectionParameters& peer);

  const ContextOptions options_;
  const std::vector<io::IpAddress> addresses_;  // ours, per plane
  std::unique_ptr<Datapath> datapath_;  // outlives engine_, whose ports it serves
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace metaroce::api
