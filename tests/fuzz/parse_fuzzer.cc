// Fuzz target for wire::Parse (lib/wire/packet.h).
//
// Any byte string may be parsed; Parse must not read outside it (AddressSanitizer checks) and
// must either refuse it or decode it so that serializing the decoded packet and parsing that again
// gives the same packet back.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "lib/wire/packet.h"
#include "tests/fuzz/fuzz_check.h"

namespace metaroce::wire {
namespace {

bool SamePacket(const Packet& a, const Packet& b) {
  return a.version == b.version && a.opcode == b.opcode && a.flags == b.flags &&
         a.dest_conn == b.dest_conn && a.path_id == b.path_id && a.psn == b.psn &&
         a.token == b.token && a.data.msg_seq == b.data.msg_seq &&
         a.data.msg_len == b.data.msg_len && a.data.offset == b.data.offset &&
         a.data.rkey == b.data.rkey && a.data.remote_addr == b.data.remote_addr &&
         a.data.recv_seq == b.data.recv_seq && a.data.imm == b.data.imm &&
         a.ack.cum_psn == b.ack.cum_psn && a.ack.ack_psn == b.ack.ack_psn &&
         a.ack.ce_count == b.ack.ce_count && a.ack.window_hint == b.ack.window_hint &&
         a.ack.syndrome == b.ack.syndrome && a.ack.rnr_delay_us == b.ack.rnr_delay_us &&
         a.ack.msg_seq == b.ack.msg_seq && a.ack.sack == b.ack.sack &&
         a.payload.size() == b.payload.size() &&
         (a.payload.empty() ||
          std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()) == 0);
}

}  // namespace
}  // namespace metaroce::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace metaroce::wire;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  const ParseResult first = Parse(in);
  if (!first.ok()) {
    FUZZ_CHECK(first.error != ParseError::kNone && first.error < ParseError::kCount);
    return 0;
  }
  const Packet& p = first.packet;
  FUZZ_CHECK(p.version == kVersion);
  FUZZ_CHECK(HeadersSize(p.opcode) + p.payload.size() == size);
  if (!p.payload.empty()) {
    FUZZ_CHECK(IsData(p.opcode));
    FUZZ_CHECK(p.payload.data() >= in.data() && p.payload.data() + p.payload.size() == in.data() + size);
  }

  // Serialize into an exactly-sized buffer, re-parse, compare.
  const size_t headers = HeadersSize(p.opcode);
  auto out = std::make_unique<std::byte[]>(headers + p.payload.size());
  const std::span<std::byte> out_span(out.get(), headers + p.payload.size());
  FUZZ_CHECK(SerializeHeaders(p, out_span) == headers);
  if (!p.payload.empty()) std::memcpy(out.get() + headers, p.payload.data(), p.payload.size());
  const ParseResult second = Parse(out_span);
  FUZZ_CHECK(second.ok());
  FUZZ_CHECK(SamePacket(p, second.packet));

  // A buffer one byte short is refused.
  if (headers > 0) FUZZ_CHECK(SerializeHeaders(p, out_span.first(headers - 1)) == 0);
  return 0;
}
