// Fuzz target for the control protocol's codec (lib/control/json.h, lib/control/protocol.h): what
// metaroced reads from any local client of its control socket, and what clients read back.
//
// The input is used three ways:
//   - as JSON text: Json::Parse either refuses it with an InvalidArgument that names the byte
//     offset, or accepts it, and then the value survives Dump -> Parse (numbers compared by value:
//     Dump writes six significant digits), the second Dump is a fixed point, Dump(2) parses to the
//     same value as Dump(), and one-line Dump has no newline (the protocol's framing);
//   - as one request line and one response line: ParseRequest / ParseResponse refuse with a
//     message or accept, and an accepted message serializes to one line that parses back to
//     the same id, method, status and parameters;
//   - as a byte stream cut into chunks (sizes from the first byte) for LineBuffer with a small
//     line limit: every line it returns is a line of the stream, in order, and once it refuses an
//     over-long line (the server then closes) nothing is read past it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "lib/control/json.h"
#include "lib/control/protocol.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::control {
namespace {

// Same value, numbers compared by value with Dump's six significant digits of slack.
bool Equivalent(const Json& a, const Json& b) {
  const bool a_num = a.type() == Json::Type::kInt || a.type() == Json::Type::kUint ||
                     a.type() == Json::Type::kDouble;
  const bool b_num = b.type() == Json::Type::kInt || b.type() == Json::Type::kUint ||
                     b.type() == Json::Type::kDouble;
  if (a_num || b_num) {
    if (!(a_num && b_num)) return false;
    if (a.type() != Json::Type::kDouble && b.type() != Json::Type::kDouble) return a == b;
    const double x = *a.AsDouble(), y = *b.AsDouble();
    if (x == y) return true;
    return std::fabs(x - y) <= 1e-5 * std::max(std::fabs(x), std::fabs(y));
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Json::Type::kArray: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!Equivalent(a.array()[i], b.array()[i])) return false;
      }
      return true;
    }
    case Json::Type::kObject: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (a.object()[i].first != b.object()[i].first) return false;
        if (!Equivalent(a.object()[i].second, b.object()[i].second)) return false;
      }
      return true;
    }
    default:
      return a == b;
  }
}

void CheckJson(std::string_view text) {
  absl::StatusOr<Json> v1 = Json::Parse(text);
  if (!v1.ok()) {
    FUZZ_CHECK(v1.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(v1.status().message().find(" at byte ") != std::string_view::npos);
    return;
  }
  const std::string t1 = v1->Dump();
  FUZZ_CHECK(t1.find('\n') == std::string::npos);
  absl::StatusOr<Json> v2 = Json::Parse(t1);
  FUZZ_CHECK(v2.ok());
  FUZZ_CHECK(Equivalent(*v1, *v2));
  const std::string t2 = v2->Dump();
  absl::StatusOr<Json> v3 = Json::Parse(t2);
  FUZZ_CHECK(v3.ok());
  FUZZ_CHECK(v3->Dump() == t2);
  absl::StatusOr<Json> pretty = Json::Parse(v1->Dump(2));
  FUZZ_CHECK(pretty.ok());
  FUZZ_CHECK(*pretty == *v2);
}

// One line, newline-terminated, no other newline.
void CheckLine(const std::string& line) {
  FUZZ_CHECK(!line.empty() && line.back() == '\n');
  FUZZ_CHECK(line.find('\n') == line.size() - 1);
}

void CheckRequest(std::string_view text) {
  uint64_t id = 12345;
  absl::StatusOr<Request> request = ParseRequest(text, &id);
  if (!request.ok()) {
    FUZZ_CHECK(!request.status().message().empty());
    return;
  }
  FUZZ_CHECK(id == request->id);
  FUZZ_CHECK(!request->method.empty());
  FUZZ_CHECK(request->params.is_object());
  const std::string line = SerializeRequest(*request);
  CheckLine(line);
  absl::StatusOr<Request> again = ParseRequest(std::string_view(line).substr(0, line.size() - 1));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->id == request->id);
  FUZZ_CHECK(again->method == request->method);
  FUZZ_CHECK(Equivalent(again->params, request->params));
}

void CheckResponse(std::string_view text) {
  absl::StatusOr<Response> response = ParseResponse(text);
  if (!response.ok()) {
    FUZZ_CHECK(!response.status().message().empty());
    return;
  }
  const std::string line = SerializeResponse(*response);
  CheckLine(line);
  absl::StatusOr<Response> again =
      ParseResponse(std::string_view(line).substr(0, line.size() - 1));
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->id == response->id);
  FUZZ_CHECK(again->status.code() == response->status.code());
  FUZZ_CHECK(again->status.message() == response->status.message());
  if (response->status.ok()) FUZZ_CHECK(Equivalent(again->result, response->result));
}

void CheckLineBuffer(std::string_view stream, uint8_t shape) {
  const size_t max_line = 8 + (shape & 0x3f);  // small, so that refusals happen
  const size_t chunk = 1 + (shape >> 6) * 7;
  LineBuffer lines(max_line);
  size_t fed = 0, matched = 0;  // bytes appended; bytes of `stream` accounted for by lines
  while (fed < stream.size()) {
    const size_t n = std::min(chunk, stream.size() - fed);
    const absl::Status st = lines.Append(std::span<const char>(stream.data() + fed, n));
    fed += n;
    while (std::optional<std::string> line = lines.NextLine()) {
      FUZZ_CHECK(line->size() + 1 <= max_line);
      FUZZ_CHECK(stream.substr(matched, line->size() + 1) == *line + "\n");
      matched += line->size() + 1;
    }
    if (!st.ok()) {
      FUZZ_CHECK(st.code() == absl::StatusCode::kResourceExhausted);
      // The refused line starts where the returned ones end and has no newline within limits.
      const size_t nl = stream.find('\n', matched);
      FUZZ_CHECK(nl == std::string_view::npos || nl - matched + 1 > max_line);
      FUZZ_CHECK(fed - matched >= max_line);
      return;
    }
  }
  // Everything up to the last newline came out as lines; the rest waits for its newline.
  const size_t last_nl = stream.rfind('\n');
  FUZZ_CHECK(matched == (last_nl == std::string_view::npos ? 0 : last_nl + 1));
}

}  // namespace
}  // namespace metaroce::control

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::control;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckJson(text);
  CheckRequest(text);
  CheckResponse(text);
  if (size > 0) CheckLineBuffer(text.substr(1), data[0]);
  return 0;
}
