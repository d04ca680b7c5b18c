#include "lib/control/protocol.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/control/absl_view.h"

namespace metaroce::control {
namespace {

// Debian's Abseil has its own string_view type.

constexpr std::array<std::pair<absl::StatusCode, std::string_view>, 17> kCodeNames = {{
    {absl::StatusCode::kOk, "ok"},
    {absl::StatusCode::kCancelled, "cancelled"},
    {absl::StatusCode::kUnknown, "unknown"},
    {absl::StatusCode::kInvalidArgument, "invalid_argument"},
    {absl::StatusCode::kDeadlineExceeded, "deadline_exceeded"},
    {absl::StatusCode::kNotFound, "not_found"},
    {absl::StatusCode::kAlreadyExists, "already_exists"},
    {absl::StatusCode::kPermissionDenied, "permission_denied"},
    {absl::StatusCode::kResourceExhausted, "resource_exhausted"},
    {absl::StatusCode::kFailedPrecondition, "failed_precondition"},
    {absl::StatusCode::kAborted, "aborted"},
    {absl::StatusCode::kOutOfRange, "out_of_range"},
    {absl::StatusCode::kUnimplemented, "unimplemented"},
    {absl::StatusCode::kInternal, "internal"},
    {absl::StatusCode::kUnavailable, "unavailable"},
    {absl::StatusCode::kDataLoss, "data_loss"},
    {absl::StatusCode::kUnauthenticated, "unauthenticated"},
}};

// The most descriptors one SCM_RIGHTS message carries (the kernel's SCM_MAX_FD).
constexpr size_t kMaxFdsPerMessage = 253;

absl::Status Invalid(std::string_view what) { return absl::InvalidArgumentError(AbslView(what)); }

// The top-level keys of a request; anything else is refused, so that a misspelt "params" never
// reads as an empty parameter object.
bool IsRequestKey(std::string_view key) {
  return key == "version" || key == "id" || key == "method" || key == "params";
}

absl::Status CheckVersion(const Json& message, std::string_view what) {
  const Json* version = message.Find("version");
  if (version == nullptr) {
    return Invalid(absl::StrCat(AbslView(what), " has no \"version\"; metaroced and its clients speak "
                                      "protocol version ", kProtocolVersion));
  }
  std::optional<int64_t> v = version->AsInt();
  if (v && *v == kProtocolVersion) return absl::OkStatus();
  return Invalid(absl::StrCat("protocol version ", version->Dump(), " is not spoken here (versions "
                              "spoken: ", kProtocolVersion, "); use mrctl and metaroced of the "
                              "same release"));
}

absl::StatusOr<uint64_t> ReadId(const Json& message, std::string_view what) {
  const Json* id = message.Find("id");
  if (id == nullptr) return Invalid(absl::StrCat(AbslView(what), " has no \"id\" (an unsigned integer)"));
  std::optional<uint64_t> v = id->AsUint();
  if (!v) return Invalid(absl::StrCat("\"id\" must be an unsigned integer, not ", id->Dump()));
  return *v;
}

absl::Status CheckRequestKeys(const Json& request) {
  for (const auto& [key, value] : request.object()) {
    if (!IsRequestKey(key)) {
      return Invalid(absl::StrCat("unknown key \"", key, "\" in request (expected version, id, "
                                  "method, params)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadMethod(const Json& request) {
  const Json* method = request.Find("method");
  std::optional<std::string_view> name = method ? method->AsString() : std::nullopt;
  if (!name || name->empty()) {
    return Invalid("\"method\" must be a non-empty string such as \"conn.show\"");
  }
  return std::string(*name);
}

absl::StatusOr<Json> ReadParams(const Json& request) {
  const Json* params = request.Find("params");
  if (params == nullptr) return Json::MakeObject();
  if (!params->is_object()) {
    return Invalid(absl::StrCat("\"params\" must be an object, not ", params->Dump()));
  }
  return *params;
}

// error: {"code": NAME, "message": TEXT} into *out; "ok" is no error and is refused. (Not a
// StatusOr<Status>: that would hold a refusal as its value.)
absl::Status ReadError(const Json& error, absl::Status* out) {
  if (!error.is_object()) return Invalid("response's \"error\" must be an object");
  const Json* code = error.Find("code");
  const Json* message = error.Find("message");
  std::optional<std::string_view> code_name = code ? code->AsString() : std::nullopt;
  std::optional<std::string_view> text = message ? message->AsString() : std::nullopt;
  if (!code_name || !text) {
    return Invalid("response's \"error\" must have a string \"code\" and a string \"message\"");
  }
  const absl::StatusCode status_code = ErrorCodeFromName(*code_name);
  if (status_code == absl::StatusCode::kOk) return Invalid("response's error has code \"ok\"");
  *out = absl::Status(status_code, AbslView(*text));
  return absl::OkStatus();
}

std::string Line(const Json& message) { return message.Dump() + "\n"; }

Json ResponseHead(uint64_t id) {
  Json out = Json::MakeObject();
  out["version"] = kProtocolVersion;
  out["id"] = id;
  return out;
}

std::string ErrorLine(uint64_t id, const absl::Status& status) {
  Json out = ResponseHead(id);
  Json& error = out["error"];
  error["code"] = ErrorCodeName(status.code());
  error["message"] = std::string(status.message());
  return Line(out);
}

// --- Client helpers ------------------------------------------------------------------------

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t DeadlineAfter(absl::Duration timeout) {
  const int64_t now = MonotonicNs();
  const int64_t ns = absl::ToInt64Nanoseconds(timeout);
  return ns >= INT64_MAX - now ? INT64_MAX : now + std::max<int64_t>(ns, 0);
}

// poll()'s timeout until the deadline: -1 for none, rounded up to whole milliseconds.
int PollTimeoutMs(int64_t deadline_ns) {
  if (deadline_ns == INT64_MAX) return -1;
  const int64_t left = deadline_ns - MonotonicNs();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>((left + 999'999) / 1'000'000, INT_MAX));
}

// Waits until fd is ready for `events` (POLLIN or POLLOUT) or the deadline passes. A hang-up or
// error counts as ready: the following read or write reports it.
absl::Status WaitFor(int fd, short events, int64_t deadline_ns) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, PollTimeoutMs(deadline_ns));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError("timed out");
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", strerror(errno)));
  }
}

// "'metaroce'" when the socket's group has a name, for the permission message.
std::string SocketGroup(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "the socket's group";
  group g{};
  group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrgid_r(st.st_gid, &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return absl::StrCat("the socket's group (gid ", st.st_gid, ")");
  }
  return absl::StrCat("the socket's group '", g.gr_name, "'");
}

absl::Status ConnectError(const std::string& path, int err) {
  const std::string head = absl::StrCat("cannot reach metaroced at ", path, ": ", strerror(err));
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat(head, " (run as root or as a member of ", SocketGroup(path), ")"));
  }
  if (err == ENOENT || err == ECONNREFUSED) {
    return absl::UnavailableError(absl::StrCat(head, " (is metaroced running?)"));
  }
  return absl::UnavailableError(head);
}

// connect() on a non-blocking AF_UNIX socket: it succeeds at once or fails with EAGAIN while the
// listener's backlog is full, in which case we retry until the deadline.
absl::Status ConnectBefore(int fd, const sockaddr_un& addr, const std::string& path,
                           int64_t deadline_ns, absl::Duration timeout) {
  while (true) {
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      return absl::OkStatus();
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EINPROGRESS) {  // not AF_UNIX's way today, but allowed by connect(2)
      if (!WaitFor(fd, POLLOUT, deadline_ns).ok()) break;
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      if (so_error == 0) return absl::OkStatus();
      return ConnectError(path, so_error);
    }
    if (err != EAGAIN) return ConnectError(path, err);
    if (PollTimeoutMs(deadline_ns) == 0) break;
    poll(nullptr, 0, std::min(10, std::max(PollTimeoutMs(deadline_ns), 1)));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("metaroced at ", path, " did not accept the connection within ",
                   absl::FormatDuration(timeout), " (its listen backlog is full)"));
}

// sendmsg() of the first chunk with the descriptors attached (SCM_RIGHTS).
}  // namespace

std::string_view ErrorCodeName(absl::StatusCode code) {
  for (const auto& [c, name] : kCodeNames) {
    if (c == code) return name;
  }
  return "unknown";
}

absl::StatusCode ErrorCodeFromName(std::string_view name) {
  for (const auto& [c, n] : kCodeNames) {
    if (n == name) return c;
  }
  return absl::StatusCode::kUnknown;
}

// The id is read before anything else is checked, so that every later refusal can carry it.
absl::StatusOr<Request> ParseRequest(std::string_view line, uint64_t* id_out) {
  if (id_out != nullptr) *id_out = 0;
  absl::StatusOr<Json> doc = Json::Parse(line);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) {
    return Invalid("a request must be a JSON object such as "
                   "{\"version\":1,\"id\":1,\"method\":\"daemon.show\"}");
  }
  Request request;
  absl::StatusOr<uint64_t> id = ReadId(*doc, "request");
  if (!id.ok()) return id.status();
  request.id = *id;
  if (id_out != nullptr) *id_out = *id;
  if (absl::Status st = CheckVersion(*doc, "request"); !st.ok()) return st;
  if (absl::Status st = CheckRequestKeys(*doc); !st.ok()) return st;
  absl::StatusOr<std::string> method = ReadMethod(*doc);
  if (!method.ok()) return method.status();
  request.method = *std::move(method);
  absl::StatusOr<Json> params = ReadParams(*doc);
  if (!params.ok()) return params.status();
  request.params = *std::move(params);
  return request;
}

