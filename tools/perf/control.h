// mrperf's control connection (TCP, -p PORT): the test parameters, round start/stop and the
// results each side tells the other, as perftest's own socket exchange does. Distinct from the
// connection exchange of lib/api, which runs on an ephemeral port the server announces here.
//
// Message: length-framed (lib/api/exchange_socket.h) text "kind\nkey=value\n...". Values are
// single-line. A message of kind "error" carries a one-line reason ("why") that Receive() returns
// as a FailedPrecondition naming the peer.
//
// Threading: one thread at a time per channel.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/api/exchange_socket.h"
#include "tools/perf/options.h"
#include "tools/perf/report.h"

namespace metaroce::perf {

struct ControlMessage {
  std::string kind;
  std::map<std::string, std::string, std::less<>> fields;

  ControlMessage& Set(std::string_view key, std::string_view value);
  ControlMessage& Set(std::string_view key, uint64_t value);
  ControlMessage& SetDouble(std::string_view key, double value);
  // NotFound / InvalidArgument naming the key.
  absl::StatusOr<std::string> Get(std::string_view key) const;
  absl::StatusOr<uint64_t> GetU64(std::string_view key) const;
  absl::StatusOr<double> GetDouble(std::string_view key) const;
  uint64_t U64Or(std::string_view key, uint64_t fallback) const;
};

class ControlChannel {
 public:
  static absl::StatusOr<ControlChannel> Connect(std::string_view host, uint16_t port,
                                                absl::Duration timeout);
  static absl::StatusOr<ControlChannel> Accept(api::ExchangeSocket& listener, absl::Time deadline);

  absl::Status Send(const ControlMessage& m, absl::Duration timeout = absl::Seconds(10));
  // Receives the next message; it must be of kind `expected` (any when empty; "error" is
  // returned as its reason).
  absl::StatusOr<ControlMessage> Receive(std::string_view expected, absl::Time deadline);
  // Sends an "error" message (best effort).
  void SendError(std::string_view why);
  // Whether a message is waiting (poll with no wait).
  bool Readable() const;
  std::string peer_name() const { return socket_.peer_name(); }

 private:
  explicit ControlChannel(api::ExchangeSocket s) : socket_(std::move(s)) {}
  api::ExchangeSocket socket_;
};

// A latency round's result as it travels to the server in "round_done" (both directions of the
// same field list, so the two ends never disagree on a name).
void PutLatency(ControlMessage& m, const LatResult& r);
LatResult LatencyFrom(const ControlMessage& m, uint64_t size);

// A server's first steps, the same for every test: listen on the control port (-p), call
// `ready` and say on stderr that it waits, accept one client (interruptible by SIGINT/SIGTERM)
// and receive its "hello" within options.timeout_s. Errors name the fix (port in use: another
// mrperf? use -p).
struct ClientGreeting {
  ControlChannel channel;
  ControlMessage hello;
};
absl::StatusOr<ClientGreeting> AwaitClient(const PerfOptions& options,
                                           const std::function<void()>& ready);

}  // namespace metaroce::perf
