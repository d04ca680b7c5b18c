#include "daemon/path_event_record.h"

#include <algorithm>

namespace metaroce::daemon {

static_assert(PathEventRecord::kEventBytes == 40,
              "an event of the record is 40 bytes (path_event_record.h, docs)");

PathEventRecord::PathEventRecord(Limits limits) : limits_(limits) {}

size_t PathEventRecord::max_events() const {
  return std::max<size_t>(1, limits_.max_bytes / kEventBytes);
}

uint64_t PathEventRecord::Record(const core::PathEvent& event, int64_t daemon_time_ns) {
  const uint64_t seq = next_seq_++;
  auto it = events_.try_emplace(event.conn_id).first;
  if (it->second.empty()) oldest_.emplace(seq, event.conn_id);
  it->second.push_back(Entry{seq, daemon_time_ns, event});
  ++total_;
  if (it->second.size() > limits_.per_connection) PopFront(it);
  while (total_ > max_events()) {
    ++dropped_for_bytes_;
    PopFront(events_.find(oldest_.begin()->second));
  }
  return seq;
}

void PathEventRecord::PopFront(std::map<uint32_t, std::deque<Entry>>::iterator it) {
  std::deque<Entry>& q = it->second;
  oldest_.erase({q.front().seq, it->first});
  q.pop_front();
  --total_;
  if (q.empty()) {
    events_.erase(it);  // its block goes too: an idle connection costs nothing here
  } else {
    oldest_.emplace(q.front().seq, it->first);
  }
}

void PathEventRecord::Erase(uint32_t conn) {
  auto it = events_.find(conn);
  if (it == events_.end()) return;
  oldest_.erase({it->second.front().seq, conn});
  total_ -= it->second.size();
  events_.erase(it);
}

void PathEventRecord::SetLimits(Limits limits) {
  limits_ = limits;
  Trim();
}

void PathEventRecord::Trim() {
  for (auto it = events_.begin(); it != events_.end();) {
    auto next = std::next(it);
    while (it->second.size() > limits_.per_connection) {
      const bool last = it->second.size() == 1;
      PopFront(it);
      if (last) break;  // per_connection 0: the record of `it` is gone
    }
    it = next;
  }
  while (total_ > max_events()) {
    ++dropped_for_bytes_;
    PopFront(events_.find(oldest_.begin()->second));
  }
}

std::vector<uint32_t> PathEventRecord::Connections() const {
  std::vector<uint32_t> ids;
  ids.reserve(events_.size());
  for (const auto& [id, q] : events_) ids.push_back(id);
  return ids;
}

void PathEventRecord::Visit(std::optional<uint32_t> conn, uint64_t first_seq,
                            const std::function<bool(const Entry&)>& visit) const {
  // Each connection's record is in sequence order: a merge of the records from first_seq on,
  // smallest sequence number first, visits only what the caller takes (and one more).
  using Cursor = std::pair<std::deque<Entry>::const_iterator, std::deque<Entry>::const_iterator>;
  auto later = [](const Cursor& a, const Cursor& b) { return a.first->seq > b.first->seq; };
  std::vector<Cursor> heap;
  for (const auto& [id, q] : events_) {
    if (conn && id != *conn) continue;
    auto from = std::partition_point(q.begin(), q.end(),
                                     [&](const Entry& e) { return e.seq < first_seq; });
    if (from != q.end()) heap.emplace_back(from, q.end());
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Cursor& c = heap.back();
    if (!visit(*c.first)) return;
    if (++c.first == c.second) {
      heap.pop_back();
    } else {
      std::push_heap(heap.begin(), heap.end(), later);
    }
  }
}

control::Json PathEventRecord::ToJson(const Entry& entry) {
  const core::PathEvent& e = entry.event;
  control::Json j = control::Json::MakeObject();
  j["time_s"] = static_cast<double>(entry.daemon_time_ns) / 1e9;
  j["monotonic_ns"] = e.at.ns;
  j["conn"] = e.conn_id;
  j["path_id"] = e.path_id;
  if (e.kind == core::PathEvent::Kind::kPortRotated) {
    j["kind"] = "rotation";
    j["old_port"] = e.old_port;
    j["new_port"] = e.new_port;
  } else {
    j["kind"] = "state";
    j["from"] = core::PathStateName(e.from);
    j["to"] = core::PathStateName(e.to);
  }
  j["reason"] = core::PathEventReasonName(e.reason);
  j["seq"] = entry.seq;
  return j;
}

}  // namespace metaroce::daemon
