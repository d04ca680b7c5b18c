// Applications attached to metaroced: the daemon's side of Context::Attach (lib/api/context.h;
// the protocol: docs/control-protocol.md, "Applications").
//
// A session is one control connection on which `app.attach` was called. Through it the
// application has the daemon make, in the daemon's engine, what an embedded context makes in its
// own: memory blocks (mem.alloc) and regions in them (mr.reg), completion queues (cq.create) and
// connections (qp.prepare, qp.create), and asks for stats, rotations and aborts. Every object
// belongs to its session: another session cannot name it (ids are looked up in the caller's
// session only), and when the session's connection closes (the application exited or crashed)
// Close() destroys them all: connections aborted and removed from the engine, regions
// deregistered from every shard, doorbells detached, shared memory released.
//
// Shared memory: everything shared with an application is a memfd this class creates, sizes and
// seals (lib/api/shared_memory.h) before sending it, and maps MAP_SHARED for as long as the
// engine may touch it: a doorbell block (one engine::Doorbell per worker), one block per
// completion queue and per connection (the rings: lib/engine/channels.h), and the memory blocks
// that hold registered regions. The blocks and every connection's core state count against
// [limits] max_memory_bytes (all sessions together); connections (with the daemon's own) against
// max_connections, and a connection's paths against max_paths.
//
// What a hostile application can and cannot cause:
//   - it cannot make the daemon fault: it never supplies a descriptor the daemon maps; what it
//     writes into shared blocks is checked where read (spsc_ring.h, channels.h, doorbell.h); a
//     memory block it frees, or that its session leaves behind, is first replaced in the
//     daemon's address space by anonymous memory, and unmapped only once every connection that
//     existed then is gone (the core keeps pointers into registered memory for outstanding
//     work, which a freed or deregistered region may still have);
//   - it cannot exceed the limits, name another session's objects, create a connection under a
//     connection id it did not get from qp.prepare, use plane addresses, an MTU or a UDP port
//     that are not the daemon's, or choose its own protocol tunables (the daemon's path policy
//     applies to every connection, whatever ConnectOptions::tuning said);
//   - it cannot reach another session's memory, nor can its peers: every session has a
//     protection domain of its own (Engine::AllocateProtectionDomain: never the default domain
//     of the daemon's own connections and regions, never given twice while the daemon lives),
//     its regions are registered and its connections created in it, and the core resolves a
//     connection's keys in its domain only (docs/spec/messages-and-memory.md [M7]): another
//     session's lkey in a work request is refused at post (LOC_PROT_ERR), another session's rkey
//     in a peer's Write is NAKed (REM_ACCESS_ERR at the peer), exactly as keys that do not
//     exist. Keys are drawn at random by the engine (Engine::RegisterMappedMemory), so a peer
//     cannot guess the other regions of the session it talks to either;
//   - it CAN address its traffic to any peer address it likes (as any unprivileged process can
//     send UDP).
//
// The operator (mrctl, through the daemon's handlers) sees and manages every application
// connection as it does the daemon's own: stats and paths (Snapshot, RequestRotation), path
// events (PollPathEvents: copies the engine makes for the daemon, ObservePathEvents::kYes, while
// the application keeps consuming its own event ring), and conn.del (DeleteByOperator: the
// connection is aborted, its outstanding work completes with WR_FLUSH_ERR in the application's
// queues as with ibv_modify_qp(ERR), and it stays the application's, listed with
// `deleted_by_operator`, until the application destroys it with qp.destroy or detaches).
//
// Threading: every public method is safe from any thread (one mutex; handlers run one at a time
// on the control server's thread anyway; engine control calls are made under it and never call
// back). Errors: absl::Status naming the fix; Close() logs one line per session.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/control_server.h"
#include "lib/api/context.h"
#include "lib/api/shared_memory.h"
#include "lib/control/json.h"
#include "lib/core/config.h"
#include "lib/core/path_state.h"

