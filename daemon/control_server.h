// The daemon's control socket: a Unix stream socket speaking the control protocol
// (docs/control-protocol.md, codec lib/control/protocol.h), dispatching each request to the
// handler registered for its method.
//
// Socket: created at options.path (the parent directory is made, mode 0755, when missing), mode
// 0660, group options.group when set. A socket file left by a daemon that died is replaced only
// after a connect() to it failed; when something still listens there, Start() refuses
// ("another metaroced is running (PATH)"). Stop() unlinks the file (if it is still ours).
//
// Who may connect: the peer's credentials are read with SO_PEERCRED on accept and checked by
// CheckPeer (uid 0, the daemon's uid, members of the socket's group, supplementary groups
// included); anyone else gets one `permission_denied` error line and is closed before a request
// is read. Beyond options.max_clients, a new client gets `resource_exhausted` and is closed.
//
// Requests: one JSON line each (lib/control/protocol.h); blank lines are ignored. Malformed
// requests get `invalid_argument` with the parser's message and the connection stays open; an
// unknown method gets `unimplemented`; a line over control::kMaxMessageBytes gets
// `resource_exhausted` and the connection is closed after it. File descriptors sent with a
// request (SCM_RIGHTS) reach its handler in ClientInfo::fds; those the handler does not take are
// closed when it returns. Responses are buffered: a client whose unread responses exceed
// options.max_output_bytes is disconnected. A client that closes its sending side still gets the
// responses to what it sent.
//
// Threading: one server thread runs the poll loop and the handlers registered to run on it
// (HandlerThread::kServer), one at a time (they need no locking against each other). A handler
// that waits on the network (conn.add runs a TCP exchange of up to exchange_timeout) is
// registered with HandlerThread::kOwn: it runs on a thread of its own while the server keeps
// serving every other client; its client's later requests wait, unread, until its response is
// queued, so each client gets its answers in request order either way. At most
// options.max_own_thread_requests run at once; beyond, a request gets `resource_exhausted`.
// Register/Unregister are safe from any thread; Start/Stop from one owner thread. Stop() waits
// for running handlers to return.
//
// Errors: Start() returns a Status naming the fix; failures after Start() are logged (when a
// logger is given), never fatal: nothing a client sends can stop the daemon.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/log.h"
#include "lib/control/json.h"
#include "lib/control/protocol.h"

namespace metaroce::daemon {

// Who sent a request, and the file descriptors that came with it.
struct ClientInfo {
  uint64_t client_id = 0;  // this control connection; unique for the server's life, never reused
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  // Received with this request (SCM_RIGHTS), owned by the server until taken: a handler that
  // keeps one calls TakeFd; the rest are closed when the handler returns.
  mutable std::vector<int> fds;
  // The i-th descriptor, now owned by the caller; -1 when there is none or it was taken.
  int TakeFd(size_t i) const;
  // Descriptors to send with a successful response (SCM_RIGHTS, with its first byte), given to
  // the server: it closes them once sent, with an error response instead, or when the client is
  // gone.
  mutable std::vector<int> reply_fds;
};

using ControlHandler = std::function<absl::StatusOr<control::Json>(const control::Json& params,
                                                                   const ClientInfo& client)>;

// Where a handler runs (see Threading above).
enum class HandlerThread {
  kServer,  // on the server thread: a handler that answers from memory
  kOwn,     // on a thread of its own: a handler that may wait on the network; thread-safe
};

// A peer's credentials: SO_PEERCRED plus its supplementary groups.
struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// Who may connect: root (when allow_root), daemon_uid, and members of `group`.
struct PeerPolicy {
  uid_t daemon_uid = 0;
  std::optional<gid_t> group;
  std::string group_name;  // for messages
  bool allow_root = true;  // false only in tests that exercise refusals while running as root
};

// OK, or PermissionDenied "uid 1000 is not allowed: root or members of group metaroce only".
absl::Status CheckPeer(const PeerCred& peer, const PeerPolicy& policy);
// The supplementary groups of a /proc/PID/status text ("Groups:\t4 27 1000").
std::vector<gid_t> ParseStatusGroups(absl::string_view proc_status);

struct ControlServerOptions {
  std::string path;         // the socket file
  std::string group;        // socket_group: the socket's group, whose members may connect
  size_t max_clients = 256;
  size_t max_output_bytes = size_t{4} << 20;  // unread responses before a client is dropped
  size_t max_fds_per_message = 253;  // SCM_MAX_FD: what one message can carry
  size_t max_own_thread_requests = 16;  // HandlerThread::kOwn handlers running at once
  // Default (nullopt): root, the daemon's effective uid, members of `group`.
  std::optional<PeerPolicy> policy;
  Logger* log = nullptr;    // refusals and dropped clients; nullptr: silent
};

class ControlServer {
 public:
  explicit ControlServer(ControlServerOptions options);
  ~ControlServer();  // Stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Replaces an earlier handler of the method. Any thread, before or after Start().
  void Register(std::string method, ControlHandler handler,
                HandlerThread where = HandlerThread::kServer);
  // Called with a client's id once its connection is closed (EOF, error, dropped, or Stop()),
  // on the server thread (in Stop(), after it ended): what the client made can go. Set before
  // Start().
  void OnDisconnect(std::function<void(uint64_t client_id)> fn) { on_disconnect_ = std::move(fn); }
  void Unregister(absl::string_view method);

