#include "lib/core/endpoint.h"

#include "absl/strings/str_cat.h"

namespace metaroce::core {

absl::StatusOr<Connection*> Endpoint::CreateConnection(const ConnectionConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  if (connections_.contains(config.local_conn_id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("connection id ", config.local_conn_id, " is already in use"));
  }
  auto conn = std::make_unique<Connection>(config, memory_, sink_);
  Connection* raw = conn.get();
  connections_.emplace(config.local_conn_id, std::move(conn));
  return raw;
}

absl::Status Endpoint::DestroyConnection(uint32_t local_conn_id) {
  if (connections_.erase(local_conn_id) == 0) {
    return absl::NotFoundError(absl::StrCat("no connection with id ", local_conn_id));
  }
  return absl::OkStatus();
}

Connection* Endpoint::Find(uint32_t local_conn_id) {
  auto it = connections_.find(local_conn_id);
  return it == connections_.end() ? nullptr : it->second.get();
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
  for (auto& [id, conn] : connections_) {
    if (conn->NextDeadline() <= now) conn->OnTimer(now);
  }
}

Instant Endpoint::NextDeadline() const {
  Instant t = kNever;
  for (const auto& [id, conn] : connections_) t = std::min(t, conn->NextDeadline());
  return t;
}

}  // namespace metaroce::core
