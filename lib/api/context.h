// The public C++ API of MetaRoCE (ibverbs nouns):
//
//   Context          the device context: the engine, its workers and their packet ports
//   MemoryRegion     ibv_mr: lkey, rkey, access flags; registered in every worker alike
//   CompletionQueue  ibv_cq (lib/api/completion_queue.h)
//   Connection       the queue pair (lib/api/connection.h)
//   Listener         passive side of the TCP parameter exchange (rdma_cm's listen/accept)
//
// Two ways to get a Context, with the same API afterwards:
//   Context::Create  embedded: the engine runs in this process, over this host's interfaces
//                    (AF_XDP needs root or CAP_NET_ADMIN/CAP_BPF/CAP_NET_RAW/CAP_IPC_LOCK).
//   Context::Attach  attached: the engine is metaroced's; this process needs no capability,
//                    only access to the daemon's control socket (root, the daemon's uid, or its
//                    socket_group). The daemon's workers read this process's work requests from
//                    rings in memory shared with it, place received data straight into its
//                    registered memory (shared memory the daemon made: Context::AllocateMemory)
//                    and write completions into shared completion rings: nothing is copied
//                    beyond the one copy between packet buffer and final place, and no work
//                    request costs a system call beyond waking a sleeping worker. Control
//                    operations (register memory, create queues and connections, stats) are
//                    calls on the control socket (docs/control-protocol.md, "Applications"), and
//                    when this process exits or crashes the daemon destroys everything it made.
//                    Differences: memory must come from AllocateMemory; the daemon's path policy
//                    replaces ConnectOptions::tuning (which is ignored) and its [limits] apply;
//                    Poll() does nothing (the daemon's workers run by themselves); engine() must
//                    not be called and Stats() is empty.
//
// Set-up between two processes: the server calls Listen(port) and Accept(options); the client
// calls Connect(host, port, options). They exchange parameters over TCP (lib/api/exchange.h):
// connection ids, random tokens, paths, initial source ports, per-plane addresses, MTU, queue
// depths, transport profile and the caller's opaque private data; each side checks the other's
// and refuses a mismatch with a Status naming it. Attached contexts run the same exchange from
// the application (TCP needs no privilege) and may talk to embedded ones.
//
// Threading, threaded and attached modes (ContextOptions::workers >= 1, Context::Attach):
// Context, Listener and their methods are safe from any thread (control path; they may block up
// to the options' timeouts; an attached context's control calls are serialized); the engine
// workers progress by themselves. Inline mode (workers == 0): there is no engine thread; the
// application drives the engine by calling Poll() and nothing progresses between calls (no
// packet is received or acknowledged, no timer fires, no completion is delivered), so the
// application polls at least as often as it expects answers and keeps polling while any of its
// work is outstanding (a connection whose peer hears nothing for tuning.no_progress_timeout
// fails). The data path (Poll, posting on connections, polling completion queues, PollEvents)
// must then come from one thread at a time: the driving thread (handing it to another thread
// needs a happens-before, such as a join). Control methods (Listen, Accept, Connect, memory,
// queues, stats, destroying a connection) may come from any thread: they run on the calling
// thread between two iterations of Poll() (the engine's inline lock), so that a thread may set
// up connections, blocking on their exchange, while the driving thread keeps polling.
//
// Ownership: the Context must outlive every object it created; destroy connections before the
// context. Blocks from AllocateMemory are released by FreeMemory or with the context.
// Errors: absl::Status with the fix in the message; nothing is logged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
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
#include "lib/control/protocol.h"
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
  // Embedded contexts: path events each engine worker's observer ring holds (1..2^24, rounded up
  // to a power of two; engine::EngineOptions::observed_event_depth) for connections whose events
  // are observed (ConnectOptions::path_events_to_observer, an operator's copies). Whoever drains
  // them (Engine::PollObservedEvents) loses what arrives while the ring is full
  // (WorkerStats::observed_events_dropped): a host's operator side sizes it for the burst it
  // must not lose between two drains (metaroced: daemon/config.h, observed_event_depth).
  uint32_t observed_event_depth = 1024;
  // The host's receive budget (docs/spec/congestion.md §5.2): bytes in flight toward this host
  // that its requesters may have together, shared as window hints by the connections sending to
  // it; split evenly among the engine's workers, each an endpoint of its own. 0: no hints.
  uint64_t receive_budget_bytes = 1u << 20;
  // The host's receive rate in Gb/s, all planes' links together (wire bytes), at which its pull
  // pacer clocks the requesters whose share of the budget is below one packet per path
  // (docs/spec/congestion.md §6, lib/core/pull_pacer.h): thousands of senders into this host
  // then send at the rate its links drain, not into its queues. Split evenly among the
  // engine's workers like the budget. 0 (the default): no pulls; the embedding application
  // knows its links' speed (metaroced: [daemon] pull_rate_gbps, auto from the interfaces').
  // Finite, >= 0.
  double pull_rate_gbps = 0;
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
  // Embedded contexts only (an attached one refuses it): the connection's path events go to the
  // engine's observer rings (engine::ObservePathEvents::kOnly, Engine::PollObservedEvents)
  // instead of the connection, whose PollEvents then finds none. For a host's operator side that
  // reads the events of all its connections at once (metaroced's path manager) rather than
  // visiting each connection.
  bool path_events_to_observer = false;
};

