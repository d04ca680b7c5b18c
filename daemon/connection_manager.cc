#include "daemon/connection_manager.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/listing.h"
#include "daemon/params.h"
#include "lib/api/stats_json.h"
#include "lib/core/types.h"

namespace metaroce::daemon {
namespace {

using control::Json;

// Messages on a connection's link (the set-up channel, kept open: docs/spec/setup.md §8):
// KEEPALIVE, and CLOSE when a side deletes the connection. A daemon of an earlier release sent
// the text "heartbeat" and "goodbye" instead, which are still understood.
constexpr std::string_view kLegacyGoodbye = "goodbye";

std::vector<std::byte> LinkMessageBytes(api::ExchangeKind kind, std::string_view reason = "") {
  api::ExchangeMessage m;
  m.kind = kind;
  m.code = api::SetupCode::kNone;
  m.reason = std::string(reason);
  return api::EncodeExchange(m);
}
constexpr std::string_view kDaemonKind = "metaroced";
// In the private data: this daemon shares one heartbeat among all its links to a peer (header).
constexpr std::string_view kPerPeerLiveness = "per_peer";
// A link operation never blocks the table for longer than this.
constexpr absl::Duration kLinkIo = absl::Milliseconds(100);

std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// What a daemon tells its peer in the exchange's private data: who it is, and the memory
// regions the connection's owner advertises (none for connections mrctl makes).
std::vector<std::byte> DaemonPrivateData() {
  Json j = Json::MakeObject();
  j["kind"] = kDaemonKind;
  j["version"] = 1;
  j["host"] = HostName();
  j["pid"] = static_cast<int64_t>(getpid());
  j["regions"] = Json::MakeArray();
  j["liveness"] = kPerPeerLiveness;
  return Bytes(j.Dump());
}

// The peer daemon a connection shares its liveness with: its address and identity (host and
// pid: a restarted daemon is another peer), or empty when the peer does not share heartbeats.
std::string PeerDaemonKey(std::string_view address, std::span<const std::byte> private_data) {
  const std::string_view text(reinterpret_cast<const char*>(private_data.data()),
                              private_data.size());
  absl::StatusOr<Json> j = Json::Parse(text);
  if (!j.ok()) return "";
  const Json* liveness = j->Find("liveness");
  if (liveness == nullptr || liveness->AsString() != kPerPeerLiveness) return "";
  const Json* host = j->Find("host");
  const Json* pid = j->Find("pid");
  std::string key(address);
  key += ' ';
  if (host != nullptr) key += std::string(host->AsString().value_or(""));
  absl::StrAppend(&key, " pid ", pid != nullptr ? pid->AsInt().value_or(0) : 0);
  return key;
}

absl::Status CheckPeerIsDaemon(std::span<const std::byte> private_data) {
  const std::string_view text(reinterpret_cast<const char*>(private_data.data()),
                              private_data.size());
  absl::StatusOr<Json> j = Json::Parse(text);
  const Json* kind = j.ok() ? j->Find("kind") : nullptr;
  if (kind == nullptr || kind->AsString() != kDaemonKind) {
    return absl::FailedPreconditionError(
        "the peer is not a metaroced (no daemon identity in its connection exchange)");
  }
  return absl::OkStatus();
}

// A daemon's own connection (conn.add) carries no application's work: nothing in the daemon
// posts on it; it exists for its paths (probing, rotation, telemetry). Its send and receive
// queues (the core's and the engine's rings, 1,024 deep by default: 88 KB a connection) are
// kept short so that an idle one costs what its paths do (issue 12: 4,000 of them per host).
constexpr uint32_t kDaemonConnectionQueueDepth = 16;

absl::StatusOr<core::TransportProfile> ProfileNamed(std::string_view name) {
  if (name == "metaroce") return core::TransportProfile::MetaRoce();
  if (name == "gbn") return core::TransportProfile::GoBackN();
  if (name == "reorder") return core::TransportProfile::ReorderBuffer();
  return absl::InvalidArgumentError(
      absl::StrCat("profile '", std::string(name), "': expected metaroce, gbn or reorder"));
}


// "ADDR", "ADDR:PORT", "[V6]" or "[V6]:PORT".
absl::Status SplitHostPort(std::string_view text, uint16_t default_port, std::string* host,
                           uint16_t* port) {
  *port = default_port;
  std::string_view h = text, p;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("peer: missing ']'");
    h = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return absl::InvalidArgumentError("peer: expected ':' after ']'");
      p = rest.substr(1);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    const size_t colon = text.find(':');
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (h.empty()) return absl::InvalidArgumentError("peer: empty address");
  if (!p.empty()) {
    uint32_t v = 0;
    if (!absl::SimpleAtoi(absl::string_view(p.data(), p.size()), &v) || v == 0 || v > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("peer: bad port '", std::string(p), "'"));
    }
    *port = static_cast<uint16_t>(v);
  }
  *host = std::string(h);
  return absl::OkStatus();
}

// "198.18.0.6:4793" -> "198.18.0.6"; "[fd00::1]:5" -> "fd00::1".
std::string AddressOf(const std::string& peer_name) {
  std::string host;
  uint16_t port = 0;
  if (SplitHostPort(peer_name, 0, &host, &port).ok()) return host;
  return peer_name;
}

}  // namespace

