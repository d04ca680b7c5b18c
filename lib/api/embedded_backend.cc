#include "lib/api/embedded_backend.h"

#include <sys/mman.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/api/completion_queue.h"
#include "lib/api/context.h"
#include "lib/api/shared_memory.h"

namespace metaroce::api {
namespace {

// What the embedded engine does to a connection on the Connection's behalf.
class EmbeddedConnectionControl final : public ConnectionControl {
 public:
  EmbeddedConnectionControl(engine::Engine& engine, uint32_t conn_id)
      : engine_(engine), conn_id_(conn_id) {}
  ~EmbeddedConnectionControl() override { engine_.DestroyConnection(conn_id_).IgnoreError(); }

  absl::StatusOr<ConnectionStats> Stats() override { return engine_.Snapshot(conn_id_); }
  absl::Status RequestRotation(uint16_t path_id) override {
    return engine_.RequestRotation(conn_id_, path_id);
  }
  absl::Status Abort() override { return engine_.AbortConnection(conn_id_); }

 private:
  engine::Engine& engine_;
  const uint32_t conn_id_;
};

}  // namespace

EmbeddedBackend::Blocks::~Blocks() {
  absl::MutexLock lock(&mu);
  for (const auto& [base, bytes] : by_base) munmap(base, bytes);
}

EmbeddedBackend::~EmbeddedBackend() {
  engine_.reset();  // the workers stop before anything they may point into goes
  datapath_.reset();
}

absl::StatusOr<std::span<std::byte>> EmbeddedBackend::AllocateMemory(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  const size_t rounded = RoundUpToPage(bytes);
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap of ", rounded, " bytes"));
  }
  auto* base = static_cast<std::byte*>(p);
  absl::MutexLock lock(&blocks_.mu);
  blocks_.by_base[base] = rounded;
  return std::span<std::byte>(base, rounded);
}

absl::Status EmbeddedBackend::FreeMemory(std::span<std::byte> block) {
  absl::MutexLock lock(&blocks_.mu);
  auto it = blocks_.by_base.find(block.data());
  if (it == blocks_.by_base.end() || it->second != block.size()) {
    return absl::NotFoundError(
        "no block from Context::AllocateMemory starts there with that size: pass the span it "
        "returned");
  }
  munmap(it->first, it->second);
  blocks_.by_base.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<core::MemoryRegion> EmbeddedBackend::RegisterMemory(void* addr, size_t length,
                                                                   uint32_t access) {
  return engine_->RegisterMemory(addr, length, access);
}

absl::Status EmbeddedBackend::DeregisterMemory(const core::MemoryRegion& region) {
  return engine_->DeregisterMemory(region.lkey);
}

absl::StatusOr<std::unique_ptr<CompletionQueue>> EmbeddedBackend::CreateCompletionQueue(
    size_t depth) {
  return std::unique_ptr<CompletionQueue>(
      new CompletionQueue(engine_->CreateCompletionChannel(depth)));
}

absl::StatusOr<ConnectionSlot> EmbeddedBackend::PrepareConnection() {
  ConnectionSlot slot;
  slot.conn_id = engine_->AllocateConnectionId();
  slot.offer = static_cast<uint32_t>(
      std::min<uint64_t>(engine_->InitialOffer(slot.conn_id), UINT32_MAX));
  return slot;
}

PortRange EmbeddedBackend::SourcePorts(const core::ConnectionConfig& tuning) const {
  return {tuning.rotate_port_lo, tuning.rotate_port_hi};
}

absl::StatusOr<ConnectionBinding> EmbeddedBackend::CreateConnection(
    const ConnectOptions& o, const ConnectionParameters& ours, const ConnectionParameters& peer) {
  const core::ConnectionConfig config = MakeConnectionConfig(ours, peer, o.tuning);
  engine::PeerRoute route{peer.plane_addresses};
  absl::StatusOr<std::shared_ptr<engine::ConnectionChannel>> ch = engine_->CreateConnection(
      config, route, o.send_cq->channel_, o.recv_cq->channel_,
      o.path_events_to_observer ? engine::ObservePathEvents::kOnly
                                : engine::ObservePathEvents::kNo);
  if (!ch.ok()) return ch.status();
  ConnectionBinding b;
  b.wake.engine = engine_.get();
  b.wake.worker = (*ch)->owner();
  b.channel = *std::move(ch);
  b.control = std::make_unique<EmbeddedConnectionControl>(*engine_, ours.conn_id);
  return b;
}

}  // namespace metaroce::api