namespace metaroce::daemon {

struct AppLimits {
  uint32_t max_connections = 4096;  // with the daemon's own connections (other_connections)
  uint16_t max_paths = 256;
  uint64_t max_memory_bytes = uint64_t{1} << 30;  // every session's shared memory together
};

struct AppSessionsOptions {
  AppLimits limits;
  // Tunables of every application connection (PathPolicy::Apply over HostTuning); its
  // rotate_port_lo..hi is where applications draw their paths' initial source ports.
  core::ConnectionConfig tuning = api::HostTuning();
  absl::Time started = absl::Now();  // for created_s
  // Connections the daemon holds besides the applications' (conn.add): they count against
  // max_connections too.
  std::function<size_t()> other_connections = [] { return size_t{0}; };
  // One line per session closed (the daemon's log).
  std::function<void(std::string_view)> log = [](std::string_view) {};
};

class AppSessions {
 public:
  // `context` is the daemon's embedded, threaded Context; it must outlive this object.
  AppSessions(api::Context& context, AppSessionsOptions options);
  ~AppSessions();  // CloseAll()
  AppSessions(const AppSessions&) = delete;
  AppSessions& operator=(const AppSessions&) = delete;

  // Registers the application methods on `server` and Close() as its disconnect hook. Before
  // server.Start().
  void Serve(ControlServer& server);

  // The methods (params and results as docs/control-protocol.md); `client` names the session.
  absl::StatusOr<control::Json> Attach(const control::Json& params, const ClientInfo& client);
  absl::StatusOr<control::Json> AllocateMemory(const control::Json& params,
                                               const ClientInfo& client);
  absl::StatusOr<control::Json> FreeMemory(const control::Json& params, const ClientInfo& client);
  absl::StatusOr<control::Json> RegisterRegion(const control::Json& params,
                                               const ClientInfo& client);
  absl::StatusOr<control::Json> DeregisterRegion(const control::Json& params,
                                                 const ClientInfo& client);
  absl::StatusOr<control::Json> CreateCompletionQueue(const control::Json& params,
                                                      const ClientInfo& client);
  absl::StatusOr<control::Json> DestroyCompletionQueue(const control::Json& params,
                                                       const ClientInfo& client);
  absl::StatusOr<control::Json> PrepareConnection(const control::Json& params,
                                                  const ClientInfo& client);
  absl::StatusOr<control::Json> CreateConnection(const control::Json& params,
                                                 const ClientInfo& client);
  absl::StatusOr<control::Json> DestroyConnection(const control::Json& params,
                                                  const ClientInfo& client);
  absl::StatusOr<control::Json> ConnectionStats(const control::Json& params,
                                                const ClientInfo& client);
  absl::StatusOr<control::Json> RotatePath(const control::Json& params, const ClientInfo& client);
  absl::StatusOr<control::Json> AbortConnection(const control::Json& params,
                                                const ClientInfo& client);

  // The session of control connection `client_id` ends: everything it made goes (no-op when it
  // never attached).
  void Close(uint64_t client_id);
  // Every session ends (daemon stop).
  void CloseAll();

  // conn.show's entries for application connections (CONN objects, owner {pid, name, session}),
  // filtered as conn.show filters.
  std::vector<control::Json> Describe(std::optional<uint32_t> id, std::string_view peer);
  // conn.show by pages (listing.h): the application connections' ids in increasing order
  // (those to `peer` only when it is not empty), and one connection's CONN object (nullopt: not
  // an application connection).
  std::vector<uint32_t> Ids(std::string_view peer) const;
  std::optional<control::Json> Describe(uint32_t id);
  bool HasConnection(uint32_t id) const;

