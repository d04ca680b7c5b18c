#include "lib/api/exchange_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/api/exchange.h"

namespace metaroce::api {
namespace {

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::ErrnoToStatus(errno, "fcntl(O_NONBLOCK) on the exchange socket");
  }
  return absl::OkStatus();
}

std::string SockaddrName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return absl::StrCat(host, ":", port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      // An IPv4 client of a dual-stack listener: named as the IPv4 host it is, as it would be
      // on an IPv4 listener (the daemon records the peer's address from this name).
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof(host));
      return absl::StrCat(host, ":", ntohs(a->sin6_port));
    }
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  return "?";
}

}  // namespace

ExchangeSocket::~ExchangeSocket() {
  if (fd_ >= 0) close(fd_);
}

ExchangeSocket& ExchangeSocket::operator=(ExchangeSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

absl::StatusOr<ExchangeSocket> ExchangeSocket::Listen(std::string_view bind_address,
                                                      uint16_t port) {
  if (IsWildcardAddress(bind_address)) {
    // Every address of both families: one IPv6 socket that also accepts IPv4 clients (as
    // ::ffff:a.b.c.d), whatever net.ipv6.bindv6only says. A host without IPv6 (no AF_INET6,
    // or its addresses disabled) gets the IPv4 wildcard instead.
    absl::StatusOr<ExchangeSocket> dual = ListenDualStack(port);
    if (dual.ok() || !absl::IsUnavailable(dual.status())) return dual;
    return ListenOn("0.0.0.0", port);
  }
  return ListenOn(bind_address, port);
}

bool ExchangeSocket::IsWildcardAddress(std::string_view bind_address) {
  return bind_address.empty() || bind_address == "::";
}

absl::StatusOr<ExchangeSocket> ExchangeSocket::ListenDualStack(uint16_t port) {
  ExchangeSocket s(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd_ < 0) {
    if (errno == EAFNOSUPPORT) return absl::UnavailableError("this host has no IPv6");
    return absl::ErrnoToStatus(errno, "socket(AF_INET6) for the exchange listener");
  }
  const int one = 1, zero = 0;
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (setsockopt(s.fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0) {
    return absl::ErrnoToStatus(errno, "IPV6_V6ONLY off on the exchange listener");
  }
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_addr = in6addr_any;
  any.sin6_port = htons(port);
  if (bind(s.fd_, reinterpret_cast<const sockaddr*>(&any), sizeof(any)) < 0) {
    if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT) {
      return absl::UnavailableError("IPv6 is disabled on this host");
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("bind to [::] port ", port,
                                                   " (is another listener using it?)"));
  }
  if (listen(s.fd_, 16) < 0) return absl::ErrnoToStatus(errno, "listen() on the exchange socket");
  if (absl::Status st = SetNonBlocking(s.fd_); !st.ok()) return st;
  return s;
}

absl::StatusOr<ExchangeSocket> ExchangeSocket::ListenOn(std::string_view bind_address,
                                                        uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string host(bind_address);
  const std::string service = absl::StrCat(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", host, "': ", gai_strerror(rc),
                     " (a numeric IPv4 or IPv6 address; empty or :: for every address)"));
  }
  ExchangeSocket s(socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0));
  if (s.fd_ < 0) {
    freeaddrinfo(res);
    return absl::ErrnoToStatus(errno, "socket() for the exchange listener");
  }
  const int one = 1;
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const int rc = bind(s.fd_, res->ai_addr, res->ai_addrlen);
  const int bind_errno = errno;
  freeaddrinfo(res);
  if (rc < 0) {
    return absl::ErrnoToStatus(bind_errno, absl::StrCat("bind to ", host, " port ", port,
                                                        " (is another listener using it?)"));
  }
  if (listen(s.fd_, 16) < 0) return absl::ErrnoToStatus(errno, "listen() on the exchange socket");
  if (absl::Status st = SetNonBlocking(s.fd_); !st.ok()) return st;
  return s;
}

