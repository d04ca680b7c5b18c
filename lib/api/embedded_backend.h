// Internal to lib/api: a Context whose engine runs in this process (Context::Create). Owns the
// engine and the Datapath whose ports it serves, and the blocks AllocateMemory made (anonymous
// mappings, unmapped after the engine stopped, so that no worker still holds a pointer into them).
//
// Threading: as the Context (safe from any thread in threaded mode; the driving thread only in
// inline mode). Errors: absl::Status.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "lib/api/backend.h"
#include "lib/api/port_factory.h"
#include "lib/engine/engine.h"

namespace metaroce::api {

class EmbeddedBackend final : public ContextBackend {
 public:
  explicit EmbeddedBackend(std::unique_ptr<engine::Engine> engine) : engine_(std::move(engine)) {}
  // Stops the engine (its ports close), then detaches the Datapath's programs, then unmaps the
  // blocks.
  ~EmbeddedBackend() override;

  // The Datapath whose ports the engine uses; owned from now on, released after the engine.
  void AdoptDatapath(std::unique_ptr<Datapath> datapath) { datapath_ = std::move(datapath); }
  const Datapath* datapath() const { return datapath_.get(); }
  engine::Engine& engine() { return *engine_; }

  absl::StatusOr<std::span<std::byte>> AllocateMemory(size_t bytes) override;
  absl::Status FreeMemory(std::span<std::byte> block) override;
  absl::StatusOr<core::MemoryRegion> RegisterMemory(void* addr, size_t length,
                                                    uint32_t access) override;
  absl::Status DeregisterMemory(const core::MemoryRegion& region) override;
  absl::StatusOr<std::unique_ptr<CompletionQueue>> CreateCompletionQueue(size_t depth) override;
  absl::StatusOr<ConnectionSlot> PrepareConnection() override;
  PortRange SourcePorts(const core::ConnectionConfig& tuning) const override;
  absl::StatusOr<ConnectionBinding> CreateConnection(const ConnectOptions& options,
                                                     const ConnectionParameters& ours,
                                                     const ConnectionParameters& peer) override;
  std::vector<engine::WorkerStats> Stats() override { return engine_->Stats(); }

 private:
  // Anonymous mappings by their first byte, unmapped by the destructor.
  struct Blocks {
    ~Blocks();
    absl::Mutex mu;
    std::map<std::byte*, size_t> by_base ABSL_GUARDED_BY(mu);
  };

  // Declared in release order, reversed: the blocks outlive the Datapath, which outlives the
  // engine whose ports it serves.
  Blocks blocks_;
  std::unique_ptr<Datapath> datapath_;
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace metaroce::api
