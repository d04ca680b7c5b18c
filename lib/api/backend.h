// Internal to lib/api: the engine-facing half of a Context, with two implementations:
//
//   EmbeddedBackend  (embedded_backend.h) the engine runs in this process (Context::Create)
//   AttachedBackend  (attached_backend.h) the engine runs in metaroced; this process reaches it
//                    through its control socket and shared memory (Context::Attach)
//
// Context, Listener, Connection and CompletionQueue hold the parts that are the same in both
// modes (the TCP parameter exchange, the rings of the data path); everything that differs goes
// through these interfaces, which are called on the control path only: the data path (posting
// into rings, waking a worker, polling completions) never makes a virtual call.
//
// Threading: as the Context's contract (lib/api/context.h): implementations are safe from any
// thread in threaded mode. Errors: absl::Status naming the fix; nothing logs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/api/connection.h"
#include "lib/api/exchange.h"
#include "lib/core/config.h"
#include "lib/core/memory_table.h"
#include "lib/engine/channels.h"
#include "lib/engine/worker.h"

namespace metaroce::api {

class CompletionQueue;
struct ConnectOptions;

// The control half of one connection. Destroying it removes the connection from the engine
// (work still outstanding is discarded, as ibv_destroy_qp).
class ConnectionControl {
 public:
  virtual ~ConnectionControl() = default;
  virtual absl::StatusOr<ConnectionStats> Stats() = 0;
  virtual absl::Status RequestRotation(uint16_t path_id) = 0;
  virtual absl::Status Abort() = 0;
};

// What a Connection is made of.
struct ConnectionBinding {
  std::shared_ptr<engine::ConnectionChannel> channel;  // the rings
  WakeTarget wake;                                     // how posts wake the owner worker
  std::unique_ptr<ConnectionControl> control;
};

// Source ports a connection's paths start on.
struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 0;
};

// What our half of a new connection starts from: its id, and the offer of our receive budget
// the set-up protocol tells the peer (docs/spec/setup.md §4; 0: no offer).
struct ConnectionSlot {
  uint32_t conn_id = 0;
  uint32_t offer = 0;
};

class ContextBackend {
 public:
  virtual ~ContextBackend() = default;

  virtual absl::StatusOr<std::span<std::byte>> AllocateMemory(size_t bytes) = 0;
  virtual absl::Status FreeMemory(std::span<std::byte> block) = 0;
  virtual absl::StatusOr<core::MemoryRegion> RegisterMemory(void* addr, size_t length,
                                                            uint32_t access) = 0;
  virtual absl::Status DeregisterMemory(const core::MemoryRegion& region) = 0;
  // `depth` already checked by the Context.
  virtual absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(
      size_t depth) = 0;
  // A fresh connection id for our half of a new connection, and the offer to its peer.
  virtual absl::StatusOr<ConnectionSlot> PrepareConnection() = 0;
  // Where the initial source ports are drawn from, given the caller's tunables.
  virtual PortRange SourcePorts(const core::ConnectionConfig& tuning) const = 0;
  // Creates our half once both halves are known and compatible.
  virtual absl::StatusOr<ConnectionBinding> CreateConnection(const ConnectOptions& options,
                                                             const ConnectionParameters& ours,
                                                             const ConnectionParameters& peer) = 0;
  // Per-worker counters (empty when the engine is another process's).
  virtual std::vector<engine::WorkerStats> Stats() = 0;
};

}  // namespace metaroce::api
