// Fuzz target for the connection set-up exchange (lib/api/exchange.h): the messages a peer sends
// over TCP before a connection exists (DecodeExchange), and the same body as hex text that an
// application hands metaroced in qp.create (DecodeExchangeHex).
//
// What must hold for every input:
//   - no crash, no read outside the body (AddressSanitizer);
//   - a refusal is InvalidArgument (or FailedPrecondition for another version) with a message;
//   - an accepted body re-encodes to what setup.md says a sender writes: the same bytes, except
//     the fields a receiver MUST ignore (header byte 7; REQUEST/REPLY byte 27, and bytes 28..31
//     outside the reorder-buffer profile), which a sender writes as 0 (setup.md §2, §4.1), and
//     the version, which is this side's (a REJECT of any version is accepted, §7); and
//     the hex form decodes to the same message;
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

// The body as a sender following setup.md writes it: the bytes a receiver ignores set to 0.
std::vector<std::byte> AsSentBySpec(std::span<const std::byte> body, const ExchangeMessage& m) {
  std::vector<std::byte> sent(body.begin(), body.end());
  // A REJECT of another version is accepted (its layout is the same in every version, §7);
  // this side re-encodes it as its own version, as it writes every message.
  sent[4] = std::byte{static_cast<uint8_t>(kExchangeVersion >> 8)};
  sent[5] = std::byte{static_cast<uint8_t>(kExchangeVersion)};
  sent[7] = std::byte{0};  // §2: header reserved byte
  if (m.kind == ExchangeKind::kRequest || m.kind == ExchangeKind::kReply) {
    sent[27] = std::byte{0};  // §4.1: reserved
    if (m.params.profile.placement != core::PlacementPolicy::kReorderBuffer) {
      std::fill(sent.begin() + 28, sent.begin() + 32, std::byte{0});  // reorder_buffer_bytes
    }
  }
  return sent;
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
    FUZZ_CHECK(encoded == AsSentBySpec(body, *m));
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
