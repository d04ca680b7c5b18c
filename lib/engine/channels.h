// The rings between the application and the workers that own its connections.
//
//   CompletionChannel  worker -> application: one SPSC ring per worker, so every worker is the
//                      single producer of its own ring whatever connections share the channel;
//                      the application is the single consumer of all of them (Poll).
//   ConnectionChannel  application -> owner worker: a send ring and a receive ring (the queue
//                      pair's SQ and RQ, kept apart so that a full send queue never holds back
//                      receives the peer needs to make progress), and owner worker -> application:
//                      a path event ring and a published state.
//
// Threading: each ring has one producer and one consumer thread as stated per member. Ownership:
// shared (std::shared_ptr) between the api object and the owner worker, which drops its reference
// when the connection is destroyed on the control path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lib/core/path_state.h"
#include "lib/core/types.h"
#include "lib/engine/spsc_ring.h"

namespace metaroce::engine {

class CompletionChannel {
 public:
  // `depth` completions per worker ring.
  CompletionChannel(int workers, size_t depth) {
    rings_.reserve(workers);
    for (int i = 0; i < workers; ++i) {
      rings_.push_back(std::make_unique<SpscRing<core::Completion>>(depth));
    }
  }

  // Application thread (one at a time): moves up to out.size() completions into `out`, taking
  // from the worker rings in turn so that no worker starves another. Returns how many.
  size_t Poll(std::span<core::Completion> out) {
    size_t n = 0;
    const size_t workers = rings_.size();
    for (size_t i = 0; i < workers && n < out.size(); ++i) {
      const size_t w = (next_ + i) % workers;
      n += rings_[w]->PopBatch(out.subspan(n));
    }
    next_ = (next_ + 1) % workers;
    return n;
  }

  // Worker `w` only: its ring.
  SpscRing<core::Completion>& ring(int w) { return *rings_[w]; }
  size_t depth() const { return rings_[0]->capacity(); }

 private:
  std::vector<std::unique_ptr<SpscRing<core::Completion>>> rings_;
  size_t next_ = 0;  // application thread only
};

// Connection state as published by the owner worker (readable from any thread).
struct PublishedState {
  bool error = false;
  core::WcStatus error_status = core::WcStatus::kSuccess;
};

class ConnectionChannel {
 public:
  ConnectionChannel(uint32_t conn_id, int owner, size_t send_depth, size_t recv_depth,
                    size_t event_depth, std::shared_ptr<CompletionChannel> send_cq,
                    std::shared_ptr<CompletionChannel> recv_cq)
      : sends(send_depth),
        recvs(recv_depth),
        events(event_depth),
        conn_id_(conn_id),
        owner_(owner),
        send_cq_(std::move(send_cq)),
        recv_cq_(std::move(recv_cq)) {}

  uint32_t conn_id() const { return conn_id_; }
  int owner() const { return owner_; }
  CompletionChannel& send_cq() { return *send_cq_; }
  CompletionChannel& recv_cq() { return *recv_cq_; }

  // Producer: the application thread posting sends. Consumer: the owner worker.
  SpscRing<core::SendWorkRequest> sends;
  // Producer: the application thread posting receives. Consumer: the owner worker.
  SpscRing<core::RecvWorkRequest> recvs;
  // Producer: the owner worker. Consumer: the application thread reading events. When full, new
  // events are dropped and counted in events_dropped (they are telemetry, not work).
  SpscRing<core::PathEvent> events;
  std::atomic<uint64_t> events_dropped{0};

  // Written by the owner worker, read by anyone.
  PublishedState state() const {
    const uint8_t v = state_.load(std::memory_order_acquire);
    return {(v & 0x80) != 0, static_cast<core::WcStatus>(v & 0x7f)};
  }
  void Publish(PublishedState s) {
    state_.store(static_cast<uint8_t>((s.error ? 0x80 : 0) | static_cast<uint8_t>(s.error_status)),
                 std::memory_order_release);
  }

 private:
  const uint32_t conn_id_;
  const int owner_;
  const std::shared_ptr<CompletionChannel> send_cq_;
  const std::shared_ptr<CompletionChannel> recv_cq_;
  std::atomic<uint8_t> state_{0};
};

}  // namespace metaroce::engine
