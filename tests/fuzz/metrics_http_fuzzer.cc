// Fuzz target for the metrics server's HTTP request handling (daemon/metrics_server.h): what any
// client that reaches the /metrics port sends. The input is delivered in pieces, as recv()
// would, to MetricsServer::AnswerTo, the step the server's loop takes after every read.
//
// Input: byte 0 is the piece size (1 + value % 64), byte 1 the request head limit
// (16 + 4 * value: 16..1036), the rest the bytes the client sends.
//
// What must hold:
//   - no crash, no read outside the bytes (AddressSanitizer);
//   - no answer before the head is complete (a blank line) unless it is over the limit (431),
//     and once over the limit always an answer;
//   - every answer is a well-formed HTTP/1.1 response: a status line with a known code, headers
//     ending in a blank line, Content-Length equal to the body (none for HEAD), Connection: close;
//   - 200 only for GET or HEAD of /metrics, and the metrics are rendered only for a 200, once.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "daemon/metrics_server.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::daemon {
namespace {

constexpr std::string_view kBody = "# TYPE m gauge\nm 1\n";

bool HasBlankLine(std::string_view s) {
  return s.find("\r\n\r\n") != std::string_view::npos || s.find("\n\n") != std::string_view::npos;
}

void CheckAnswer(const std::string& received, const std::string& answer, int renders) {
  static const std::set<std::string_view> kCodes = {"200", "400", "404", "405", "431", "505"};
  FUZZ_CHECK(absl::StartsWith(answer, "HTTP/1.1 "));
  const std::string_view code = std::string_view(answer).substr(9, 3);
  FUZZ_CHECK(kCodes.count(code) == 1);
  const size_t head_end = answer.find("\r\n\r\n");
  FUZZ_CHECK(head_end != std::string::npos);
  const std::string_view head = std::string_view(answer).substr(0, head_end + 2);
  const std::string_view body = std::string_view(answer).substr(head_end + 4);
  FUZZ_CHECK(head.find("\r\nConnection: close\r\n") != std::string_view::npos);
  const size_t cl = head.find("\r\nContent-Length: ");
  FUZZ_CHECK(cl != std::string_view::npos);
  const size_t cl_end = head.find("\r\n", cl + 2);
  size_t length = 0;
  const std::string_view digits = head.substr(cl + 18, cl_end - cl - 18);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
  FUZZ_CHECK(ec == std::errc() && end == digits.data() + digits.size());
  const bool head_request = absl::StartsWith(received, "HEAD ");
  if (code == "200") {
    FUZZ_CHECK(absl::StartsWith(received, "GET /metrics") ||
               absl::StartsWith(received, "HEAD /metrics"));
    FUZZ_CHECK(renders == 1);
    FUZZ_CHECK(length == kBody.size());
    FUZZ_CHECK(body == (head_request ? std::string_view() : kBody));
  } else {
    FUZZ_CHECK(renders == 0);
    FUZZ_CHECK(body.empty() || body.size() == length);
  }
  if (code == "431") FUZZ_CHECK(body.size() == length);
}

}  // namespace
}  // namespace metaroce::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::daemon;
  if (size < 2) return 0;
  const size_t piece = 1 + data[0] % 64;
  const size_t limit = 16 + 4 * size_t{data[1]};
  const std::string_view stream(reinterpret_cast<const char*>(data) + 2, size - 2);
  int renders = 0;
  const auto render = [&] {
    ++renders;
    return std::string(kBody);
  };
  std::string received;
  for (size_t at = 0; at < stream.size(); at += piece) {
    received.append(stream.substr(at, piece));
    const std::optional<std::string> answer = MetricsServer::AnswerTo(received, limit, render);
    if (!answer) {
      // Waiting: no complete head within the limit, and not over it.
      FUZZ_CHECK(received.size() <= limit);
      FUZZ_CHECK(!HasBlankLine(received));
      continue;
    }
    FUZZ_CHECK(HasBlankLine(received) || received.size() > limit);
    CheckAnswer(received, *answer, renders);
    return 0;  // the server answers once and closes
  }
  FUZZ_CHECK(renders == 0);
  return 0;
}
