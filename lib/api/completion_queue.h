// A completion queue (ibv_cq): where the engine reports finished work requests of the
// connections bound to it. Poll() is ibv_poll_cq: it moves up to out.size() completions into the
// caller's array and never blocks.
//
// Poll() only reads what the engine delivered: in the context's inline mode it is
// Context::Poll() that runs the engine and fills the queue (poll the context, then the queue).
//
// Threading: Poll() from one thread at a time (the queue is the single consumer of one lock-free
// ring per worker); inline mode: from the context's driving thread. Ownership: created by Context::CreateCompletionQueue; connections bound to it
// keep its rings alive, but completions are only visible through this object.
// Depth: per worker; when a ring is full the worker keeps further completions in the connection
// (nothing is lost) until Poll() makes room.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "lib/core/types.h"
#include "lib/engine/channels.h"

namespace metaroce::api {

using WorkCompletion = core::Completion;

class CompletionQueue {
 public:
  size_t Poll(std::span<WorkCompletion> out) { return channel_->Poll(out); }
  size_t depth_per_worker() const { return channel_->depth(); }

 private:
  friend class Context;
  explicit CompletionQueue(std::shared_ptr<engine::CompletionChannel> channel)
      : channel_(std::move(channel)) {}
  std::shared_ptr<engine::CompletionChannel> channel_;
};

}  // namespace metaroce::api