// Unknown top-level keys of a response are ignored: a newer daemon may add some.
absl::StatusOr<Response> ParseResponse(std::string_view line) {
  absl::StatusOr<Json> doc = Json::Parse(line);
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return Invalid("a response must be a JSON object");
  if (absl::Status st = CheckVersion(*doc, "response"); !st.ok()) return st;
  Response response;
  absl::StatusOr<uint64_t> id = ReadId(*doc, "response");
  if (!id.ok()) return id.status();
  response.id = *id;
  const Json* result = doc->Find("result");
  const Json* error = doc->Find("error");
  if ((result == nullptr) == (error == nullptr)) {
    return Invalid("a response must have exactly one of \"result\" and \"error\"");
  }
  if (error != nullptr) {
    if (absl::Status st = ReadError(*error, &response.status); !st.ok()) return st;
    return response;
  }
  if (!result->is_object()) {
    return Invalid(absl::StrCat("response's \"result\" must be an object, not ", result->Dump()));
  }
  response.result = *result;
  return response;
}

std::string SerializeRequest(const Request& request) {
  Json out = Json::MakeObject();
  out["version"] = kProtocolVersion;
  out["id"] = request.id;
  out["method"] = request.method;
  out["params"] = request.params.is_null() ? Json::MakeObject() : request.params;
  return Line(out);
}

