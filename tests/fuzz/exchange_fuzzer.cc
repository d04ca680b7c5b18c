// Fuzz target for the connection set-up exchange (lib/api/exchange.h): the messages a peer sends
// over TCP before a connection exists (DecodeExchange), and the same body as hex text that an
// application hands metaroced in qp.create (DecodeExchangeHex).
//
// What must hold for every input:
//   - no crash, no read outside the body (AddressSanitizer);
//   - a refusal is InvalidArgument (or FailedPrecondition for another version) with a message;
//   - the encoding is canonical: an accepted body re-encodes to exactly the same bytes, and the
//     hex form decodes to the same message;
//   - the parameters of an accepted REQUEST/REPLY are compatible with themselves, and the core
//     config built from them (as metaroced builds it, MakeConnectionConfig) is either accepted
//     by core::Endpoint::CreateConnection or refused with a reason: the peer's values never
//     crash the core or make it allocate without bound.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "lib/api/exchange.h"
#include "lib/core/endpoint.h"
#include "lib/core/packet_sink.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::api {
namespace {

class DiscardingSink : public core::PacketSink {
 public:
  void Transmit(const core::TxMeta&, std::span<const std::byte>,
                std::span<const std::byte>) override {}
};

bool SameMessage(const ExchangeMessage& a, const ExchangeMessage& b) {
  const ConnectionParameters& p = a.params;
  const ConnectionParameters& q = b.params;
  return a.kind == b.kind && a.reason == b.reason && p.conn_id == q.conn_id &&
         p.token == q.token && p.path_count == q.path_count &&
         p.initial_ports == q.initial_ports && p.plane_addresses == q.plane_addresses &&
         p.profile.recovery == q.profile.recovery && p.profile.placement == q.profile.placement &&
         p.profile.spray == q.profile.spray &&
         p.profile.reorder_buffer_bytes == q.profile.reorder_buffer_bytes &&
         p.ordered_completion == q.ordered_completion && p.mtu == q.mtu &&
         p.max_send_queue == q.max_send_queue && p.max_recv_queue == q.max_recv_queue &&
         p.udp_port == q.udp_port && p.private_data == q.private_data;
}

void CheckCoreTakesIt(const ConnectionParameters& params) {
  FUZZ_CHECK(CheckCompatible(params, params).ok());
  DiscardingSink sink;
  core::Endpoint endpoint(sink);
  const core::ConnectionConfig config = MakeConnectionConfig(params, params, {});
  absl::StatusOr<core::Connection*> conn = endpoint.CreateConnection(config);
  if (!conn.ok()) FUZZ_CHECK(!conn.status().message().empty());
}

}  // namespace
}  // namespace metaroce::api

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::api;
  const std::span<const std::byte> body(reinterpret_cast<const std::byte*>(data), size);
  absl::StatusOr<ExchangeMessage> m = DecodeExchange(body);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() == absl::StatusCode::kInvalidArgument ||
               m.status().code() == absl::StatusCode::kFailedPrecondition);
    FUZZ_CHECK(!m.status().message().empty());
  } else {
    const std::vector<std::byte> encoded = EncodeExchange(*m);
    FUZZ_CHECK(encoded.size() == size);
    FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), body.begin()));
    absl::StatusOr<ExchangeMessage> from_hex = DecodeExchangeHex(EncodeExchangeHex(*m));
    FUZZ_CHECK(from_hex.ok());
    FUZZ_CHECK(SameMessage(*m, *from_hex));
    if (m->kind == ExchangeKind::kRequest || m->kind == ExchangeKind::kReply) {
      CheckCoreTakesIt(m->params);
    }
  }
  // The same bytes as hex text (what qp.create carries): refused with a reason or decoded.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ExchangeMessage> h = DecodeExchangeHex(text);
  if (!h.ok()) FUZZ_CHECK(!h.status().message().empty());
  return 0;
}
