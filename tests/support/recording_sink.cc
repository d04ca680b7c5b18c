#include "tests/support/recording_sink.h"

#include <cstdio>

namespace metaroce::testing {

void RecordingSink::Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                             std::span<const std::byte> payload) {
  RecordedPacket& r = packets_.emplace_back();
  r.meta = meta;
  r.bytes.assign(headers.begin(), headers.end());
  r.bytes.insert(r.bytes.end(), payload.begin(), payload.end());
  wire::ParseResult pr = wire::Parse(r.bytes);
  r.packet = pr.packet;
  if (!pr.ok()) {
    std::fprintf(stderr, "core emitted an unparsable packet: %s\n",
                 std::string(wire::ParseErrorName(pr.error)).c_str());
    std::abort();
  }
}

std::vector<RecordedPacket> RecordingSink::Take() {
  std::vector<RecordedPacket> out;
  out.swap(packets_);
  return out;
}

std::string Describe(const wire::Packet& p) {
  char buf[256];
  std::string flags;
  if (p.flags & wire::flags::kAckRequest) flags += " ACK_REQ";
  if (p.flags & wire::flags::kRetransmit) flags += " RETX";
  if (p.flags & wire::flags::kFiller) flags += " FILLER";
  if (p.flags & wire::flags::kDelayedAck) flags += " DELAYED";
  if (p.flags & wire::flags::kProbeReply) flags += " PROBE_REPLY";
  if (p.flags & wire::flags::kWantsPull) flags += " WANTS_PULL";
  if (p.flags & wire::flags::kPulled) flags += " PULLED";
  if (p.flags & wire::flags::kPull) flags += " PULL";
  if (wire::IsData(p.opcode)) {
    std::snprintf(buf, sizeof buf, "path %u %s psn %u msg %u off %u len %zu%s", p.path_id,
                  std::string(wire::OpcodeName(p.opcode)).c_str(), p.psn, p.data.msg_seq,
                  p.data.offset, p.payload.size(), flags.c_str());
  } else if (p.opcode == wire::Opcode::kAck) {
    std::snprintf(buf, sizeof buf, "path %u %s cum %u ack_psn %u%s", p.path_id,
                  std::string(wire::SyndromeName(p.ack.syndrome)).c_str(), p.ack.cum_psn,
                  p.ack.ack_psn, flags.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "path %u PROBE psn %u", p.path_id, p.psn);
  }
  return buf;
}

std::string RecordingSink::Log() const {
  std::string out;
  for (const RecordedPacket& r : packets_) out += Describe(r.packet) + "\n";
  return out;
}

}  // namespace metaroce::testing