// Context::Attach: where metaroced is and who we are.
struct AttachOptions {
  std::string socket_path = std::string(control::kDefaultSocketPath);
  // Shown as the owner of this process's connections (mrctl conn show); empty: the program's
  // name.
  std::string name;
  // Connecting to the socket, and each control call after.
  absl::Duration timeout = absl::Seconds(10);
};

// Listener::Accept's way to choose, from the client's request, how to accept it: the options to
// accept with, or a Status whose message the client is told as the refusal.
using AcceptDecision =
    std::function<absl::StatusOr<ConnectOptions>(const ConnectionParameters& request)>;

class Context;
class ContextBackend;   // lib/api/backend.h
class EmbeddedBackend;  // lib/api/embedded_backend.h

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
  // Attaches to the metaroced listening on options.socket_path (app.attach): no privileges.
  // Unavailable ("is metaroced running?") when nothing listens there, PermissionDenied when the
  // socket refuses this user. options() then describes the daemon's engine (workers, planes'
  // addresses, mtu, udp_port).
  static absl::StatusOr<std::unique_ptr<Context>> Attach(const AttachOptions& options);
  // Embedded: stops the engine (its ports close), then detaches the Datapath's programs.
  // Attached: closes the session; the daemon destroys what it made for it.
  ~Context();

  // Inline mode, driving thread: one iteration of the engine (receive, post what the
  // connections' rings hold, timers, completions, flush); never blocks. Returns whether it found
  // work (spin on it while it does). Threaded and attached modes: returns false at once; call it
  // freely.
  bool Poll() { return engine_ != nullptr && engine_->Poll(); }
  bool is_inline() const { return engine_ != nullptr && engine_->is_inline(); }
  bool is_attached() const { return engine_ == nullptr; }

  // Memory for buffers, page-aligned, at least `bytes` long (rounded up to whole pages): an
  // anonymous mapping (embedded), or shared memory metaroced made and maps too (attached: the
  // only memory an attached context can register; counted against the daemon's max_memory,
  // ResourceExhausted beyond it). Zero-filled. Released by FreeMemory or with the context.
  absl::StatusOr<std::span<std::byte>> AllocateMemory(size_t bytes);
  // The span AllocateMemory returned. Attached: FailedPrecondition while a region in it is
  // registered.
  absl::Status FreeMemory(std::span<std::byte> block);

  // ibv_reg_mr. `access`: access::kLocalWrite | kRemoteWrite | kRemoteRead. Attached: the range
  // must lie inside one block from AllocateMemory (InvalidArgument otherwise).
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, size_t length, uint32_t access);
  absl::Status DeregisterMemory(const MemoryRegion& region);

  // `depth` completions per worker (rounded up to a power of two).
  absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(size_t depth);

  // Server side: a TCP listener on bind_address:tcp_port (0: ephemeral, see Listener::port()).
  // The default, "", is every address of both families (ExchangeSocket::Listen).
  absl::StatusOr<std::unique_ptr<Listener>> Listen(uint16_t tcp_port,
                                                   std::string_view bind_address = "");
  // Client side: exchanges parameters with the listener at host:tcp_port.
  absl::StatusOr<std::unique_ptr<Connection>> Connect(std::string_view host, uint16_t tcp_port,
                                                      const ConnectOptions& options);

  const ContextOptions& options() const { return options_; }
  // Embedded only (is_attached() false): the engine.
  engine::Engine& engine() { return *engine_; }
  // The Datapath the context owns; null when it was created with a PortFactory, or attached.
  const Datapath* datapath() const;
  // Per-worker counters and port statistics (control path); empty when attached.
  std::vector<engine::WorkerStats> Stats();

 private:
  friend class Listener;
  Context(const ContextOptions& options, std::vector<io::IpAddress> addresses,
          std::unique_ptr<ContextBackend> backend);

  // Checks what MakeLocalParameters would check, without allocating a connection id.
  absl::Status CheckLocalParameters(const ConnectOptions& options) const;
  // Our half of a new connection: fresh id, random token and source ports.
  absl::StatusOr<ConnectionParameters> MakeLocalParameters(const ConnectOptions& options);
  absl::StatusOr<std::unique_ptr<Connection>> CreateConnection(const ConnectOptions& options,
                                                               const ConnectionParameters& ours,
                                                               const ConnectionParameters& peer);

  const ContextOptions options_;
  const std::vector<io::IpAddress> addresses_;  // ours, per plane
  const std::unique_ptr<ContextBackend> backend_;
  EmbeddedBackend* const embedded_;  // backend_ when embedded; null attached
  engine::Engine* const engine_;     // embedded_'s engine; null attached
};

}  // namespace metaroce::api
