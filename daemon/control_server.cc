#include "daemon/control_server.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "lib/control/protocol.h"

namespace metaroce::daemon {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kMaxReadsPerWakeup = 16;  // then serve the other clients
// How long a client closed after an error or EOF may take to read its last responses.
constexpr absl::Duration kLingerAfterClose = absl::Seconds(1);

absl::Status PathError(int err, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string ErrorLine(absl::Status status, uint64_t id = 0) {
  control::Response r;
  r.id = id;
  r.status = std::move(status);
  return control::SerializeResponse(r);
}

// Writes what the socket takes now (refused clients: one line, then close).
void WriteBestEffort(int fd, const std::string& data) {
  [[maybe_unused]] ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

std::optional<gid_t> LookUpGroup(const std::string& name) {
  struct group grp;
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(name.c_str(), &grp, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return found->gr_gid;
}

// Supplementary groups of a peer: /proc/PID/status, or the group database for its uid's name.
std::vector<gid_t> ReadPeerGroups(pid_t pid, uid_t uid, gid_t gid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    return ParseStatusGroups(text.str());
  }
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return {};
  int count = 64;
  std::vector<gid_t> groups(count);
  if (getgrouplist(found->pw_name, gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (getgrouplist(found->pw_name, gid, groups.data(), &count) < 0) return {};
  }
  groups.resize(count);
  return groups;
}

}  // namespace

// ---- pure pieces ------------------------------------------------------------------------------

int ClientInfo::TakeFd(size_t i) const {
  if (i >= fds.size()) return -1;
  return std::exchange(fds[i], -1);
}

absl::Status CheckPeer(const PeerCred& peer, const PeerPolicy& policy) {
  if (policy.allow_root && peer.uid == 0) return absl::OkStatus();
  if (peer.uid == policy.daemon_uid) return absl::OkStatus();
  if (policy.group.has_value()) {
    const gid_t g = *policy.group;
    if (peer.gid == g || std::find(peer.groups.begin(), peer.groups.end(), g) != peer.groups.end()) {
      return absl::OkStatus();
    }
  }
  std::vector<std::string> allowed;
  if (policy.allow_root) allowed.push_back("root");
  if (policy.daemon_uid != 0 || !policy.allow_root) {
    allowed.push_back(absl::StrCat("uid ", policy.daemon_uid));
  }
  if (policy.group.has_value()) {
    allowed.push_back(absl::StrCat("members of group ",
                                   policy.group_name.empty() ? absl::StrCat(*policy.group)
                                                             : policy.group_name));
  }
  std::string who;
  if (allowed.size() == 1) {
    who = allowed[0];
  } else {
    who = absl::StrCat(absl::StrJoin(allowed.begin(), allowed.end() - 1, ", "), " or ",
                       allowed.back());
  }
  return absl::PermissionDeniedError(
      absl::StrCat("uid ", peer.uid, " is not allowed: ", who, " only",
                   policy.group.has_value() ? "" : " (set socket_group to let a group in)"));
}

std::vector<gid_t> ParseStatusGroups(absl::string_view proc_status) {
  std::vector<gid_t> groups;
  for (absl::string_view line : absl::StrSplit(
           absl::string_view(proc_status.data(), proc_status.size()), '\n')) {
    if (!absl::ConsumePrefix(&line, "Groups:")) continue;
    for (absl::string_view field : absl::StrSplit(line, absl::ByAnyChar(" \t"),
                                                  absl::SkipEmpty())) {
      uint32_t g = 0;
      if (absl::SimpleAtoi(field, &g)) groups.push_back(static_cast<gid_t>(g));
    }
    break;
  }
  return groups;
}

// ---- the server -------------------------------------------------------------------------------

namespace {

// Closes a request's descriptors its handler did not take, and reply descriptors not sent.
void CloseDescriptors(ClientInfo& info) {
  for (int fd : info.fds) {
    if (fd >= 0) close(fd);
  }
  for (int fd : info.reply_fds) close(fd);
  info.fds.clear();
  info.reply_fds.clear();
}

// A handler's outcome into its response: the result, or the refusal.
void SetResult(control::Response& response, absl::StatusOr<control::Json> result) {
  if (result.ok()) {
    response.result = *std::move(result);
  } else {
    response.status = result.status();
  }
}

}  // namespace

struct ControlServer::Client {
  uint64_t id = 0;
  int fd = -1;
  PeerCred cred;
  control::LineBuffer in;
  std::string out;             // responses not yet written
  uint64_t out_sent = 0;       // stream bytes written so far (out[0] is at this offset)
  // Descriptors to send with the byte at a stream offset (a response's first byte).
  std::deque<std::pair<uint64_t, std::vector<int>>> out_fds;
  uint64_t received = 0;       // stream bytes received so far
  uint64_t consumed = 0;       // stream bytes of the lines taken from `in` so far
  std::deque<std::pair<uint64_t, int>> fds;  // (stream offset they came with, fd)
  bool fds_truncated = false;  // MSG_CTRUNC: the kernel dropped some descriptors
  bool closing = false;        // no more reading; close once `out` is written (or linger ends)
  absl::Time close_by = absl::InfiniteFuture();
  bool dead = false;
  bool waiting = false;  // a request's handler runs on its own thread: not polled meanwhile
};

ControlServer::ControlServer(ControlServerOptions options) : options_(std::move(options)) {}

ControlServer::~ControlServer() { Stop(); }

void ControlServer::Register(std::string method, ControlHandler handler, HandlerThread where) {
  absl::MutexLock lock(&handlers_mu_);
  handlers_[std::move(method)] = Registered{std::move(handler), where};
}

void ControlServer::Unregister(absl::string_view method) {
  absl::MutexLock lock(&handlers_mu_);
  if (auto it = handlers_.find(method); it != handlers_.end()) handlers_.erase(it);
}

std::optional<ControlServer::Registered> ControlServer::FindHandler(absl::string_view method) {
  absl::MutexLock lock(&handlers_mu_);
  auto it = handlers_.find(method);
  if (it == handlers_.end()) return std::nullopt;
  return it->second;
}

void ControlServer::Log(LogLevel level, absl::string_view message) {
  if (options_.log != nullptr) options_.log->Log(level, message);
}

absl::Status ControlServer::Start() {
  if (thread_.joinable()) return absl::FailedPreconditionError("control server already started");
  if (options_.path.empty() || options_.path.front() != '/' ||
      options_.path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control socket path '", options_.path, "' must be absolute and shorter than ",
        sizeof(sockaddr_un::sun_path), " bytes"));
  }
  if (options_.policy.has_value()) {
    policy_ = *options_.policy;
  } else {
    policy_.daemon_uid = geteuid();
    if (!options_.group.empty()) {
      policy_.group = LookUpGroup(options_.group);
      policy_.group_name = options_.group;
      if (!policy_.group) {
        return absl::NotFoundError(absl::StrCat("socket_group '", options_.group,
                                                "' does not exist: create it (groupadd ",
                                                options_.group, ") or remove socket_group"));
      }
    }
  }
  if (absl::Status s = PrepareSocketPath(); !s.ok()) return s;
  if (absl::Status s = BindAndListen(); !s.ok()) {
    Stop();
    return s;
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int err = errno;
    Stop();
    return absl::ErrnoToStatus(err, "eventfd for the control server");
  }
  stop_.store(false);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

// Makes the parent directory when missing, and removes a socket file no daemon listens on.
absl::Status ControlServer::PrepareSocketPath() {
  const std::string& path = options_.path;
  const std::string dir = path.substr(0, std::max<size_t>(path.rfind('/'), 1));
  if (mkdir(dir.c_str(), 0755) == 0) {
    chmod(dir.c_str(), 0755);  // whatever the umask
  } else if (errno != EEXIST) {
    return PathError(errno, "cannot create the control socket's directory", dir);
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return PathError(errno, "cannot stat the control socket", path);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " exists and is not a socket: remove it, or choose another socket path"));
  }
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int rc = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(probe);
  if (rc == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another metaroced is running (", path,
        "): stop it first, or give this one another --socket"));
  }
  if (err != ECONNREFUSED) return PathError(err, "cannot probe the control socket", path);
  // Nothing listens: a daemon that died left it.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return PathError(errno, "cannot remove the stale control socket", path);
  }
  return absl::OkStatus();
}

