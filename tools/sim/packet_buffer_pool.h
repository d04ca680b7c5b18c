// Recycled packet byte buffers for the simulated fabrics (two-host Fabric, LeafSpineFabric): a
// run moves millions of packets, and allocating each one's bytes cost more than its journey.
// Take() hands out an empty buffer (with the capacity of one delivered or dropped before, or
// none); Recycle() keeps a buffer for reuse if it is worth keeping: at least kMinCapacity bytes
// of capacity (a headers-only buffer, FabricPacket::payload, would only make the next Take()
// reallocate) and at most kMaxSpare kept. Thread-safety: none (one simulation, one thread).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace metaroce::sim {

class PacketBufferPool {
 public:
  static constexpr size_t kMaxSpare = 1 << 16;
  static constexpr size_t kMinCapacity = 1024;

  std::vector<std::byte> Take() {
    if (spare_.empty()) return {};
    std::vector<std::byte> b = std::move(spare_.back());
    spare_.pop_back();
    return b;
  }
  void Recycle(std::vector<std::byte>&& bytes) {
    if (bytes.capacity() < kMinCapacity || spare_.size() >= kMaxSpare) return;
    bytes.clear();
    spare_.push_back(std::move(bytes));
  }

 private:
  std::vector<std::vector<std::byte>> spare_;
};

}  // namespace metaroce::sim
