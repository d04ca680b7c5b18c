// Buffers the transport can name: equal-sized buffers carved from blocks of the context's
// memory (Context::AllocateMemory: in an attached context, memory shared with metaroced, the only
// memory it can register), each block registered once. The provider copies between the
// application's buffers and these (docs/ofi.md, "Memory": an attached process cannot register
// arbitrary memory with the daemon, so every mode takes the same path).
//
// Grows a block at a time up to `max_buffers`; Get() then returns nullopt until a Put().
// Not thread-safe (the provider's domain lock guards it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "lib/api/context.h"

namespace metaroce::ofi {

class BufferPool {
 public:
  struct Buffer {
    std::byte* data = nullptr;
    uint32_t lkey = 0;
    uint32_t rkey = 0;
  };

  BufferPool(api::Context& context, size_t buffer_bytes, size_t buffers_per_block,
             size_t max_buffers)
      : context_(context),
        buffer_bytes_(buffer_bytes),
        per_block_(buffers_per_block),
        max_buffers_(max_buffers) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A free buffer, growing the pool by a block when none is free and the maximum allows; nullopt
  // when the maximum is reached or the context refuses more memory (last_error() says why).
  std::optional<Buffer> Get();
  void Put(const Buffer& b) { free_.push_back(b); }

  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t in_use() const { return total_ - free_.size(); }
  const absl::Status& last_error() const { return last_error_; }

 private:
  struct Block {
    std::span<std::byte> memory;
    api::MemoryRegion region;
  };
  api::Context& context_;
  const size_t buffer_bytes_;
  const size_t per_block_;
  const size_t max_buffers_;
  size_t total_ = 0;
  std::vector<Block> blocks_;
  std::vector<Buffer> free_;
  absl::Status last_error_;
};

}  // namespace metaroce::ofi
