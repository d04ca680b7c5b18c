#include "lib/ofi/buffer_pool.h"

#include <algorithm>

namespace metaroce::ofi {

BufferPool::~BufferPool() {
  for (Block& b : blocks_) {
    context_.DeregisterMemory(b.region).IgnoreError();
    context_.FreeMemory(b.memory).IgnoreError();
  }
}

std::optional<BufferPool::Buffer> BufferPool::Get() {
  if (free_.empty()) {
    const size_t count = std::min(per_block_, max_buffers_ - total_);
    if (count == 0) return std::nullopt;
    absl::StatusOr<std::span<std::byte>> memory = context_.AllocateMemory(count * buffer_bytes_);
    if (!memory.ok()) {
      last_error_ = memory.status();
      return std::nullopt;
    }
    absl::StatusOr<api::MemoryRegion> region = context_.RegisterMemory(
        memory->data(), memory->size(),
        api::access::kLocalWrite | api::access::kRemoteWrite);
    if (!region.ok()) {
      context_.FreeMemory(*memory).IgnoreError();
      last_error_ = region.status();
      return std::nullopt;
    }
    blocks_.push_back({*memory, *region});
    for (size_t i = 0; i < count; ++i) {
      free_.push_back({memory->data() + i * buffer_bytes_, region->lkey, region->rkey});
    }
    total_ += count;
  }
  Buffer b = free_.back();
  free_.pop_back();
  return b;
}

}  // namespace metaroce::ofi
