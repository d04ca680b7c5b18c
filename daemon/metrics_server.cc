#include "daemon/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/config.h"
#include "daemon/prometheus_text.h"

namespace metaroce::daemon {
namespace {

constexpr absl::Duration kDrainTime = absl::Seconds(1);

absl::string_view Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

std::string Error(int status, absl::string_view why, bool head_only = false,
                  const std::string& extra_headers = "") {
  return HttpResponse(status, "text/plain; charset=utf-8", absl::StrCat(why, "\n"), head_only,
                      extra_headers);
}

// RFC 9110 token characters (a method).
bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
          absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos)) {
      return false;
    }
  }
  return true;
}

// Where the request head ends (just past the blank line), or npos.
size_t HeadEnd(const std::string& buf) {
  size_t crlf = buf.find("\r\n\r\n");
  size_t lf = buf.find("\n\n");
  if (crlf != std::string::npos) crlf += 4;
  if (lf != std::string::npos) lf += 2;
  return std::min(crlf, lf);
}

struct Client {
  int fd = -1;
  enum class Phase { kReading, kWriting, kDraining } phase = Phase::kReading;
  std::string in;
  std::string out;
  size_t written = 0;
  absl::Time deadline;
};

}  // namespace

std::string HttpResponse(int status, const std::string& content_type, const std::string& body,
                         bool head_only, const std::string& extra_headers) {
  std::string r = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ",
                               content_type, "\r\nContent-Length: ", body.size(),
                               "\r\nConnection: close\r\n", extra_headers, "\r\n");
  if (!head_only) r += body;
  return r;
}

std::string MetricsServer::Respond(const std::string& head,
                                   const std::function<std::string()>& render) {
  const size_t eol = head.find('\n');
  absl::string_view line(head.data(), eol == std::string::npos ? head.size() : eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty() ||
      !absl::StartsWith(parts[2], "HTTP/")) {
    return Error(400, "bad request line: expected 'GET /metrics HTTP/1.1'");
  }
  const absl::string_view method = parts[0], target = parts[1], version = parts[2];
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Error(505, absl::StrCat("HTTP version ", version, " is not supported: HTTP/1.1"));
  }
  if (target.front() != '/') {
    return Error(400, "bad request target: expected a path (/metrics)");
  }
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    return Error(405, absl::StrCat("method ", method, " is not allowed: GET or HEAD"), false,
                 "Allow: GET, HEAD\r\n");
  }
  const absl::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") {
    return Error(404, "not found: metrics are at /metrics", head_only);
  }
  return HttpResponse(200, std::string(kPrometheusContentType), render(), head_only);
}

std::optional<std::string> MetricsServer::AnswerTo(const std::string& received,
                                                   size_t max_request_bytes,
                                                   const std::function<std::string()>& render) {
  const size_t end = HeadEnd(received);
  if (end != std::string::npos && end <= max_request_bytes) {
    return Respond(received.substr(0, end), render);
  }
  if (received.size() > max_request_bytes) {
    return Error(431, absl::StrCat("request head larger than ", max_request_bytes, " bytes"));
  }
  return std::nullopt;
}

MetricsServer::MetricsServer(MetricsServerOptions options) : options_(std::move(options)) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(MetricsServerOptions options) {
  std::unique_ptr<MetricsServer> s(new MetricsServer(std::move(options)));
  if (absl::Status st = s->Open(); !st.ok()) return st;
  s->thread_ = std::thread([server = s.get()] { server->Loop(); });
  return s;
}

absl::Status MetricsServer::Open() {
  absl::StatusOr<ListenAddress> a = ParseListenAddress(options_.listen, /*allow_port_zero=*/true);
  if (!a.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("metrics_listen: ", a.status().message()));
  }
  if (!options_.render) return absl::InvalidArgumentError("metrics server: no render function");
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (a->v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(a->port);
    inet_pton(AF_INET6, a->ip.c_str(), &sin6->sin6_addr);
    len = sizeof(*sin6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(a->port);
    inet_pton(AF_INET, a->ip.c_str(), &sin->sin_addr);
    len = sizeof(*sin);
  }
  const std::string where = absl::StrCat("metrics_listen ", options_.listen);
  listen_fd_ = socket(a->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": socket: ", std::strerror(errno)));
  }
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (a->v6) setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": ", std::strerror(err),
        err == EADDRINUSE ? " (another process listens there: set another metrics_listen, or off)"
        : err == EADDRNOTAVAIL ? " (no interface has this address here)"
                               : ""));
  }
  if (listen(listen_fd_, 64) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": listen: ", std::strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  port_ = ntohs(a->v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  address_ = a->v6 ? absl::StrCat("[", a->ip, "]:", port_) : absl::StrCat(a->ip, ":", port_);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("eventfd for the metrics server: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
}

void MetricsServer::Loop() {
  std::vector<Client> clients;
  auto finish = [&](Client& c, std::string response) {
    c.out = std::move(response);
    c.written = 0;
    c.phase = Client::Phase::kWriting;
    c.deadline = absl::Now() + options_.response_timeout;
  };
  while (!stop_.load()) {
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const Client& c : clients) {
      fds.push_back({c.fd, static_cast<short>(c.phase == Client::Phase::kWriting ? POLLOUT : POLLIN),
                     0});
      next = std::min(next, c.deadline);
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 60000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (stop_.load()) break;
    const absl::Time now = absl::Now();

    // Clients first (fds[2 + i] is clients[i]); accepting afterwards keeps the indices valid.
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      const short revents = fds[2 + i].revents;
      bool done = false;
      if (c.phase == Client::Phase::kReading && (revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[4096];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          if (std::optional<std::string> answer =
                  AnswerTo(c.in, options_.max_request_bytes, options_.render)) {
            finish(c, *std::move(answer));
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          done = true;  // closed before a complete request, or an error: nothing to answer
        }
      } else if (c.phase == Client::Phase::kWriting && (revents & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n =
            send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
        if (n > 0) {
          c.written += static_cast<size_t>(n);
          if (c.written == c.out.size()) {
            shutdown(c.fd, SHUT_WR);
            std::string().swap(c.out);
            std::string().swap(c.in);
            c.phase = Client::Phase::kDraining;
            c.deadline = now + kDrainTime;
          }
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          done = true;
        }
      } else if (c.phase == Client::Phase::kDraining && (revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[4096];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) done = true;
      }
      if (!done && now >= c.deadline) {
        if (c.phase == Client::Phase::kReading) {
          finish(c, Error(408, absl::StrCat("no complete request within ",
                                            absl::FormatDuration(options_.request_timeout))));
        } else {
          done = true;  // does not read its response, or lingers after it
        }
      }
      if (done) {
        close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(clients, [](const Client& c) { return c.fd < 0; });

    if (fds[1].revents & POLLIN) {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN: none left; anything else: try again at the next poll
        if (clients.size() >= options_.max_clients) {
          const std::string busy = Error(503, "too many clients; try again");
          [[maybe_unused]] ssize_t n = send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
          close(fd);
          continue;
        }
        Client c;
        c.fd = fd;
        c.deadline = absl::Now() + options_.request_timeout;
        clients.push_back(std::move(c));
      }
    }
  }
  for (Client& c : clients) close(c.fd);
}

}  // namespace metaroce::daemon
