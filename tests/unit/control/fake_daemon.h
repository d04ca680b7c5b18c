// A stand-in for metaroced in unit tests: a Unix stream socket in a fresh mkdtemp directory and
// one thread that accepts a single connection and runs the test's handler on it.
//
// Threading: the handler runs on the server thread; the destructor joins it (a handler waiting
// for the client's EOF therefore needs the client closed first: declare the FakeDaemon before
// the client). The directory and socket are removed on destruction.
#pragma once

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "lib/control/protocol.h"

namespace metaroce::control::testing {

class FakeDaemon {
 public:
  using Handler = std::function<void(int fd)>;

  explicit FakeDaemon(Handler handler) {
    char dir_template[] = "/tmp/mrctl-test-XXXXXX";
    dir_ = mkdtemp(dir_template);
    path_ = dir_ + "/metaroced.sock";
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(listen_fd_, 4);
    thread_ = std::thread([this, handler = std::move(handler)] { Serve(handler); });
  }
  ~FakeDaemon() {
    thread_.join();
    close(listen_fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

  // Reads one request line from `fd` (blocking); nullopt at EOF.
  static std::optional<std::string> ReadLine(int fd) {
    std::string line;
    char c;
    while (true) {
      const ssize_t n = read(fd, &c, 1);
      if (n <= 0) return std::nullopt;
      if (c == '\n') return line;
      line += c;
    }
  }
  static void WriteAll(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  static void WaitForEof(int fd) {
    while (ReadLine(fd)) {
    }
  }
  // Answers one request with `result` (or `error` when not OK), echoing its id.
  static std::optional<Request> AnswerOne(int fd, const Json& result,
                                          const absl::Status& error = absl::OkStatus()) {
    std::optional<std::string> line = ReadLine(fd);
    if (!line) return std::nullopt;
    absl::StatusOr<Request> request = ParseRequest(*line);
    if (!request.ok()) return std::nullopt;
    Response response;
    response.id = request->id;
    response.status = error;
    response.result = result;
    WriteAll(fd, SerializeResponse(response));
    return *request;
  }

 private:
  void Serve(const Handler& handler) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 10'000) != 1) return;  // the test never connected
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    handler(fd);
    close(fd);
  }

  std::string dir_;
  std::string path_;
  int listen_fd_ = -1;
  std::thread thread_;
};

}  // namespace metaroce::control::testing
