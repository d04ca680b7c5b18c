// A small HTTP/1.1 server for Prometheus: `GET /metrics` (and HEAD) answers the exposition text
// (daemon/metrics.h) with Content-Type kPrometheusContentType.
//
// Answers: 200 for GET or HEAD of /metrics (a query string is ignored); 404 for another path;
// 405 (with `Allow: GET, HEAD`) for another method; 400 for a request line that is not
// `METHOD SP /TARGET SP HTTP/1.x`; 505 for another HTTP version; 431 when the request head
// (request line and headers) exceeds max_request_bytes; 408 when it has not fully arrived within
// request_timeout; 503 to a client beyond max_clients. One request per connection: every
// response carries `Connection: close` and a Content-Length, then the server closes (after
// draining what the client still sends, for at most a second, so that it reads the answer
// rather than a reset). A request body is not read.
//
// Bounded: a client holds at most max_request_bytes of buffer, and the server at most
// max_clients of them; a client that does not send its request within request_timeout, or does
// not read its response within response_timeout, is dropped. No client can hold the server, and
// the server holds nothing of the daemon: it runs on a thread of its own (one poll() loop over
// the listening socket and the clients), and `render` (the body of /metrics) is called on that
// thread, per 200 answer to GET (HEAD renders too, for the length); it must be safe to call
// from a thread other than the control server's and the engine's.
//
// Errors: Start returns FailedPrecondition naming the address and the reason (e.g. the port is
// taken). Requests are not logged (a client could flood the log); nothing a client sends can
// stop the server.
//
// Threading: Start, Stop and the destructor from one thread; Stop waits for a render in
// progress to return.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace metaroce::daemon {

struct MetricsServerOptions {
  std::string listen;  // "IP:PORT" or "[IPv6]:PORT"; port 0: any free port (tests; see port())
  std::function<std::string()> render;
  size_t max_request_bytes = 8192;  // request line and headers
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration response_timeout = absl::Seconds(30);
  size_t max_clients = 16;
};

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(MetricsServerOptions options);
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Closes the listening socket and every client; joins the thread.
  void Stop();
  // The bound address, e.g. "127.0.0.1:9469" or "[::1]:9469".
  const std::string& address() const { return address_; }
  uint16_t port() const { return port_; }

  // The response to one request head (everything up to and including the blank line), as the
  // server sends it; `render` is called only for a 200 answer. Pure apart from `render`
  // (unit tests).
  static std::string Respond(const std::string& head, const std::function<std::string()>& render);
  // What the server sends a client that has sent `received` so far: Respond() to the head once
  // it is complete within max_request_bytes, 431 once `received` is over max_request_bytes
  // without a complete head, nullopt while more bytes are needed. Pure apart from `render` (unit
  // tests; tests/fuzz/metrics_http_fuzzer.cc).
  static std::optional<std::string> AnswerTo(const std::string& received,
                                             size_t max_request_bytes,
                                             const std::function<std::string()>& render);

 private:
  explicit MetricsServer(MetricsServerOptions options);
  absl::Status Open();
  void Loop();

  MetricsServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() wakes the loop
  std::string address_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A complete response with a text/plain body (error answers; tests).
std::string HttpResponse(int status, const std::string& content_type, const std::string& body,
                         bool head_only = false, const std::string& extra_headers = "");

}  // namespace metaroce::daemon
