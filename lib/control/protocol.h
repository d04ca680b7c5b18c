// The control protocol between metaroced and its clients (mrctl, applications): JSON lines over
// the daemon's Unix stream socket, versioned. The normative description, with every method's
// parameters and results, is docs/control-protocol.md; this header is its codec and a blocking
// client.
//
//   request   {"version":1,"id":7,"method":"conn.show","params":{"id":3}}
//   response  {"version":1,"id":7,"result":{...}}
//             {"version":1,"id":7,"error":{"code":"not_found","message":"no connection 3"}}
//
// One JSON object per line ('\n'), at most kMaxMessageBytes with its newline. A request whose
// version the daemon does not speak, or that is not such an object, is answered with an error
// (code "invalid_argument", id 0 when the id itself was unreadable) and the connection stays
// open; an over-long line closes it after the error.
//
// Threading: Client is used from one thread at a time. Errors: absl::Status; a daemon's error
// response becomes a Status of the code it named, with its message.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/control/json.h"

namespace metaroce::control {

inline constexpr int kProtocolVersion = 1;
inline constexpr std::string_view kDefaultSocketPath = "/run/metaroce/metaroced.sock";
inline constexpr size_t kMaxMessageBytes = size_t{1} << 20;

struct Request {
  uint64_t id = 0;
  std::string method;          // "object.command", e.g. "conn.add"
  Json params = Json::MakeObject();
};

struct Response {
  uint64_t id = 0;
  absl::Status status;         // OK: `result` holds the answer; otherwise the error
  Json result = Json::MakeObject();
};

// Error codes on the wire: absl status code names in snake_case ("invalid_argument",
// "not_found", "permission_denied", "resource_exhausted", "failed_precondition", "unavailable",
// "already_exists", "deadline_exceeded", "unimplemented", "internal", ...). An unknown name
// reads as kUnknown.
std::string_view ErrorCodeName(absl::StatusCode code);
absl::StatusCode ErrorCodeFromName(std::string_view name);

// Parse one line (without its newline). ParseRequest refuses another version, a missing or
// non-integer id, a method that is not a non-empty string, params that are not an object
// (missing params read as {}); the Status says which. When the id was readable it is returned
// in *id_out even on error, so that the error response can carry it.
absl::StatusOr<Request> ParseRequest(std::string_view line, uint64_t* id_out = nullptr);
absl::StatusOr<Response> ParseResponse(std::string_view line);
// One line each, newline included.
std::string SerializeRequest(const Request& request);
std::string SerializeResponse(const Response& response);

// Stream-socket I/O with descriptors (SCM_RIGHTS): sendmsg() of `size` bytes with `fds`
// attached to the first (MSG_NOSIGNAL | flags), and recvmsg() that appends the descriptors that
// came with the bytes to *fds (close-on-exec; at most 253 per message). Both return what
// sendmsg/recvmsg return, errno set on failure.
ssize_t SendWithFds(int fd, const char* data, size_t size, std::span<const int> fds, int flags);
ssize_t ReceiveWithFds(int fd, char* data, size_t size, std::vector<int>* fds);

// Reassembles lines from a byte stream.
class LineBuffer {
 public:
  explicit LineBuffer(size_t max_line = kMaxMessageBytes) : max_line_(max_line) {}
  // Appends received bytes. ResourceExhausted when a line grows past max_line without a newline
  // (the caller answers with an error and closes).
  absl::Status Append(std::span<const char> bytes);
  // The next complete line without its newline (a trailing '\r' is kept), or nullopt.
  std::optional<std::string> NextLine();

 private:
  size_t max_line_;
  std::string buf_;
  size_t start_ = 0;
  size_t open_line_ = 0;  // where the line still waiting for its newline begins (>= start_)
};

// A blocking client of the daemon's control socket.
class Client {
 public:
  // Connects to the socket at `path`. Unavailable with the fix when nothing listens there
  // ("is metaroced running?"), PermissionDenied when the socket's mode refuses us.
  static absl::StatusOr<Client> Connect(std::string_view path = kDefaultSocketPath,
                                        absl::Duration timeout = absl::Seconds(10));
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // Sends one request and waits (up to the timeout given to Connect) for its response. The
  // daemon's error response becomes a Status of that code and message.
  absl::StatusOr<Json> Call(std::string_view method, Json params = Json::MakeObject());
  // Same, passing file descriptors with the request (SCM_RIGHTS; e.g. a memfd of a memory
  // region). The daemon takes its own duplicates; the caller keeps ownership of `fds`.
  absl::StatusOr<Json> CallWithFds(std::string_view method, Json params,
                                   std::span<const int> fds);
  // Same, also collecting the descriptors the daemon sent with its response (SCM_RIGHTS) into
  // *received_fds: the caller owns them, also when the call fails after they arrived.
  absl::StatusOr<Json> CallWithFds(std::string_view method, Json params,
                                   std::span<const int> fds, std::vector<int>* received_fds);
  int fd() const { return fd_; }

 private:
  Client(int fd, absl::Duration timeout) : fd_(fd), timeout_(timeout) {}
  absl::Status SendLine(const std::string& line, std::span<const int> fds);
  absl::StatusOr<std::string> ReadLine();
  absl::StatusOr<Json> Exchange(std::string_view method, Json params, std::span<const int> fds);
  absl::StatusOr<Json> AwaitResponse(uint64_t id, std::string_view method);
  absl::Status Explain(const absl::Status& status, std::string_view method) const;

  int fd_ = -1;
  absl::Duration timeout_;
  int64_t deadline_ns_ = 0;  // CLOCK_MONOTONIC: when the call in progress gives up
  std::vector<int> received_fds_;  // arrived during the call in progress
  uint64_t next_id_ = 1;
  LineBuffer in_;
};

}  // namespace metaroce::control