  // The operator's view of application connections, whatever session owns them. NotFound
  // ("no connection ID") for an id that is not an application connection.
  absl::StatusOr<api::ConnectionStats> Snapshot(uint32_t id);
  absl::Status RequestRotation(uint32_t id, uint16_t path_id);
  // conn.del: aborts the connection (its outstanding work completes with WR_FLUSH_ERR in the
  // application's queues) and marks it deleted by the operator; the application still owns it
  // and destroys it (qp.destroy). Deleting it again does nothing more.
  absl::Status DeleteByOperator(uint32_t id);
  // Moves up to out.size() path events of application connections into `out` (copies: the
  // applications still get theirs; Engine::PollObservedEvents).
  size_t PollPathEvents(std::span<core::PathEvent> out);
  // Adds every application connection's counters to `sum` (ConnectionCounters under Soft-RoCE
  // names, api::AddCounters).
  void AddCounters(control::Json& sum);

  // Reload: new limits and tunables apply to what is made from then on.
  void SetLimits(const AppLimits& limits);
  void SetTuning(const core::ConnectionConfig& tuning);

  // daemon.show: {sessions, connections, memory_bytes, retired_blocks}.
  control::Json Summary() const;
  size_t sessions() const;
  size_t connections() const;
  // Paths of every application connection (their path counts added up).
  uint64_t paths_held() const;
  uint64_t memory_bytes() const;  // shared memory counted against max_memory_bytes

 private:
  struct Session;
  struct MemoryBlock;
  struct Region;
  struct CompletionQueue;
  struct AppConnection;
  // A memory block no session can use any more, mapped (as anonymous memory) until every
  // connection that existed when it was released is gone.
  struct RetiredBlock {
    std::shared_ptr<api::SharedMapping> mapping;
    uint64_t last_serial = 0;  // the newest connection that may still point into it
  };

  absl::StatusOr<Session*> SessionOf(const ClientInfo& client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The preamble every session handler shares, once: takes mu_, finds the caller's session
  // (FailedPrecondition when the control connection is not attached) and runs
  // `handler(Session&)` under the lock, returning what it returns.
  template <typename Handler>
  absl::StatusOr<control::Json> InSession(const ClientInfo& client, Handler&& handler)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a handler of one of the session's connections, named by params' `conn_id`
  // (ConnectionOf's refusals): runs `handler(Session&, AppConnection&)` under the lock.
  template <typename Handler>
  absl::StatusOr<control::Json> OnConnection(const control::Json& params,
                                             const ClientInfo& client, Handler&& handler)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A fresh sealed block of `bytes` (rounded up to pages) counted against max_memory_bytes,
  // mapped here; its descriptor goes into `client.reply_fds`. `what` names it in refusals.
  absl::StatusOr<std::shared_ptr<api::SharedMapping>> NewSharedBlock(const char* memfd_name,
                                                                     std::string_view what,
                                                                     size_t bytes,
                                                                     const ClientInfo& client,
                                                                     Session& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Charge(Session& session, uint64_t bytes, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Refund(Session& session, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<api::ConnectionParameters> DecodeRequest(const control::Json& params,
                                                          std::string_view key);
  absl::Status CheckOurs(const Session& session, const api::ConnectionParameters& ours) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLimits(const api::ConnectionParameters& ours) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AppConnection*> ConnectionOf(Session& session, const control::Json& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The connection `id` of any session, with its session; NotFound naming the id.
  absl::StatusOr<std::pair<Session*, AppConnection*>> AnyConnection(uint32_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveConnection(Session& session, uint32_t conn_id, bool abort)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveRegion(Session& session, uint32_t lkey) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireBlock(Session& session, uint64_t mem) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseRetiredBlocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseLocked(uint64_t client_id, bool log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  control::Json DescribeConnection(const Session& session, const AppConnection& c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t ConnectionCountLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  api::Context& context_;
  engine::Engine& engine_;
  std::vector<io::IpAddress> addresses_;  // the daemon's, per plane

  mutable absl::Mutex mu_;
  AppSessionsOptions options_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);  // by client id
  uint64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t shared_blocks_ ABSL_GUARDED_BY(mu_) = 0;  // mapped for sessions now (retired included)
  // Every application connection gets a serial; live ones are listed (RetiredBlock).
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> live_serials_ ABSL_GUARDED_BY(mu_);
  std::deque<RetiredBlock> retired_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaroce::daemon