// A result that would not fit the protocol's line limit is replaced by a resource_exhausted
// error, so that no client ever receives a line it must refuse.
std::string SerializeResponse(const Response& response) {
  if (!response.status.ok()) return ErrorLine(response.id, response.status);
  Json out = ResponseHead(response.id);
  out["result"] = response.result.is_null() ? Json::MakeObject() : response.result;
  std::string line = Line(out);
  if (line.size() <= kMaxMessageBytes) return line;
  return ErrorLine(response.id, absl::ResourceExhaustedError(absl::StrCat(
      "the result is ", line.size(), " bytes, over the protocol's limit of ", kMaxMessageBytes,
      " bytes per line; ask for less (a single connection or interface, or a smaller "
      "page: `limit`)")));
}

// --- LineBuffer ------------------------------------------------------------------------------

// Consumed bytes are dropped when everything was read, or when they are at least half of the
// buffer: each byte is then moved at most a constant number of times.
absl::Status LineBuffer::Append(std::span<const char> bytes) {
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = open_line_ = 0;
  } else if (start_ >= 4096 && start_ * 2 >= buf_.size()) {
    buf_.erase(0, start_);
    open_line_ -= start_;
    start_ = 0;
  }
  size_t scan = buf_.size();
  buf_.append(bytes.data(), bytes.size());
  while (scan < buf_.size()) {
    const void* nl = std::memchr(buf_.data() + scan, '\n', buf_.size() - scan);
    if (nl == nullptr) break;
    const size_t at = static_cast<size_t>(static_cast<const char*>(nl) - buf_.data());
    if (at + 1 - open_line_ > max_line_) break;
    open_line_ = at + 1;
    scan = at + 1;
  }
  if (buf_.size() - open_line_ < max_line_) return absl::OkStatus();
  // The line beginning at open_line_ is (or will be) over the limit: it is dropped with
  // everything after it; the complete lines before it can still be read.
  buf_.resize(open_line_);
  return absl::ResourceExhaustedError(absl::StrCat(
      "line longer than ", max_line_, " bytes (the control protocol's limit)"));
}

