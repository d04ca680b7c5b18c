// Internal to lib/api: a Context whose engine is metaroced's (Context::Attach). The session is
// one control connection (docs/control-protocol.md, "Applications"); the data path is shared
// memory the daemon made and sealed:
//   - one doorbell per engine worker (one block) and, per worker, the application's end of a
//     socket pair that wakes it (lib/engine/doorbell.h);
//   - per completion queue, one block of completion rings (one per worker);
//   - per connection, one block with its send, receive and event rings and its state;
//   - registered memory: blocks from AllocateMemory (mem.alloc), mapped by both processes.
// Posting pushes into a ring and rings the owner worker's doorbell; polling pops from a ring:
// neither makes a control call. Everything else is one control call, serialized on the session.
//
// Trust: the application trusts the daemon (which writes into its memory anyway); it still
// checks the shapes the daemon returns (descriptor counts, block sizes, worker indices) so that
// a daemon of another version fails cleanly, not with a crash.
//
// Threading: every method is safe from any thread (control calls take call_mu_; the memory
// table takes blocks_mu_). Ownership: the Context owns this backend; connections and queues
// point into it and must go first (the Context's contract). Destroying it closes the session,
// and the daemon destroys everything the session made.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lib/api/backend.h"
#include "lib/api/shared_memory.h"
#include "lib/control/json.h"
#include "lib/control/protocol.h"
#include "lib/engine/doorbell.h"
#include "lib/io/ip_address.h"

namespace metaroce::api {

struct AttachOptions;

class AttachedBackend final : public ContextBackend {
 public:
  // What app.attach told us about the daemon's engine.
  struct Facts {
    uint64_t session = 0;
    int workers = 0;
    std::vector<io::IpAddress> addresses;  // per plane
    uint32_t mtu = 0;
    uint16_t udp_port = 0;
    PortRange ports;  // the daemon's source port rotation range
  };

  static absl::StatusOr<std::unique_ptr<AttachedBackend>> Attach(const AttachOptions& options);
  ~AttachedBackend() override;
  const Facts& facts() const { return facts_; }

  absl::StatusOr<std::span<std::byte>> AllocateMemory(size_t bytes) override;
  absl::Status FreeMemory(std::span<std::byte> block) override;
  absl::StatusOr<core::MemoryRegion> RegisterMemory(void* addr, size_t length,
                                                    uint32_t access) override;
  absl::Status DeregisterMemory(const core::MemoryRegion& region) override;
  absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(size_t depth) override;
  absl::StatusOr<ConnectionSlot> PrepareConnection() override;
  PortRange SourcePorts(const core::ConnectionConfig&) const override { return facts_.ports; }
  absl::StatusOr<ConnectionBinding> CreateConnection(const ConnectOptions& options,
                                                     const ConnectionParameters& ours,
                                                     const ConnectionParameters& peer) override;
  std::vector<engine::WorkerStats> Stats() override { return {}; }

  // One control call on the session (any thread; calls are serialized). `fds`, when given,
  // receives the descriptors that came with the answer (owned).
  absl::StatusOr<control::Json> Call(std::string_view method, control::Json params,
                                     std::vector<UniqueFd>* fds = nullptr);

 private:
  // A block from mem.alloc, mapped here.
  struct Block {
    uint64_t mem = 0;
    std::shared_ptr<SharedMapping> mapping;
  };

  explicit AttachedBackend(control::Client client) : client_(std::move(client)) {}
  // Reads app.attach's result and maps the doorbells it sent.
  absl::Status TakeAttachResult(const control::Json& result, std::vector<UniqueFd> fds);
  // A shared block the daemon sent: at least `needed` bytes, mapped whole.
  absl::StatusOr<std::shared_ptr<SharedMapping>> MapBlock(std::vector<UniqueFd>& fds,
                                                         size_t needed, std::string_view what);

  absl::Mutex call_mu_;
  control::Client client_ ABSL_GUARDED_BY(call_mu_);
  Facts facts_;
  std::shared_ptr<SharedMapping> doorbell_block_;
  std::vector<engine::Doorbell*> doorbells_;  // per worker, in doorbell_block_
  std::vector<UniqueFd> doorbell_fds_;               // per worker
  absl::Mutex blocks_mu_;
  std::map<uintptr_t, Block> blocks_ ABSL_GUARDED_BY(blocks_mu_);  // by first byte
};

}  // namespace metaroce::api