ConnectionManager::ConnectionManager(api::Context& context, ConnectionManagerOptions options)
    : context_(context), options_(std::move(options)) {}

ConnectionManager::~ConnectionManager() { Stop(); }

absl::Status ConnectionManager::Start() {
  absl::StatusOr<std::unique_ptr<api::CompletionQueue>> cq = context_.CreateCompletionQueue(1024);
  if (!cq.ok()) return cq.status();
  cq_ = *std::move(cq);
  absl::StatusOr<std::unique_ptr<api::Listener>> l =
      context_.Listen(options_.control_port, options_.bind_address);
  if (!l.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("control port ",
                     absl::StrContains(options_.bind_address, ':')
                         ? absl::StrCat("[", options_.bind_address, "]")
                         : options_.bind_address,
                     ":", options_.control_port,
                     " for peer daemons: ", l.status().message(),
                     " (another metaroced? set control_port in the config)"));
  }
  listener_ = *std::move(l);
  bound_port_ = listener_->port();
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return absl::ErrnoToStatus(errno, "epoll for the connections' links");
  stop_ = false;
  listen_thread_ = std::thread([this] { ListenLoop(); });
  liveness_thread_ = std::thread([this] { LivenessLoop(); });
  return absl::OkStatus();
}

void ConnectionManager::Stop() {
  stop_ = true;
  if (listen_thread_.joinable()) listen_thread_.join();
  if (liveness_thread_.joinable()) liveness_thread_.join();
  listener_.reset();
  std::map<uint32_t, std::unique_ptr<ManagedConnection>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(table_);
  }
  {
    absl::MutexLock lock(&mu_);
    peers_.clear();
    own_heartbeats_.clear();
  }
  for (auto& [id, mc] : all) {
    if (mc->link.fd() >= 0) {
      mc->link.SendMessage(LinkMessageBytes(api::ExchangeKind::kClose, "metaroced stopping"),
                           absl::Now() + kLinkIo)
          .IgnoreError();
    }
    mc->conn->Abort().IgnoreError();
  }
  all.clear();  // connections leave the engine before the context does
  if (epoll_fd_ >= 0) {
    close(epoll_fd_);
    epoll_fd_ = -1;
  }
}

void ConnectionManager::SetLimits(const ConnectionLimits& limits) {
  absl::MutexLock lock(&mu_);
  options_.limits = limits;
}

void ConnectionManager::SetTuning(const core::ConnectionConfig& tuning) {
  absl::MutexLock lock(&mu_);
  options_.tuning = tuning;
}

size_t ConnectionManager::size() const {
  absl::MutexLock lock(&mu_);
  return table_.size();
}

uint64_t ConnectionManager::paths_held() const {
  absl::MutexLock lock(&mu_);
  uint64_t n = 0;
  for (const auto& [id, mc] : table_) n += mc->paths;
  return n;
}

api::Connection* ConnectionManager::Find(uint32_t id) {
  absl::MutexLock lock(&mu_);
  auto it = table_.find(id);
  return it == table_.end() ? nullptr : it->second->conn.get();
}

