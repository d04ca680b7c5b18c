// Two endpoints joined by an in-memory wire with a mock clock: the harness for connection-level
// unit and property tests. Each packet's fate (drop, duplicate, delay, CE mark) is decided by a
// caller-supplied function, so a test states exactly what the network does.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "lib/core/endpoint.h"
#include "tests/support/recording_sink.h"

namespace metaroce::testing {

struct Fate {
  bool drop = false;
  int copies = 1;                        // > 1: duplicated
  core::Duration delay{std::chrono::microseconds(5)};  // one-way latency of this packet
  bool ce = false;
};

class HostPair {
 public:
  // Creates connection id 1 on both hosts from `config` (ids and tokens are filled in).
  // `budget`: both hosts' receive budget and pull pacer (default: the core's, no pulls).
  explicit HostPair(core::ConnectionConfig config, const core::ReceiveBudgetConfig& budget = {});

  core::Endpoint& a() { return *a_; }
  core::Endpoint& b() { return *b_; }
  core::Connection& ca() { return *ca_; }  // requester side in most tests
  core::Connection& cb() { return *cb_; }
  core::Instant now() const { return now_; }

  // Decides what happens to each packet. Default: delivered after 5 us.
  std::function<Fate(const RecordedPacket& p, bool a_to_b, core::Instant now)> fate;
  // Called for each completion as soon as it is polled (right after the event that made it), so
  // a test can check what memory holds at that instant.
  std::function<void(const core::Completion&)> on_completion_a, on_completion_b;
  // Observes every packet as it is sent (before its fate).
  std::function<void(const RecordedPacket& p, bool a_to_b)> on_send;

  // Runs events (deliveries, timers) in time order until nothing is pending or `until` passes.
  // Returns the number of events run.
  uint64_t RunUntil(core::Instant until, uint64_t max_events = 10'000'000);
  uint64_t RunFor(core::Duration d) { return RunUntil(now_ + d); }
  // Advances the clock with no events (for time-sensitive setups).
  void AdvanceTo(core::Instant t) { now_ = t; }

  // Completions polled so far from each side.
  std::vector<core::Completion>& completions_a() { return comps_a_; }
  std::vector<core::Completion>& completions_b() { return comps_b_; }
  std::vector<core::PathEvent> TakeEventsA();

  uint64_t delivered() const { return delivered_; }
  uint64_t dropped() const { return dropped_; }

 private:
  struct InFlight {
    bool to_b;
    std::vector<std::byte> bytes;
    core::RxMeta meta;
  };
  void Collect();
  void Poll();

  RecordingSink sink_a_, sink_b_;
  std::unique_ptr<core::Endpoint> a_, b_;
  core::Connection* ca_ = nullptr;
  core::Connection* cb_ = nullptr;
  core::Instant now_{0};
  std::multimap<std::pair<int64_t, uint64_t>, InFlight> wire_;  // (arrival ns, seq)
  uint64_t seq_ = 0;
  uint64_t delivered_ = 0, dropped_ = 0;
  std::vector<core::Completion> comps_a_, comps_b_;
};

}  // namespace metaroce::testing