std::optional<std::string> LineBuffer::NextLine() {
  if (start_ >= open_line_) return std::nullopt;
  const char* begin = buf_.data() + start_;
  const char* nl = static_cast<const char*>(std::memchr(begin, '\n', open_line_ - start_));
  std::string line(begin, static_cast<size_t>(nl - begin));
  start_ = static_cast<size_t>(nl - buf_.data()) + 1;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = open_line_ = 0;
  }
  return line;
}

// --- Client ----------------------------------------------------------------------------------

absl::StatusOr<Client> Client::Connect(std::string_view path, absl::Duration timeout) {
  const std::string socket_path(path);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path) {
    return Invalid(absl::StrCat("socket path \"", socket_path, "\" must be 1 to ",
                                sizeof addr.sun_path - 1, " bytes long"));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create a Unix socket: ", strerror(errno)));
  }
  absl::Status st = ConnectBefore(fd, addr, socket_path, DeadlineAfter(timeout), timeout);
  if (!st.ok()) {
    close(fd);
    return st;
  }
  return Client(fd, timeout);
}

Client::Client(Client&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      timeout_(other.timeout_),
      deadline_ns_(other.deadline_ns_),
      next_id_(other.next_id_),
      in_(std::move(other.in_)) {}

Client& Client::operator=(Client&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    timeout_ = other.timeout_;
    deadline_ns_ = other.deadline_ns_;
    next_id_ = other.next_id_;
    in_ = std::move(other.in_);
  }
  return *this;
}

Client::~Client() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<Json> Client::Call(std::string_view method, Json params) {
  return CallWithFds(method, std::move(params), {});
}

absl::StatusOr<Json> Client::CallWithFds(std::string_view method, Json params,
                                         std::span<const int> fds) {
  std::vector<int> received;
  absl::StatusOr<Json> result = CallWithFds(method, std::move(params), fds, &received);
  for (int fd : received) close(fd);  // nobody asked for them
  return result;
}

absl::StatusOr<Json> Client::CallWithFds(std::string_view method, Json params,
                                         std::span<const int> fds,
                                         std::vector<int>* received_fds) {
  for (int fd : received_fds_) close(fd);  // strays of an earlier call that gave up
  received_fds_.clear();
  absl::StatusOr<Json> result = Exchange(method, std::move(params), fds);
  received_fds->insert(received_fds->end(), received_fds_.begin(), received_fds_.end());
  received_fds_.clear();
  return result;
}

absl::StatusOr<Json> Client::Exchange(std::string_view method, Json params,
                                      std::span<const int> fds) {
  if (fd_ < 0) return absl::FailedPreconditionError("control client is not connected");
  if (params.is_null()) params = Json::MakeObject();
  if (!params.is_object()) {
    return Invalid(absl::StrCat("parameters of ", AbslView(method), " must be a JSON object"));
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return Invalid(absl::StrCat(fds.size(), " descriptors for ", AbslView(method), "; at most ",
                                kMaxFdsPerMessage, " fit one request"));
  }
  Request request{next_id_++, std::string(method), std::move(params)};
  const std::string line = SerializeRequest(request);
  if (line.size() > kMaxMessageBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the ", AbslView(method), " request is ", line.size(), " bytes, over the protocol's limit of ",
        kMaxMessageBytes));
  }
  deadline_ns_ = DeadlineAfter(timeout_);
  absl::Status sent = SendLine(line, fds);
  if (!sent.ok()) {
    // The daemon may have refused us (e.g. permission_denied) and closed: its reason is worth
    // more than "closed the connection".
    if (sent.code() == absl::StatusCode::kUnavailable) {
      deadline_ns_ = std::min(deadline_ns_, MonotonicNs() + 100'000'000);
      absl::StatusOr<Json> refusal = AwaitResponse(0, method);
      if (!refusal.ok() && refusal.status().code() != absl::StatusCode::kUnavailable &&
          refusal.status().code() != absl::StatusCode::kDeadlineExceeded) {
        return refusal.status();
      }
    }
    return Explain(sent, method);
  }
  return AwaitResponse(request.id, method);
}