absl::StatusOr<Json> ConnectionManager::Add(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"peer", "paths", "planes", "profile"}); !s.ok()) return s;
  absl::StatusOr<std::string> peer = params.GetString("peer");
  if (!peer.ok()) return peer.status();
  absl::StatusOr<uint64_t> paths = params.GetUintOr("paths", 8);
  if (!paths.ok()) return paths.status();
  absl::StatusOr<std::string> profile_name = params.GetStringOr("profile", "metaroce");
  if (!profile_name.ok()) return profile_name.status();
  absl::StatusOr<core::TransportProfile> profile = ProfileNamed(*profile_name);
  if (!profile.ok()) return profile.status();
  if (const Json* planes = params.Find("planes"); planes != nullptr && !planes->is_null()) {
    // Connections spray over every plane of the daemon (path i on plane i % planes): a subset
    // would need a per-connection plane map in the engine.
    const int n = context_.engine().planes();
    bool all = planes->is_array() && static_cast<int>(planes->size()) == n;
    for (int i = 0; all && i < n; ++i) all = planes->array()[i].AsUint() == uint64_t(i);
    if (!all) {
      return absl::UnimplementedError(absl::StrCat(
          "planes: connections use every plane of the daemon (0..", n - 1,
          "); a subset is not supported yet"));
    }
  }
  std::string host;
  uint16_t port = 0;
  api::ConnectOptions o;
  {
    absl::MutexLock lock(&mu_);
    if (table_.size() + adding_ >= options_.limits.max_connections) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "connection limit reached: max_connections ", options_.limits.max_connections,
          adding_ > 0 ? absl::StrCat(" (", adding_, " being set up)") : ""));
    }
    if (*paths < 1 || *paths > options_.limits.max_paths) {
      return absl::ResourceExhaustedError(absl::StrCat("paths ", *paths, " is outside 1..",
                                                       options_.limits.max_paths,
                                                       " (max_paths)"));
    }
    if (absl::Status s = SplitHostPort(*peer, options_.control_port, &host, &port); !s.ok()) {
      return s;
    }
    o.tuning = options_.tuning;
    o.timeout = options_.exchange_timeout;
    ++adding_;
  }
  // Counted until it is in the table (Insert) or has failed.
  absl::Cleanup added = [this] {
    absl::MutexLock lock(&mu_);
    --adding_;
  };
  o.send_cq = o.recv_cq = cq_.get();
  o.max_send_queue = o.max_recv_queue = kDaemonConnectionQueueDepth;
  o.path_events_to_observer = true;  // the path manager reads them all at once
  o.path_count = static_cast<uint16_t>(*paths);
  o.profile = *profile;
  o.keep_exchange_socket = true;
  o.private_data = DaemonPrivateData();
  absl::StatusOr<std::unique_ptr<api::Connection>> conn = context_.Connect(host, port, o);
  if (!conn.ok()) {
    const absl::StatusCode code = conn.status().code() == absl::StatusCode::kFailedPrecondition
                                      ? absl::StatusCode::kFailedPrecondition
                                      : absl::StatusCode::kUnavailable;
    return absl::Status(code, absl::StrCat("peer ", host, ":", port, ": ",
                                           conn.status().message()));
  }
  if (absl::Status s = CheckPeerIsDaemon((*conn)->peer_private_data()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("peer ", host, ":", port, ": ", s.message()));
  }
  api::ExchangeSocket link = (*conn)->TakeExchangeSocket();
  Json out = Json::MakeObject();
  out["conn"] = Insert(*std::move(conn), host, std::move(link));
  return out;
}

