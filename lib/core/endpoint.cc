#include "lib/core/endpoint.h"

#include "absl/strings/str_cat.h"

namespace metaroce::core {

absl::StatusOr<Connection*> Endpoint::CreateConnection(const ConnectionConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (connections_.contains(config.local_conn_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("connection id ", config.local_conn_id, " is already in use"));
  }
  auto conn = std::make_unique<Connection>(config, memory_, sink_,
                                           static_cast<ConnectionObserver*>(this), &budget_);
  Connection* raw = conn.get();
  connections_.emplace(config.local_conn_id, std::move(conn));
  return raw;
}

Endpoint::~Endpoint() {
  // Connections go first: nothing they do on the way out may reach a half-destroyed endpoint.
  connections_.clear();
}

absl::Status Endpoint::DestroyConnection(uint32_t local_conn_id) {
  auto it = connections_.find(local_conn_id);
  if (it == connections_.end()) {
    return absl::NotFoundError(absl::StrCat("no connection with id ", local_conn_id));
  }
  Connection* conn = it->second.get();
  if (last_found_ == conn) last_found_ = nullptr;
  timers_.Remove(*conn);
  std::erase(ready_, conn);
  connections_.erase(it);
  return absl::OkStatus();
}

Connection* Endpoint::Find(uint32_t local_conn_id) {
  if (last_found_ != nullptr && last_found_id_ == local_conn_id) return last_found_;
  auto it = connections_.find(local_conn_id);
  if (it == connections_.end()) return nullptr;
  last_found_id_ = local_conn_id;
  last_found_ = it->second.get();
  return last_found_;
}

void Endpoint::OnDatagram(Instant now, std::span<const std::byte> datagram, const RxMeta& meta) {
  ++counters_.rx_datagrams;
  const wire::ParseResult r = wire::Parse(datagram);
  if (!r.ok()) {
    ++counters_.malformed;
    ++counters_.malformed_by_reason[static_cast<size_t>(r.error)];
    return;
  }
  Connection* conn = Find(r.packet.dest_conn);
  if (conn == nullptr) {
    ++counters_.unknown_connection;
    return;
  }
  conn->OnPacket(now, r.packet, meta);
}

void Endpoint::OnTimer(Instant now) {
  // Pulls first (congestion.md §6): they are due at their slots, and a connection's own timers
  // below may send a packet its pull would otherwise have let through.
  budget_.pacer().ReleaseDue(now, [&](uint32_t conn, uint64_t turn) {
    if (Connection* c = Find(conn)) c->SendPull(now, turn);
  });
  // The due connections leave the heap first: a timer that leaves its deadline at or before
  // `now` runs again at the next call, not in a loop here.
  due_.clear();
  while (timers_.top_deadline() <= now) {
    Connection& c = timers_.top();
    timers_.Remove(c);
    due_.push_back(&c);
  }
  for (Connection* c : due_) {
    c->OnTimer(now);
    timers_.Update(*c, c->NextDeadline());  // back in, even when its deadline did not change
  }
}

void Endpoint::TakeReady(std::vector<Connection*>* out) {
  for (Connection* c : ready_) {
    c->TakeOutputAnnouncement();
    out->push_back(c);
  }
  ready_.clear();
}

void Endpoint::OnDeadlineChanged(Connection& c, Instant deadline) { timers_.Update(c, deadline); }

void Endpoint::OnOutputReady(Connection& c) { ready_.push_back(&c); }

}  // namespace metaroce::core
