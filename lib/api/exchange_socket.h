// The TCP socket that carries the connection exchange (lib/api/exchange.h): length-prefixed
// messages with a deadline on every operation, so a silent or slow peer costs at most the
// caller's timeout.
//
// Threading: one thread at a time per socket. Ownership: the socket closes its fd.
// Errors: DeadlineExceeded on timeout, Unavailable when the peer closed or the network failed
// (errno text included), InvalidArgument for a frame longer than kMaxExchangeBytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace metaroce::api {

class ExchangeSocket {
 public:
  ExchangeSocket() = default;
  explicit ExchangeSocket(int fd) : fd_(fd) {}
  ~ExchangeSocket();
  ExchangeSocket(ExchangeSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ExchangeSocket& operator=(ExchangeSocket&& o) noexcept;

  // Listens on bind_address:port (port 0: an ephemeral port, see local_port()). bind_address is
  // a numeric IPv4 or IPv6 address, or a wildcard (IsWildcardAddress: "" or "::"), which listens
  // on every address of both families: [::] with IPV6_V6ONLY off, so that IPv4 clients arrive
  // as ::ffff:a.b.c.d; on a host without IPv6 it falls back to 0.0.0.0. "0.0.0.0" listens on
  // every IPv4 address only. InvalidArgument for an address that is not numeric.
  static absl::StatusOr<ExchangeSocket> Listen(std::string_view bind_address, uint16_t port);
  // True for the bind addresses Listen treats as "every address, IPv4 and IPv6".
  static bool IsWildcardAddress(std::string_view bind_address);
  // Connects to host:port (numeric address or name) before `deadline`.
  static absl::StatusOr<ExchangeSocket> Connect(std::string_view host, uint16_t port,
                                                absl::Time deadline);
  // On a listening socket: the next client, before `deadline`.
  absl::StatusOr<ExchangeSocket> Accept(absl::Time deadline);

  absl::Status SendMessage(std::span<const std::byte> body, absl::Time deadline);
  absl::StatusOr<std::vector<std::byte>> ReceiveMessage(absl::Time deadline);

  uint16_t local_port() const;
  // "a.b.c.d:port" or "[v6]:port" (an IPv4 client of a dual-stack listener as a.b.c.d).
  std::string peer_name() const;
  int fd() const { return fd_; }

 private:
  // [::] with IPV6_V6ONLY off; Unavailable when the host has no IPv6 (the caller falls back).
  static absl::StatusOr<ExchangeSocket> ListenDualStack(uint16_t port);
  static absl::StatusOr<ExchangeSocket> ListenOn(std::string_view bind_address, uint16_t port);
  absl::Status WaitFor(short events, absl::Time deadline, std::string_view what);
  absl::Status WriteAll(std::span<const std::byte> bytes, absl::Time deadline);
  absl::Status ReadAll(std::span<std::byte> bytes, absl::Time deadline);

  int fd_ = -1;
};

}  // namespace metaroce::api