absl::StatusOr<ExchangeSocket> ExchangeSocket::Connect(std::string_view host, uint16_t port,
                                                       absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string h(host);
  const std::string service = absl::StrCat(port);
  if (int rc = getaddrinfo(h.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("peer address '", h, "': ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address to connect to");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    ExchangeSocket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.fd_ < 0) {
      last = absl::ErrnoToStatus(errno, "socket() for the exchange");
      continue;
    }
    if (connect(s.fd_, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
      last = absl::ErrnoToStatus(errno, absl::StrCat("connect to ", h, " port ", port));
      continue;
    }
    last = s.WaitFor(POLLOUT, deadline, absl::StrCat("connecting to ", h, " port ", port));
    if (!last.ok()) continue;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = absl::ErrnoToStatus(err, absl::StrCat("connect to ", h, " port ", port,
                                                   " (is the server listening?)"));
      continue;
    }
    const int one = 1;
    setsockopt(s.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    freeaddrinfo(res);
    return s;
  }
  freeaddrinfo(res);
  return last;
}

absl::StatusOr<ExchangeSocket> ExchangeSocket::Accept(absl::Time deadline) {
  while (true) {
    if (absl::Status s = WaitFor(POLLIN, deadline, "waiting for a client"); !s.ok()) return s;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return ExchangeSocket(fd);
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      return absl::ErrnoToStatus(errno, "accept() on the exchange listener");
    }
  }
}

absl::Status ExchangeSocket::WaitFor(short events, absl::Time deadline, std::string_view what) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out ", std::string(what)));
    }
    pollfd p{fd_, events, 0};
    // At most a second per poll(); an infinite deadline must not overflow into a zero timeout
    // (which would turn this wait into a busy loop).
    const int ms = left >= absl::Seconds(1)
                       ? 1000
                       : static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    const int rc = poll(&p, 1, ms);
    if (rc < 0 && errno != EINTR) return absl::ErrnoToStatus(errno, absl::StrCat("poll ", std::string(what)));
    if (rc > 0) return absl::OkStatus();
  }
}

absl::Status ExchangeSocket::WriteAll(std::span<const std::byte> bytes, absl::Time deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("sending the connection exchange: ", std::strerror(errno)));
    }
    if (absl::Status s = WaitFor(POLLOUT, deadline, "sending the connection exchange"); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ExchangeSocket::ReadAll(std::span<std::byte> bytes, absl::Time deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = recv(fd_, bytes.data() + done, bytes.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError("the peer closed the connection exchange before finishing");
    }
    if (errno != EAGAIN && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("receiving the connection exchange: ", std::strerror(errno)));
    }
    if (absl::Status s = WaitFor(POLLIN, deadline, "waiting for the peer's exchange message");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ExchangeSocket::SendMessage(std::span<const std::byte> body, absl::Time deadline) {
  if (body.size() > kMaxExchangeBytes) {
    return absl::InvalidArgumentError("exchange message exceeds kMaxExchangeBytes");
  }
  const uint32_t n = static_cast<uint32_t>(body.size());
  const std::byte prefix[4] = {std::byte(n >> 24), std::byte(n >> 16), std::byte(n >> 8),
                               std::byte(n)};
  if (absl::Status s = WriteAll(prefix, deadline); !s.ok()) return s;
  return WriteAll(body, deadline);
}

absl::StatusOr<std::vector<std::byte>> ExchangeSocket::ReceiveMessage(absl::Time deadline) {
  std::byte prefix[4];
  if (absl::Status s = ReadAll(prefix, deadline); !s.ok()) return s;
  const uint32_t n = (uint32_t(prefix[0]) << 24) | (uint32_t(prefix[1]) << 16) |
                     (uint32_t(prefix[2]) << 8) | uint32_t(prefix[3]);
  if (n > kMaxExchangeBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed connection exchange: a frame of ", n, " bytes (limit ", kMaxExchangeBytes,
        "); is the peer a MetaRoCE process?"));
  }
  std::vector<std::byte> body(n);
  if (absl::Status s = ReadAll(body, deadline); !s.ok()) return s;
  return body;
}

uint16_t ExchangeSocket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) < 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string ExchangeSocket::peer_name() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) < 0) return "?";
  return SockaddrName(ss);
}

}  // namespace metaroce::api
