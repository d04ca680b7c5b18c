// A completion queue (ibv_cq): where the engine reports finished work requests of the
// connections bound to it. Poll() is ibv_poll_cq: it moves up to out.size() completions into the
// caller's array and never blocks.
//
// Poll() only reads what the engine delivered: in the context's inline mode it is
// Context::Poll() that runs the engine and fills the queue (poll the context, then the queue).
// In an attached context (Context::Attach) the rings live in memory shared with metaroced, whose
// workers write them; Poll() is the same code and makes no system call.
//
// Threading: Poll() from one thread at a time (the queue is the single consumer of one lock-free
// ring per worker); inline mode: from the context's driving thread. Ownership: created by
// Context::CreateCompletionQueue; connections bound to it keep its rings alive, but completions
// are only visible through this object. Destroy the connections bound to a queue before the
// queue: an attached context's daemon keeps a queue that connections still use until they go
// (or the context does).
// Depth: per worker; when a ring is full the worker keeps further completions in the connection
// (nothing is lost) until Poll() makes room.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/functional/any_invocable.h"
#include "lib/core/types.h"
#include "lib/engine/channels.h"

namespace metaroce::api {

using WorkCompletion = core::Completion;

class CompletionQueue {
 public:
  ~CompletionQueue() {
    if (on_destroy_) on_destroy_();
  }
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  size_t Poll(std::span<WorkCompletion> out) { return channel_->Poll(out); }
  size_t depth_per_worker() const { return channel_->depth(); }

 private:
  friend class Context;
  friend class EmbeddedBackend;
  friend class AttachedBackend;
  explicit CompletionQueue(std::shared_ptr<engine::CompletionChannel> channel,
                           uint64_t daemon_id = 0,
                           absl::AnyInvocable<void()> on_destroy = nullptr)
      : channel_(std::move(channel)), daemon_id_(daemon_id), on_destroy_(std::move(on_destroy)) {}

  std::shared_ptr<engine::CompletionChannel> channel_;
  uint64_t daemon_id_;  // attached: the daemon's id of the queue (cq.create); 0 embedded
  absl::AnyInvocable<void()> on_destroy_;  // attached: cq.destroy
};

}  // namespace metaroce::api
