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

  // Listens on bind_address:port (port 0: an ephemeral port, see local_port()).
  static absl::StatusOr<ExchangeSocket> Listen(std::string_view bind_address, uint16_t port);
  // Connects to host:port (numeric address or name) before `deadline`.
  static absl::StatusOr<ExchangeSocket> Connect(std::string_view host, uint16_t port,
                                                absl::Time deadline);
  // On a listening socket: the next client, before `deadline`.
  absl::StatusOr<ExchangeSocket> Accept(absl::Time deadline);

  absl::Status SendMessage(std::span<const std::byte> body, absl::Time deadline);
  absl::StatusOr<std::vector<std::byte>> ReceiveMessage(absl::Time deadline);

  uint16_t local_port() const;
  std::string peer_name() const;  // "address:port", for error messages
  int fd() const { return fd_; }

 private:
  absl::Status WaitFor(short events, absl::Time deadline, std::string_view what);
  absl::Status WriteAll(std::span<const std::byte> bytes, absl::Time deadline);
  absl::Status ReadAll(std::span<std::byte> bytes, absl::Time deadline);

  int fd_ = -1;
};

}  // namespace metaroce::api