Json ConnectionManager::Insert(std::unique_ptr<api::Connection> conn, std::string peer,
                              api::ExchangeSocket link) {
  auto mc = std::make_unique<ManagedConnection>();
  mc->id = conn->local_id();
  mc->peer = std::move(peer);
  mc->peer_id = conn->remote_id();
  mc->paths = conn->local_parameters().path_count;
  for (size_t p = 0; p < conn->local_parameters().plane_addresses.size(); ++p) {
    mc->planes.push_back(static_cast<int>(p));
  }
  mc->profile = std::string(conn->local_parameters().profile.Name());
  mc->created_s = absl::ToDoubleSeconds(absl::Now() - options_.started);
  mc->link = std::move(link);
  mc->peer_daemon = PeerDaemonKey(mc->peer, conn->peer_private_data());
  mc->last_heard = absl::Now();
  mc->conn = std::move(conn);
  Json described = ConnectionJson(*mc, mc->conn->Stats());
  options_.log(absl::StrCat("connection ", mc->id, " to ", mc->peer, " (its ", mc->peer_id,
                            "), ", mc->paths, " paths, ", mc->profile));
  absl::MutexLock lock(&mu_);
  ManagedConnection& m = *mc;
  table_[m.id] = std::move(mc);
  if (m.link.fd() >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = m.id;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, m.link.fd(), &ev) != 0) {
      MarkGone(m, absl::StrCat("its link cannot be watched (epoll: ", std::strerror(errno), ")"));
    } else if (m.peer_daemon.empty()) {
      own_heartbeats_.insert(m.id);
    } else {
      Peer& peer = peers_[m.peer_daemon];
      peer.last_heard = m.last_heard;  // the exchange just now is word from it
      peer.links.insert(m.id);
    }
  }
  return described;
}

void ConnectionManager::ForgetLink(ManagedConnection& mc) {
  if (mc.link.fd() < 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, mc.link.fd(), nullptr);
  if (mc.peer_daemon.empty()) {
    own_heartbeats_.erase(mc.id);
    return;
  }
  auto it = peers_.find(mc.peer_daemon);
  if (it == peers_.end()) return;
  it->second.links.erase(mc.id);
  if (it->second.links.empty()) peers_.erase(it);
}

void ConnectionManager::DropLink(ManagedConnection& mc) {
  ForgetLink(mc);
  mc.link = api::ExchangeSocket();
}

absl::StatusOr<Json> ConnectionManager::Delete(const Json& params) {
  if (absl::Status s = OnlyKeys(params, {"id"}); !s.ok()) return s;
  absl::StatusOr<uint64_t> id = params.GetUint("id");
  if (!id.ok()) return id.status();
  std::unique_ptr<ManagedConnection> mc;
  {
    absl::MutexLock lock(&mu_);
    auto it = table_.find(static_cast<uint32_t>(*id));
    if (*id > UINT32_MAX || it == table_.end()) {
      return absl::NotFoundError(absl::StrCat("no connection ", *id));
    }
    ForgetLink(*it->second);  // its socket stays open for the goodbye
    mc = std::move(it->second);
    table_.erase(it);
  }
  if (mc->link.fd() >= 0) {
    mc->link.SendMessage(LinkMessageBytes(api::ExchangeKind::kClose, "deleted"),
                         absl::Now() + kLinkIo)
        .IgnoreError();
  }
  mc->conn->Abort().IgnoreError();  // outstanding work completes with WR_FLUSH_ERR
  options_.log(absl::StrCat("connection ", mc->id, " to ", mc->peer, " deleted"));
  return Json::MakeObject();
}

absl::StatusOr<Json> ConnectionManager::Show(const Json& params) {
  return ShowConnectionPage(
      params, [this](std::string_view peer) { return Ids(peer); },
      [this](uint32_t id) { return Describe(id); });
}

std::vector<uint32_t> ConnectionManager::Ids(std::string_view peer) const {
  std::vector<uint32_t> ids;
  absl::MutexLock lock(&mu_);
  ids.reserve(table_.size());
  for (const auto& [id, mc] : table_) {
    if (peer.empty() || mc->peer == peer) ids.push_back(id);
  }
  return ids;  // the table is ordered by id
}

std::optional<Json> ConnectionManager::Describe(uint32_t id) {
  absl::MutexLock lock(&mu_);
  auto it = table_.find(id);
  if (it == table_.end()) return std::nullopt;
  const ManagedConnection& mc = *it->second;
  return ConnectionJson(mc, mc.conn != nullptr
                                ? mc.conn->Stats()
                                : absl::StatusOr<api::ConnectionStats>(
                                      absl::FailedPreconditionError("no connection")));
}