// Reads responses until the one for `id`. Others are skipped (late answers to calls that timed
// out), except an error with id 0: the daemon's answer to something it could not attribute,
// such as a refused connection.
absl::StatusOr<Json> Client::AwaitResponse(uint64_t id, std::string_view method) {
  while (true) {
    absl::StatusOr<std::string> line = ReadLine();
    if (!line.ok()) return Explain(line.status(), method);
    absl::StatusOr<Response> response = ParseResponse(*line);
    if (!response.ok()) {
      return absl::InternalError(absl::StrCat("metaroced sent a malformed response to ", AbslView(method),
                                              ": ", response.status().message()));
    }
    if (response->id == 0 && !response->status.ok()) return response->status;
    if (id == 0 || response->id != id) {
      // A late answer to a call that gave up: descriptors that came with it are not ours.
      for (int fd : received_fds_) close(fd);
      received_fds_.clear();
      continue;
    }
    if (!response->status.ok()) return response->status;
    return std::move(response->result);
  }
}

absl::Status Client::Explain(const absl::Status& status, std::string_view method) const {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) return status;
  return absl::DeadlineExceededError(absl::StrCat("metaroced did not answer ", AbslView(method), " within ",
                                                  absl::FormatDuration(timeout_)));
}

absl::Status Client::SendLine(const std::string& line, std::span<const int> fds) {
  size_t sent = 0;
  bool fds_pending = !fds.empty();
  while (sent < line.size()) {
    const char* data = line.data() + sent;
    const size_t size = line.size() - sent;
    const ssize_t n = fds_pending ? SendWithFds(fd_, data, size, fds, 0)
                                  : send(fd_, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      fds_pending = false;  // the descriptors travel with the first byte
      continue;
    }
    const int err = errno;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      if (absl::Status st = WaitFor(fd_, POLLOUT, deadline_ns_); !st.ok()) return st;
      continue;
    }
    if (n < 0 && err != EPIPE && err != ECONNRESET) {
      return absl::UnavailableError(absl::StrCat("cannot send to metaroced: ", strerror(err)));
    }
    return absl::UnavailableError("metaroced closed the connection");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Client::ReadLine() {
  while (true) {
    if (std::optional<std::string> line = in_.NextLine()) return *std::move(line);
    if (absl::Status st = WaitFor(fd_, POLLIN, deadline_ns_); !st.ok()) return st;
    char buf[65536];
    const ssize_t n = ReceiveWithFds(fd_, buf, sizeof buf, &received_fds_);
    if (n > 0) {
      absl::Status st = in_.Append(std::span<const char>(buf, static_cast<size_t>(n)));
      if (!st.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat("metaroced sent a ", st.message()));
      }
      continue;
    }
    if (n == 0) return absl::UnavailableError("metaroced closed the connection");
    const int err = errno;
    if (err == EINTR || err == EAGAIN || err == EWOULDBLOCK) continue;
    if (err == ECONNRESET) return absl::UnavailableError("metaroced closed the connection");
    return absl::UnavailableError(absl::StrCat("cannot read from metaroced: ", strerror(err)));
  }
}

ssize_t SendWithFds(int fd, const char* data, size_t size, std::span<const int> fds, int flags) {
  iovec iov{const_cast<char*>(data), size};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  return sendmsg(fd, &msg, MSG_NOSIGNAL | flags);
}

ssize_t ReceiveWithFds(int fd, char* data, size_t size, std::vector<int>* fds) {
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(received);
    }
  }
  return n;
}

}  // namespace metaroce::control
