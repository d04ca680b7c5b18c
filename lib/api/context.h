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
// Threading: Context, Listener and their methods are safe from any thread (control path; they
// may block up to the options' timeouts). Ownership: the Context must outlive every object it
// created; destroy connections before the context. Errors: absl::Status with the fix in the
// message; nothing is logged.
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
#include "lib/core/config.h"
#include "lib/core/memory_table.h"
#include "lib/engine/engine.h"
#include "lib/io/packet_port.h"

namespace metaroce::api {

using MemoryRegion = core::MemoryRegion;
namespace access = core::access;
namespace send_flags = core::send_flags;

enum class PortKind : uint8_t {
  kAfXdp,     // kernel bypass (lib/io/af_xdp_port.h)
  kUdpUring,  // kernel UDP through io_uring (lib/io/udp_uring_port.h)
  kMemory,    // in-process (lib/io/memory_port.h): tests and benchmarks
};

struct PlaneOptions {
  std::string ifname;    // interface of this plane (unused by memory ports)
  std::string local_ip;  // this host's address on the plane, IPv4 or IPv6 literal
};

// What the port factory is asked for: the port of one worker on one plane.
struct PortSpec {
  int worker = 0;
  int plane = 0;
  uint32_t queue = 0;  // first_queue + worker
  std::string ifname;
  io::IpAddress local_ip;
  PortKind kind = PortKind::kAfXdp;
  uint16_t udp_port = 0;
  uint32_t mtu = 0;  // MetaRoCE payload bytes per packet
};
using PortFactory =
    std::function<absl::StatusOr<std::unique_ptr<io::PacketPort>>(const PortSpec& spec)>;

struct ContextOptions {
  std::vector<PlaneOptions> planes;  // one per plane, at least one
  PortKind port_kind = PortKind::kAfXdp;
  int workers = 1;
  uint32_t first_queue = 0;          // worker i uses queue first_queue + i of every plane
  std::vector<int> cpus;             // optional: worker i pinned to cpus[i % size]
  engine::IdleStrategy idle = engine::IdleStrategy::kPoll;
  uint16_t udp_port = wire::kDefaultUdpPort;
  uint32_t mtu = 4096;               // payload bytes per data packet; both peers must agree
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
};

class Context;

class Listener {
 public:
  // Waits for one client (up to options.timeout), runs the exchange and returns the connection.
  // A client whose parameters do not match is refused (it is told why) and the Status says why.
  absl::StatusOr<std::unique_ptr<Connection>> Accept(const ConnectOptions& options);
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
  // Starts the engine: options.workers workers, each with one port per plane from `factory`.
  static absl::StatusOr<std::unique_ptr<Context>> Create(const ContextOptions& options,
                                                         PortFactory factory);
  ~Context();

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
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace metaroce::api