absl::Status ControlServer::BindAndListen() {
  const std::string& path = options_.path;
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return absl::ErrnoToStatus(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == EADDRINUSE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another metaroced is running (", path,
          "): stop it first, or give this one another --socket"));
    }
    return PathError(errno, "cannot bind the control socket", path);
  }
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    socket_dev_ = st.st_dev;
    socket_ino_ = st.st_ino;
  }
  // Nobody can connect before listen(): set the mode and group first.
  if (chmod(path.c_str(), 0660) != 0) return PathError(errno, "cannot chmod 0660", path);
  if (policy_.group.has_value() && !options_.policy.has_value()) {
    if (chown(path.c_str(), static_cast<uid_t>(-1), *policy_.group) != 0) {
      const int err = errno;
      return absl::ErrnoToStatus(
          err, absl::StrCat("cannot give ", path, " to group ", options_.group,
                            ": run metaroced with that group among its groups "
                            "(SupplementaryGroups=", options_.group,
                            " in the unit) or with CAP_CHOWN"));
    }
  }
  if (listen(listen_fd_, 64) != 0) return PathError(errno, "cannot listen on", path);
  return absl::OkStatus();
}

void ControlServer::Stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  JoinOwnThreads();
  {
    // Answers nobody will read: only their descriptors need closing.
    absl::MutexLock lock(&finished_mu_);
    for (Finished& f : finished_) CloseDescriptors(f.info);
    finished_.clear();
  }
  for (auto& c : clients_) CloseClient(*c);
  clients_.clear();
  client_count_.store(0);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    // Unlink only our own socket: another daemon may have replaced it since.
    struct stat st;
    if (lstat(options_.path.c_str(), &st) == 0 && st.st_dev == socket_dev_ &&
        st.st_ino == socket_ino_) {
      unlink(options_.path.c_str());
    }
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
}