Json ConnectionJson(const ManagedConnection& mc, const absl::StatusOr<api::ConnectionStats>& st) {
  Json j = Json::MakeObject();
  j["id"] = mc.id;
  j["peer"] = mc.peer;
  j["peer_id"] = mc.peer_id;
  const bool error = !st.ok() || st->state == core::Connection::State::kError;
  j["state"] = error ? "error" : "ready";
  const core::WcStatus status = st.ok() ? st->error_status : core::WcStatus::kGeneralErr;
  j["error_status"] = static_cast<int>(status);
  j["error_status_name"] = core::StatusName(status);
  if (!mc.gone.empty()) j["error_reason"] = mc.gone;
  j["paths"] = mc.paths;
  Json& planes = j["planes"] = Json::MakeArray();
  for (int p : mc.planes) planes.Push(p);
  j["profile"] = mc.profile;
  j["owner"] = "daemon";
  j["created_s"] = mc.created_s;
  j["counters"] = st.ok() ? api::CountersJson(st->counters) : Json::MakeObject();
  return j;
}

// ---- peer daemons ----

absl::StatusOr<api::ConnectOptions> ConnectionManager::Decide(
    const api::ConnectionParameters& request) {
  if (absl::Status s = CheckPeerIsDaemon(request.private_data); !s.ok()) return s;
  api::ConnectOptions o;
  absl::MutexLock lock(&mu_);
  if (table_.size() >= options_.limits.max_connections) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "connection limit reached: max_connections ", options_.limits.max_connections));
  }
  if (request.path_count > options_.limits.max_paths) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "paths ", request.path_count, " is above max_paths ", options_.limits.max_paths));
  }
  o.send_cq = o.recv_cq = cq_.get();
  o.max_send_queue = o.max_recv_queue = kDaemonConnectionQueueDepth;
  o.path_events_to_observer = true;
  o.path_count = request.path_count;
  o.profile = request.profile;
  o.ordered_completion = request.ordered_completion;
  o.tuning = options_.tuning;
  o.timeout = options_.exchange_timeout;
  o.keep_exchange_socket = true;
  o.private_data = DaemonPrivateData();
  return o;
}

void ConnectionManager::ListenLoop() {
  while (!stop_.load()) {
    absl::StatusOr<bool> pending = listener_->WaitForClient(absl::Milliseconds(100));
    if (!pending.ok() || !*pending) continue;
    absl::Duration timeout;
    {
      absl::MutexLock lock(&mu_);
      timeout = options_.exchange_timeout;
    }
    absl::StatusOr<std::unique_ptr<api::Connection>> conn = listener_->Accept(
        [this](const api::ConnectionParameters& r) { return Decide(r); }, timeout);
    if (!conn.ok()) {
      options_.log(absl::StrCat("refused a peer daemon's connection: ", conn.status().message()));
      continue;
    }
    api::ExchangeSocket link = (*conn)->TakeExchangeSocket();
    const std::string peer = AddressOf(link.peer_name());
    Insert(*std::move(conn), peer, std::move(link));
  }
}

void ConnectionManager::MarkGone(ManagedConnection& mc, std::string why) {
  if (!mc.gone.empty()) return;
  mc.gone = std::move(why);
  DropLink(mc);
  mc.conn->Abort().IgnoreError();
  options_.log(absl::StrCat("connection ", mc.id, " to ", mc.peer, ": ", mc.gone,
                            "; outstanding work flushed"));
}

bool ConnectionManager::Heartbeat(ManagedConnection& mc,
                                  std::vector<std::unique_ptr<ManagedConnection>>& closed) {
  if (mc.link.fd() < 0) return false;
  if (mc.link.SendMessage(LinkMessageBytes(api::ExchangeKind::kKeepalive), absl::Now() + kLinkIo)
          .ok()) {
    return true;
  }
  // The peer closed its end: after a goodbye still unread (conn.del right after conn.add races
  // our heartbeat), or without one (it is gone).
  if (ReadLink(mc) == LinkMessage::kGoodbye) {
    auto it = table_.find(mc.id);
    closed.push_back(std::move(it->second));
    table_.erase(it);
    return false;
  }
  MarkGone(mc, "peer daemon unreachable (it closed the connection's link)");
  return false;
}

