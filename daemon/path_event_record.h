// The path manager's record of path events (`path.events`, docs/control-protocol.md): every
// connection's state changes and rotations, kept compact and bounded in bytes.
//
// An event is kept as the engine gave it (core::PathEvent, 24 bytes) with its sequence number
// and its daemon time: kEventBytes (40) each, turned into the protocol's EVENT object only when
// a page lists it. Two bounds, both applied as each event is recorded:
//   - per connection, the last `per_connection` events (1,024 by default: a flapping path does
//     not push out the rest of its connection's history beyond that);
//   - in all, `max_bytes` of events (max_bytes / kEventBytes events): beyond it the oldest event
//     of the whole record goes first, whichever connection it belongs to. With 4,096 connections
//     of a flapping fabric the per-connection bound alone would allow 4,096 x 1,024 events
//     (168 MB as compact events; gigabytes as the JSON objects the record used to keep).
// Each connection holding a record also costs its deque's block (about 600 bytes), so the
// record's memory is at most max_bytes plus that per connection held.
//
// Sequence numbers are given in the order Record is called (1, 2, ...), never reused; they are
// path.events' order and cursor. Threading: not thread-safe; PathManager locks around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/control/json.h"
#include "lib/core/path_state.h"

namespace metaroce::daemon {

// PathEventRecord's bounds (its header comment).
struct PathEventLimits {
  size_t per_connection = 1024;
  size_t max_bytes = size_t{32} << 20;  // 32 MiB: 838,860 events
};

class PathEventRecord {
 public:
  using Limits = PathEventLimits;
  // One recorded event: 40 bytes.
  struct Entry {
    uint64_t seq = 0;
    int64_t daemon_time_ns = 0;  // the event's instant in daemon time (since it started)
    core::PathEvent event;
  };
  static constexpr size_t kEventBytes = sizeof(Entry);

  explicit PathEventRecord(Limits limits = Limits());

  // Keeps `event`, which happened at daemon time `daemon_time_ns`, with the next sequence
  // number; drops the oldest events beyond either bound. Returns the sequence number.
  uint64_t Record(const core::PathEvent& event, int64_t daemon_time_ns);
  // Forgets a connection's record (the connection is gone).
  void Erase(uint32_t conn);
  // Bounds for events recorded from now on; the record is trimmed to them at once.
  void SetLimits(Limits limits);

  // The connections with a record, in increasing order.
  std::vector<uint32_t> Connections() const;
  // Visits the events of every connection (or of `conn` only) with seq >= first_seq in
  // increasing seq order, until `visit` returns false.
  void Visit(std::optional<uint32_t> conn, uint64_t first_seq,
             const std::function<bool(const Entry&)>& visit) const;
  // The protocol's EVENT object of an entry (docs/control-protocol.md, path.events).
  static control::Json ToJson(const Entry& e);

  size_t events() const { return total_; }
  size_t bytes() const { return total_ * kEventBytes; }
  // Events dropped by the byte bound (the oldest of the record, whoever's) since the start.
  uint64_t dropped_for_bytes() const { return dropped_for_bytes_; }

 private:
  size_t max_events() const;
  void PopFront(std::map<uint32_t, std::deque<Entry>>::iterator it);
  void Trim();

  Limits limits_;
  // Each connection's record, oldest first (so in sequence order).
  std::map<uint32_t, std::deque<Entry>> events_;
  // (seq of the oldest event, connection) of every non-empty record: its first element is the
  // oldest event of the whole record, the one the byte bound drops first.
  std::set<std::pair<uint64_t, uint32_t>> oldest_;
  size_t total_ = 0;
  uint64_t next_seq_ = 1;
  uint64_t dropped_for_bytes_ = 0;
};

}  // namespace metaroce::daemon