void ControlServer::Loop() {
  std::vector<pollfd> fds;
  std::vector<Client*> owners;  // owners[i] for fds[i + 2]
  while (!stop_.load()) {
    fds.clear();
    owners.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next_deadline = absl::InfiniteFuture();
    for (auto& c : clients_) {
      if (c->waiting) continue;  // TakeFinished resumes it
      short events = c->closing ? 0 : POLLIN;
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({c->fd, events, 0});
      owners.push_back(c.get());
      next_deadline = std::min(next_deadline, c->close_by);
    }
    int timeout_ms = -1;
    if (next_deadline != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(next_deadline - absl::Now()) + 1, 0, 1000));
    }
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      Log(LogLevel::kError, absl::StrCat("control server: poll: ", std::strerror(errno)));
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (stop_.load()) break;
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
      TakeFinished();
    }
    if (n > 0) {
      for (size_t i = 0; i < owners.size(); ++i) {
        Client& c = *owners[i];
        const short re = fds[i + 2].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) {
          if (!c.closing) {
            ReadClient(c);
          } else if (re & (POLLHUP | POLLERR)) {
            c.dead = true;  // the peer is gone: nothing left to deliver
          }
        }
        if (!c.dead && (re & POLLOUT)) Flush(c);
      }
      if (fds[1].revents & POLLIN) AcceptClients();
    }
    const absl::Time now = absl::Now();
    for (auto& c : clients_) {
      if (c->closing && !c->waiting && (c->out.empty() || now >= c->close_by)) c->dead = true;
    }
    auto gone = std::stable_partition(clients_.begin(), clients_.end(),
                                      [](const auto& c) { return !c->dead; });
    for (auto it = gone; it != clients_.end(); ++it) CloseClient(**it);
    clients_.erase(gone, clients_.end());
    client_count_.store(clients_.size());
  }
}

void ControlServer::AcceptClients() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Log(LogLevel::kWarning, absl::StrCat("control server: accept: ", std::strerror(errno)));
        if (errno == EMFILE || errno == ENFILE) absl::SleepFor(absl::Milliseconds(10));
      }
      return;
    }
    AddClient(fd);
  }
}