std::vector<std::unique_ptr<ManagedConnection>> ConnectionManager::SendHeartbeats() {
  std::vector<std::unique_ptr<ManagedConnection>> closed;
  // One per peer daemon, on the link after the last one used (any of them, if that fails).
  std::vector<std::string> keys;
  keys.reserve(peers_.size());
  for (const auto& [key, peer] : peers_) keys.push_back(key);
  for (const std::string& key : keys) {
    for (size_t attempts = 0;; ++attempts) {
      auto p = peers_.find(key);  // gone with its last link
      if (p == peers_.end() || attempts >= p->second.links.size()) break;
      Peer& peer = p->second;
      auto next = peer.links.upper_bound(peer.last_beat);
      if (next == peer.links.end()) next = peer.links.begin();
      peer.last_beat = *next;
      auto it = table_.find(*next);
      if (it != table_.end() && Heartbeat(*it->second, closed)) break;
    }
  }
  // One per connection whose peer does not share them.
  const std::vector<uint32_t> own(own_heartbeats_.begin(), own_heartbeats_.end());
  for (uint32_t id : own) {
    if (auto it = table_.find(id); it != table_.end()) Heartbeat(*it->second, closed);
  }
  return closed;
}

void ConnectionManager::FailSilentPeers(absl::Time now) {
  const absl::Duration dead = options_.dead_peer_timeout;
  std::vector<std::pair<uint32_t, absl::Duration>> silent;
  for (const auto& [key, peer] : peers_) {
    if (now - peer.last_heard <= dead) continue;
    for (uint32_t id : peer.links) silent.emplace_back(id, now - peer.last_heard);
  }
  for (uint32_t id : own_heartbeats_) {
    const ManagedConnection& mc = *table_.at(id);
    if (now - mc.last_heard > dead) silent.emplace_back(id, now - mc.last_heard);
  }
  for (const auto& [id, quiet] : silent) {
    MarkGone(*table_.at(id), absl::StrCat("no word from the peer daemon for ",
                                          absl::FormatDuration(quiet)));
  }
}

ConnectionManager::LinkMessage ConnectionManager::ReadLink(ManagedConnection& mc) {
  absl::StatusOr<std::vector<std::byte>> m = mc.link.ReceiveMessage(absl::Now() + kLinkIo);
  if (!m.ok()) {
    MarkGone(mc, absl::StrCat("peer daemon gone (", m.status().message(), ")"));
    return LinkMessage::kGone;
  }
  const std::string_view text(reinterpret_cast<const char*>(m->data()), m->size());
  const absl::StatusOr<api::ExchangeMessage> decoded = api::DecodeExchange(*m);
  const bool close = decoded.ok() ? decoded->kind == api::ExchangeKind::kClose
                                  : text == kLegacyGoodbye;
  if (!close) {
    // Word from the peer daemon: for this connection, or for all that share its liveness.
    mc.last_heard = absl::Now();
    if (auto p = peers_.find(mc.peer_daemon); p != peers_.end()) p->second.last_heard = mc.last_heard;
    return LinkMessage::kHeartbeat;
  }
  // The peer deleted its side: ours goes too.
  options_.log(absl::StrCat("connection ", mc.id, " to ", mc.peer, " deleted by the peer"));
  DropLink(mc);
  mc.conn->Abort().IgnoreError();
  return LinkMessage::kGoodbye;
}

void ConnectionManager::ServeLinks(absl::Duration wait) {
  epoll_event ready[256];
  const int n = epoll_wait(epoll_fd_, ready, 256, static_cast<int>(absl::ToInt64Milliseconds(wait)));
  if (n <= 0) return;
  std::vector<std::unique_ptr<ManagedConnection>> closed;
  {
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < n; ++i) {
      auto it = table_.find(ready[i].data.u32);
      if (it == table_.end() || it->second->link.fd() < 0) continue;  // deleted, or gone, meanwhile
      if (ReadLink(*it->second) == LinkMessage::kGoodbye) {
        closed.push_back(std::move(it->second));
        table_.erase(it);
      }
    }
  }
  closed.clear();  // destroyed outside the lock
}

void ConnectionManager::LivenessLoop() {
  absl::Time next_beat = absl::Now();
  while (!stop_.load()) {
    absl::Duration beat;
    std::vector<std::unique_ptr<ManagedConnection>> closed;
    {
      absl::MutexLock lock(&mu_);
      beat = options_.heartbeat;
      const absl::Time now = absl::Now();
      if (now >= next_beat) {
        closed = SendHeartbeats();
        next_beat = now + beat;
      }
      FailSilentPeers(now);
    }
    closed.clear();  // destroyed outside the lock
    ServeLinks(std::min(beat, absl::Milliseconds(50)));
  }
}

}  // namespace metaroce::daemon
