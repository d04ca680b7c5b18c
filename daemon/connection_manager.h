// Connections between daemons: `conn.add`, `conn.del`, `conn.show` (docs/control-protocol.md).
//
// Each daemon listens on its TCP control port for peer daemons. conn.add connects to the peer's
// control port and runs lib/api's parameter exchange (addresses, paths and their initial source
// ports, planes, MTU, initial PSNs, tokens, and, in the private data, the daemon's identity and
// the memory regions it advertises); the peer's listener thread accepts it. Both sides then hold
// the connection in their tables under their own ids. The TCP socket of the exchange is kept
// open as the connection's *link*: a peer daemon that goes away (EOF or reset on the link, or no
// heartbeat for `dead_peer_timeout`) fails the connection, which flushes its outstanding work
// with WR_FLUSH_ERR; conn.del sends a goodbye on it so that the peer tears its side down too.
// On the link, a heartbeat is the set-up protocol's KEEPALIVE and a goodbye its CLOSE
// (docs/spec/setup.md §8).
//
// Liveness is a property of the peer daemon, not of each connection, and what it costs must not
// grow with the connections a daemon holds (thousands per host, idle): two daemons that both say
// so in their exchange (`"liveness": "per_peer"` in the private data) send one heartbeat per
// heartbeat period per peer, on one of their links in turn, and anything heard on any link of the
// peer counts for all of them; a peer silent for dead_peer_timeout fails all its connections at
// once. With a peer that does not say so (an older daemon), a connection keeps heartbeats of its
// own, as before. Links are read when the kernel says they are readable (epoll), so an idle link
// costs nothing between heartbeats.
//
// Limits (max connections, max paths per connection) refuse with resource_exhausted and say
// which limit and its value.
//
// Threading: every public method is safe from any thread (the control server's thread calls the
// handlers; the listener and liveness threads are internal). Stop() joins them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/api/context.h"
#include "lib/control/json.h"

namespace metaroce::daemon {

struct ConnectionLimits {
  uint32_t max_connections = 4096;
  uint16_t max_paths = 256;
};

struct ConnectionManagerOptions {
  uint16_t control_port = 4793;           // TCP, for peer daemons
  std::string bind_address = "::";  // every address, IPv4 and IPv6
  ConnectionLimits limits;
  absl::Duration exchange_timeout = absl::Seconds(5);
  absl::Duration heartbeat = absl::Milliseconds(500);
  absl::Duration dead_peer_timeout = absl::Seconds(3);
  absl::Time started = absl::Now();       // for created_s
  // Protocol tunables of every connection made from now on (PathPolicy::Apply over HostTuning).
  core::ConnectionConfig tuning = api::HostTuning();
  // One line per connection made, refused, lost or torn down (the daemon's log).
  std::function<void(std::string_view)> log = [](std::string_view) {};
};

// One connection the daemon holds.
struct ManagedConnection {
  uint32_t id = 0;
  std::string peer;                       // the peer daemon's address (no port)
  uint32_t peer_id = 0;
  uint16_t paths = 0;
  std::vector<int> planes;
  std::string profile;
  double created_s = 0;
  std::unique_ptr<api::Connection> conn;
  api::ExchangeSocket link;               // the exchange's TCP socket, kept: liveness, goodbye
  // The peer daemon this connection's liveness is shared with (ConnectionManager::Peer), or
  // empty: its own heartbeats (a peer that does not share them).
  std::string peer_daemon;
  absl::Time last_heard;                  // own heartbeats only
  std::string gone;                       // why the peer is considered gone (empty: it is not)
};

// conn.show's CONN object of a connection (docs/control-protocol.md) from what the daemon keeps
// and the connection's stats (an error: the connection is shown in error).
control::Json ConnectionJson(const ManagedConnection& mc,
                             const absl::StatusOr<api::ConnectionStats>& stats);

class ConnectionManager {
 public:
  ConnectionManager(api::Context& context, ConnectionManagerOptions options);
  ~ConnectionManager();  // Stop()
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Opens the control port and starts the listener and liveness threads. FailedPrecondition
  // naming the port when it is taken.
  absl::Status Start();
  // Tears every connection down (goodbye to each peer; outstanding work flushed), joins threads.
  void Stop();