void ControlServer::AddClient(int fd) {
  ucred uc{};
  socklen_t len = sizeof(uc);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0) {
    Log(LogLevel::kWarning, absl::StrCat("control client refused: SO_PEERCRED: ",
                                         std::strerror(errno)));
    close(fd);
    return;
  }
  PeerCred cred{uc.pid, uc.uid, uc.gid, {}};
  if (policy_.group.has_value() && uc.uid != 0 && uc.uid != policy_.daemon_uid) {
    cred.groups = ReadPeerGroups(uc.pid, uc.uid, uc.gid);
  }
  if (absl::Status s = CheckPeer(cred, policy_); !s.ok()) {
    Log(LogLevel::kWarning, absl::StrCat("control client pid ", uc.pid, " refused: ",
                                         s.message()));
    WriteBestEffort(fd, ErrorLine(s));
    close(fd);
    return;
  }
  if (clients_.size() >= options_.max_clients) {
    const absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
        "too many control clients (", options_.max_clients,
        "): close idle ones (mrctl connections end after each command)"));
    Log(LogLevel::kWarning, absl::StrCat("control client pid ", uc.pid, " uid ", uc.uid,
                                         " refused: ", s.message()));
    WriteBestEffort(fd, ErrorLine(s));
    close(fd);
    return;
  }
  auto c = std::make_unique<Client>();
  c->id = next_client_id_++;
  c->fd = fd;
  c->cred = cred;
  clients_.push_back(std::move(c));
  client_count_.store(clients_.size());
}

void ControlServer::ReadClient(Client& c) {
  std::vector<char> buf(kReadChunk);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * options_.max_fds_per_message));
  for (int round = 0; round < kMaxReadsPerWakeup && !c.closing && !c.dead; ++round) {
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = recvmsg(c.fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int* data = reinterpret_cast<const int*>(CMSG_DATA(h));
      for (size_t i = 0; i < count; ++i) c.fds.emplace_back(c.received, data[i]);
    }
    if (msg.msg_flags & MSG_CTRUNC) c.fds_truncated = true;
    if (n == 0) {
      // The client finished sending; it still gets the responses to what it sent.
      c.closing = true;
      c.close_by = absl::Now() + kLingerAfterClose;
      break;
    }
    c.received += static_cast<uint64_t>(n);
    const absl::Status appended = c.in.Append(std::span<const char>(buf.data(), n));
    ProcessLines(c);
    if (!appended.ok()) {
      c.out += ErrorLine(absl::ResourceExhaustedError(absl::StrCat(
          "request line longer than ", control::kMaxMessageBytes,
          " bytes: closing the connection (one JSON object per line)")));
      c.closing = true;
      c.close_by = absl::Now() + kLingerAfterClose;
    }
    if (static_cast<size_t>(n) < buf.size()) break;  // drained for now
  }
  Flush(c);
}

void ControlServer::ProcessLines(Client& c) {
  while (!c.dead && !c.waiting) {
    std::optional<std::string> line = c.in.NextLine();
    if (!line) return;
    const uint64_t begin = c.consumed;
    c.consumed += line->size() + 1;
    if (absl::StripAsciiWhitespace(*line).empty()) continue;
    HandleLine(c, *line, begin, c.consumed);
    if (c.out.size() > options_.max_output_bytes) {
      Drop(c, absl::StrCat("its unread responses exceed ", options_.max_output_bytes, " bytes"));
      return;
    }
  }
}