  // Creates the socket and starts the server thread. FailedPrecondition when another daemon
  // listens on the path or the path is not a socket; errno-based statuses naming the path
  // otherwise (permission, missing directory, group change refused).
  absl::Status Start();
  // Closes every client and the listening socket, unlinks the socket file, joins the thread.
  // Idempotent.
  void Stop();

  const std::string& path() const { return options_.path; }
  size_t client_count() const { return client_count_.load(); }

 private:
  struct Client;
  struct Registered {
    ControlHandler handler;
    HandlerThread where = HandlerThread::kServer;
  };
  // A request whose handler ran on its own thread, back for its client's queue.
  struct Finished {
    uint64_t client_id = 0;
    control::Response response;
    ClientInfo info;
  };

  absl::Status PrepareSocketPath();
  absl::Status BindAndListen();
  void Loop();
  void AcceptClients();
  void AddClient(int fd);
  void ReadClient(Client& client);
  void ProcessLines(Client& client);
  // Runs one request and queues its response line, or starts its handler on a thread of its own
  // (the client then waits: ProcessLines stops until TakeFinished queues the response).
  void HandleLine(Client& client, const std::string& line, uint64_t begin, uint64_t end);
  // Queues a finished request's response on `client`, with its reply descriptors (closed instead
  // when it is an error); closes the request's descriptors the handler did not take.
  void Respond(Client& client, control::Response response, ClientInfo& info);
  // The responses of handlers that ran on their own threads: queued, and their clients resume.
  void TakeFinished();
  void JoinOwnThreads();
  void Flush(Client& client);
  void Drop(Client& client, absl::string_view why);
  void CloseClient(Client& client);
  std::optional<Registered> FindHandler(absl::string_view method);
  void Log(LogLevel level, absl::string_view message);

  ControlServerOptions options_;
  PeerPolicy policy_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the loop
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> client_count_{0};
  std::vector<std::unique_ptr<Client>> clients_;  // server thread only (and Stop after join)
  uint64_t next_client_id_ = 1;                   // server thread only
  std::function<void(uint64_t)> on_disconnect_;
  std::thread thread_;

  absl::Mutex handlers_mu_;
  std::map<std::string, Registered, std::less<>> handlers_ ABSL_GUARDED_BY(handlers_mu_);

  std::map<uint64_t, std::thread> own_threads_;  // by client id; server thread (and Stop after)
  absl::Mutex finished_mu_;
  std::vector<Finished> finished_ ABSL_GUARDED_BY(finished_mu_);
};

}  // namespace metaroce::daemon