  // Control methods: params and results as docs/control-protocol.md.
  absl::StatusOr<control::Json> Add(const control::Json& params);
  absl::StatusOr<control::Json> Delete(const control::Json& params);
  // conn.show over the daemon's own connections (listing.h: paged, in id order).
  absl::StatusOr<control::Json> Show(const control::Json& params);
  // The connections' ids in increasing order; those to `peer` only when it is not empty.
  std::vector<uint32_t> Ids(std::string_view peer) const;
  // conn.show's CONN object of connection `id` (ConnectionJson), or nullopt when it is not ours.
  std::optional<control::Json> Describe(uint32_t id);

  // Limits may change on reload (SIGHUP); connections above a lowered limit stay.
  void SetLimits(const ConnectionLimits& limits);
  // New tunables (reload): they apply to connections made from then on.
  void SetTuning(const core::ConnectionConfig& tuning);
  size_t size() const;
  // Paths of every connection held (their path counts added up).
  uint64_t paths_held() const;
  uint16_t control_port() const { return bound_port_; }

  // For the path manager: runs `fn` on each connection under the table's lock.
  template <typename Fn>
  void ForEach(Fn fn) {
    absl::MutexLock lock(&mu_);
    for (auto& [id, mc] : table_) fn(*mc);
  }
  // The connection with this id, or nullptr; valid while the caller holds no expectation past
  // the next Delete (the control server serializes handlers).
  api::Connection* Find(uint32_t id);

 private:
  void ListenLoop();
  void LivenessLoop();
  absl::StatusOr<api::ConnectOptions> Decide(const api::ConnectionParameters& request);
  // Records a connection made by either side with its link (the kept exchange socket).
  control::Json Insert(std::unique_ptr<api::Connection> conn, std::string peer,
                       api::ExchangeSocket link);
  // The peer is gone: abort (outstanding work flushes) and close the link; the entry stays, in
  // error, until conn.del.
  void MarkGone(ManagedConnection& mc, std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The link leaves the liveness bookkeeping (epoll, its peer's or the own-heartbeat set); the
  // socket stays open (a goodbye may still be sent on it). DropLink also closes it.
  void ForgetLink(ManagedConnection& mc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLink(ManagedConnection& mc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the links the kernel says are readable, waiting up to `wait` for one.
  void ServeLinks(absl::Duration wait);
  // Sends the period's heartbeats: one per peer daemon (on its links in turn) and one per
  // connection with heartbeats of its own; returns the connections whose peer said goodbye
  // meanwhile (out of the table, to be destroyed outside the lock).
  std::vector<std::unique_ptr<ManagedConnection>> SendHeartbeats()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A heartbeat on mc's link. False when the link failed (mc is then gone, or in `closed` after
  // a goodbye, erased from the table).
  bool Heartbeat(ManagedConnection& mc, std::vector<std::unique_ptr<ManagedConnection>>& closed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the connections of every peer (and each connection with its own heartbeats) silent for
  // longer than dead_peer_timeout.
  void FailSilentPeers(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  enum class LinkMessage { kHeartbeat, kGoodbye, kGone };
  // Reads one message from a readable link: a heartbeat (the peer is alive), a goodbye (the
  // connection is aborted; the caller removes it) or a failure (MarkGone).
  LinkMessage ReadLink(ManagedConnection& mc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A peer daemon whose heartbeats are shared by its connections' links.
  struct Peer {
    absl::Time last_heard;
    std::set<uint32_t> links;  // connections with a live link to it
    uint32_t last_beat = 0;    // the link of the last heartbeat: the next goes on the one after
  };

  api::Context& context_;
  ConnectionManagerOptions options_;
  uint16_t bound_port_ = 0;
  int epoll_fd_ = -1;  // every live link, data = connection id
  mutable absl::Mutex mu_;
  std::map<uint32_t, std::unique_ptr<ManagedConnection>> table_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);  // by ManagedConnection::peer_daemon
  std::set<uint32_t> own_heartbeats_ ABSL_GUARDED_BY(mu_);  // live links with their own beats
  size_t adding_ ABSL_GUARDED_BY(mu_) = 0;  // conn.add exchanges under way (they run in parallel)
  std::unique_ptr<api::CompletionQueue> cq_;  // shared: daemon-made connections post no work
  std::unique_ptr<api::Listener> listener_;
  std::atomic<bool> stop_{false};
  std::thread listen_thread_, liveness_thread_;
};

}  // namespace metaroce::daemon