void ControlServer::HandleLine(Client& c, const std::string& line, uint64_t begin,
                               uint64_t end) {
  ClientInfo info;
  info.client_id = c.id;
  info.pid = c.cred.pid;
  info.uid = c.cred.uid;
  info.gid = c.cred.gid;
  // Descriptors that arrived with this line's bytes are its; earlier leftovers are closed.
  while (!c.fds.empty() && c.fds.front().first < end) {
    auto [offset, fd] = c.fds.front();
    c.fds.pop_front();
    if (offset >= begin) {
      info.fds.push_back(fd);
    } else {
      close(fd);
    }
  }
  const bool truncated = std::exchange(c.fds_truncated, false);

  control::Response response;
  uint64_t id = 0;
  absl::StatusOr<control::Request> request = control::ParseRequest(line, &id);
  response.id = id;
  std::optional<Registered> handler;
  if (request.ok()) handler = FindHandler(request->method);
  if (!request.ok()) {
    response.status = request.status();
  } else if (truncated) {
    response.status = absl::InvalidArgumentError(absl::StrCat(
        "more than ", options_.max_fds_per_message,
        " file descriptors with one request: the extra ones were dropped"));
  } else if (!handler) {
    response.status = absl::UnimplementedError(absl::StrCat(
        "unknown method '", request->method, "'; see docs/control-protocol.md"));
  } else if (handler->where == HandlerThread::kOwn &&
             own_threads_.size() >= options_.max_own_thread_requests) {
    response.status = absl::ResourceExhaustedError(absl::StrCat(
        options_.max_own_thread_requests, " requests of the kind of '", request->method,
        "' are waiting on the network already: retry when one has finished"));
  } else if (handler->where == HandlerThread::kOwn) {
    c.waiting = true;
    own_threads_[c.id] = std::thread(
        [this, client_id = c.id, fn = std::move(handler->handler), params = request->params,
         response = std::move(response), info = std::move(info)]() mutable {
          SetResult(response, fn(params, info));
          {
            absl::MutexLock lock(&finished_mu_);
            finished_.push_back(Finished{client_id, std::move(response), std::move(info)});
          }
          const uint64_t one = 1;
          [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
        });
    return;
  } else {
    SetResult(response, handler->handler(request->params, info));
  }
  Respond(c, std::move(response), info);
}

void ControlServer::Respond(Client& c, control::Response response, ClientInfo& info) {
  if (!info.reply_fds.empty() && response.status.ok()) {
    // The response is appended to `out` next: its first byte is at this stream offset.
    c.out_fds.emplace_back(c.out_sent + c.out.size(), std::move(info.reply_fds));
    info.reply_fds.clear();
  }
  CloseDescriptors(info);
  c.out += control::SerializeResponse(response);
}

void ControlServer::TakeFinished() {
  std::vector<Finished> finished;
  {
    absl::MutexLock lock(&finished_mu_);
    finished.swap(finished_);
  }
  for (Finished& f : finished) {
    if (auto t = own_threads_.find(f.client_id); t != own_threads_.end()) {
      t->second.join();  // it has handed its result over: returns at once
      own_threads_.erase(t);
    }
    auto it = std::find_if(clients_.begin(), clients_.end(),
                           [&](const auto& c) { return c->id == f.client_id; });
    if (it == clients_.end()) {  // not polled while waiting, so not gone; but never leak
      CloseDescriptors(f.info);
      continue;
    }
    Client& c = **it;
    c.waiting = false;
    Respond(c, std::move(f.response), f.info);
    if (c.closing) c.close_by = absl::Now() + kLingerAfterClose;  // from now: its answer is due
    ProcessLines(c);  // what it sent meanwhile
    Flush(c);
  }
}

void ControlServer::JoinOwnThreads() {
  for (auto& [client, thread] : own_threads_) thread.join();
  own_threads_.clear();
}

void ControlServer::Flush(Client& c) {
  while (!c.out.empty()) {
    // Descriptors travel with the first byte of their response: a send stops short of the next
    // response that has some, and that one goes with sendmsg.
    const bool with_fds = !c.out_fds.empty() && c.out_fds.front().first == c.out_sent;
    size_t size = c.out.size();
    const size_t next = with_fds ? 1 : 0;
    if (c.out_fds.size() > next) {
      size = std::min<uint64_t>(size, c.out_fds[next].first - c.out_sent);
    }
    const ssize_t n = with_fds ? control::SendWithFds(c.fd, c.out.data(), size, c.out_fds.front().second,
                                                     MSG_DONTWAIT)
                               : send(c.fd, c.out.data(), size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;  // EPIPE, ECONNRESET
      return;
    }
    if (with_fds && n > 0) {
      for (int fd : c.out_fds.front().second) close(fd);
      c.out_fds.pop_front();
    }
    c.out.erase(0, static_cast<size_t>(n));
    c.out_sent += static_cast<uint64_t>(n);
  }
  // All written: an idle client holds no buffer (one that once received a large listing would
  // otherwise keep its capacity for as long as it stays connected).
  std::string().swap(c.out);
}

void ControlServer::Drop(Client& c, absl::string_view why) {
  Log(LogLevel::kWarning, absl::StrCat("control client pid ", c.cred.pid, " uid ", c.cred.uid,
                                       " disconnected: ", why));
  c.dead = true;
}

void ControlServer::CloseClient(Client& c) {
  for (auto& [offset, fd] : c.fds) close(fd);
  c.fds.clear();
  for (auto& [offset, fds] : c.out_fds) {
    for (int fd : fds) close(fd);
  }
  c.out_fds.clear();
  const bool was_open = c.fd >= 0;
  if (was_open) close(c.fd);
  c.fd = -1;
  if (was_open && on_disconnect_) on_disconnect_(c.id);
}

}  // namespace metaroce::daemon
