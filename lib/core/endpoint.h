// An endpoint: the connections of one host (or one engine shard) and the memory they share.
//
// It is the core's front door for raw datagrams: it parses, rejects malformed packets with a
// counted reason, demultiplexes by destination connection id and drives timers across its
// connections. Like Connection it is sans-I/O and single-threaded.
//
// Cost contract: nothing here walks the connections. Their deadlines sit in a DeadlineHeap that
// each connection keeps current (ConnectionObserver), so NextDeadline() is O(1) and OnTimer()
// costs O(log n) per due connection; connections with completions or path events waiting are
// listed as they appear (TakeReady), so an owner polls those and no others. Demultiplexing is an
// ordered-map lookup, O(log n).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "lib/core/connection.h"
#include "lib/core/memory_table.h"
#include "lib/core/packet_sink.h"
#include "lib/core/receive_budget.h"
#include "lib/wire/packet.h"

namespace metaroce::core {

struct EndpointCounters {
  uint64_t rx_datagrams = 0;
  uint64_t malformed = 0;  // sum of by_reason
  std::array<uint64_t, static_cast<size_t>(wire::ParseError::kCount)> malformed_by_reason = {};
  uint64_t unknown_connection = 0;
};

class Endpoint : private ConnectionObserver {
 public:
  // `sink` must outlive the endpoint. `budget`: the host's receive budget, shared by all of its
  // connections (receive_budget.h).
  explicit Endpoint(PacketSink& sink, const ReceiveBudgetConfig& budget = {})
      : sink_(sink), budget_(budget) {}
  ~Endpoint() override;

  MemoryTable& memory() { return memory_; }
  // The host's receive budget. Its InitialOffer() is what the set-up exchange offers a requester
  // as the initial window_hint of a new connection (ConnectionConfig::initial_window_hint_bytes).
  ReceiveBudget& receive_budget() { return budget_; }

  // Creates a connection. Refuses an invalid config or a local id already in use.
  absl::StatusOr<Connection*> CreateConnection(const ConnectionConfig& config);
  absl::Status DestroyConnection(uint32_t local_conn_id);
  Connection* Find(uint32_t local_conn_id);

  // Parses and dispatches one received UDP payload. Malformed or unroutable datagrams are dropped
  // and counted; nothing in them is trusted.
  void OnDatagram(Instant now, std::span<const std::byte> datagram, const RxMeta& meta);
  // Releases the pulls due at `now` (receive_budget.h, pull_pacer.h), then runs the timers of
  // every connection whose deadline is at or before `now`, in order of (deadline, id).
  void OnTimer(Instant now);
  // Earliest deadline over all connections and the pull pacer, or kNever. O(1).
  Instant NextDeadline() const {
    return std::min(timers_.top_deadline(), budget_.pacer().NextRelease());
  }
  // Appends to `out` the connections that announced completions or path events since the last
  // call (each once), and takes their announcements: an owner polls these. A connection polled
  // and left with output is listed again; one taken and not polled is not, until new output.
  void TakeReady(std::vector<Connection*>* out);
  // Sees every placement of every connection (ConnectionObserver::OnPlaced): a verification
  // hook for simulators and tests. Empty: none.
  using PlacementCheck = std::function<void(Connection& c, uint32_t msg_seq, uint32_t offset,
                                            std::span<const std::byte> placed)>;
  void set_placement_check(PlacementCheck check) { placement_check_ = std::move(check); }

  const EndpointCounters& counters() const { return counters_; }
  // Connections in id order.
  const absl::btree_map<uint32_t, std::unique_ptr<Connection>>& connections() const {
    return connections_;
  }

 private:
  void OnDeadlineChanged(Connection& c, Instant deadline) override;
  void OnOutputReady(Connection& c) override;
  void OnPlaced(Connection& c, uint32_t msg_seq, uint32_t offset,
                std::span<const std::byte> placed) override {
    if (placement_check_) placement_check_(c, msg_seq, offset, placed);
  }

  PacketSink& sink_;
  MemoryTable memory_;
  ReceiveBudget budget_;
  absl::btree_map<uint32_t, std::unique_ptr<Connection>> connections_;
  // The connection Find found last: datagrams come in runs per connection (a batch from one
  // peer, its ACKs), and the next of a run costs one compare, not a walk of the tree.
  uint32_t last_found_id_ = 0;
  Connection* last_found_ = nullptr;
  DeadlineHeap<Connection> timers_;
  std::vector<Connection*> ready_;  // announced output, not yet taken
  std::vector<Connection*> due_;    // OnTimer's scratch
  PlacementCheck placement_check_;
  EndpointCounters counters_;
};

}  // namespace metaroce::core
