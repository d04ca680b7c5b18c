#include "lib/wire/packet.h"

#include <bit>
#include <cstring>

namespace metaroce::wire {

std::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kWrite: return "WRITE";
    case Opcode::kWriteImm: return "WRITE_IMM";
    case Opcode::kSend: return "SEND";
    case Opcode::kSendImm: return "SEND_IMM";
    case Opcode::kAck: return "ACK";
    case Opcode::kProbe: return "PROBE";
  }
  return "UNKNOWN";
}

std::string_view SyndromeName(Syndrome s) {
  switch (s) {
    case Syndrome::kAck: return "ACK";
    case Syndrome::kRnrNak: return "RNR_NAK";
    case Syndrome::kSequenceErrorNak: return "SEQ_ERR_NAK";
    case Syndrome::kRemoteAccessNak: return "REM_ACCESS_NAK";
    case Syndrome::kInvalidRequestNak: return "INV_REQ_NAK";
    case Syndrome::kRemoteOperationalNak: return "REM_OP_NAK";
  }
  return "UNKNOWN";
}

std::string_view ParseErrorName(ParseError e) {
  switch (e) {
    case ParseError::kNone: return "none";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kBadVersion: return "bad_version";
    case ParseError::kBadOpcode: return "bad_opcode";
    case ParseError::kLengthMismatch: return "length_mismatch";
    case ParseError::kBadRange: return "bad_range";
    case ParseError::kBadSyndrome: return "bad_syndrome";
    case ParseError::kCount: break;
  }
  return "unknown";
}

void SackBitmap::ShiftDown(uint32_t n) {
  if (n >= kSackBits) {
    Clear();
    return;
  }
  if (n < 64) {  // the usual step: the cumulative point moved over a few PSNs
    if (n == 0) return;
    words_[0] = (words_[0] >> n) | (words_[1] << (64 - n));
    words_[1] = (words_[1] >> n) | (words_[2] << (64 - n));
    words_[2] = (words_[2] >> n) | (words_[3] << (64 - n));
    words_[3] >>= n;
    return;
  }
  const uint32_t word_shift = n / 64, bit_shift = n % 64;
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t src = i + word_shift;
    uint64_t lo = src < 4 ? words_[src] : 0;
    uint64_t hi = src + 1 < 4 ? words_[src + 1] : 0;
    words_[i] = bit_shift == 0 ? lo : (lo >> bit_shift) | (hi << (64 - bit_shift));
  }
}

uint32_t SackBitmap::HighestPlusOne() const {
  for (int i = 3; i >= 0; --i) {
    if (words_[i] != 0) return static_cast<uint32_t>(i * 64 + 64 - __builtin_clzll(words_[i]));
  }
  return 0;
}

// Bit k is bit k % 8 of byte k / 8 (wire-format.md §8): on a little-endian host the words'
// memory is the wire layout.
void SackBitmap::ToWire(uint8_t out[32]) const {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, words_.data(), 32);
  } else {
    for (uint32_t i = 0; i < 32; ++i) out[i] = static_cast<uint8_t>(words_[i / 8] >> (8 * (i % 8)));
  }
}

SackBitmap SackBitmap::FromWire(const uint8_t in[32]) {
  SackBitmap b;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(b.words_.data(), in, 32);
  } else {
    for (uint32_t i = 0; i < 32; ++i) b.words_[i / 8] |= uint64_t{in[i]} << (8 * (i % 8));
  }
  return b;
}

size_t HeadersSize(Opcode op) {
  if (IsData(op)) return kDataHeadersSize;
  if (op == Opcode::kAck) return kAckPacketSize;
  return kProbePacketSize;
}

namespace {

bool KnownOpcode(uint8_t op) {
  switch (static_cast<Opcode>(op)) {
    case Opcode::kWrite:
    case Opcode::kWriteImm:
    case Opcode::kSend:
    case Opcode::kSendImm:
    case Opcode::kAck:
    case Opcode::kProbe:
      return true;
  }
  return false;
}

}  // namespace

namespace {

// Decodes into `p` (zero-initialized by the caller); kNone or why the datagram is refused.
ParseError Decode(std::span<const std::byte> datagram, Packet& p) {
  if (datagram.size() < sizeof(BaseHeader)) return ParseError::kTruncated;
  BaseHeader base;
  std::memcpy(&base, datagram.data(), sizeof base);
  if (base.version != kVersion) return ParseError::kBadVersion;
  if (!KnownOpcode(base.opcode)) return ParseError::kBadOpcode;

  p.version = base.version;
  p.opcode = static_cast<Opcode>(base.opcode);
  p.flags = base.flags.value();
  p.dest_conn = base.dest_conn.value();
  p.path_id = base.path_id.value();
  p.psn = base.psn.value();
  p.token = base.token.value();
  const size_t payload_len = base.payload_len.value();
  const size_t headers = HeadersSize(p.opcode);
  if (datagram.size() < headers) return ParseError::kTruncated;
  if (datagram.size() - headers != payload_len) return ParseError::kLengthMismatch;
  if (!IsData(p.opcode) && payload_len != 0) return ParseError::kLengthMismatch;

  if (IsData(p.opcode)) {
    DataHeader d;
    std::memcpy(&d, datagram.data() + sizeof(BaseHeader), sizeof d);
    p.data.msg_seq = d.msg_seq.value();
    p.data.msg_len = d.msg_len.value();
    p.data.offset = d.offset.value();
    p.data.rkey = d.rkey.value();
    p.data.remote_addr = d.remote_addr.value();
    p.data.recv_seq = d.recv_seq.value();
    p.data.imm = d.imm.value();
    if (uint64_t{p.data.offset} + payload_len > p.data.msg_len) return ParseError::kBadRange;
    p.payload = datagram.subspan(headers, payload_len);
  } else if (p.opcode == Opcode::kAck) {
    AckHeader a;
    std::memcpy(&a, datagram.data() + sizeof(BaseHeader), sizeof a);
    if (a.syndrome > static_cast<uint8_t>(Syndrome::kRemoteOperationalNak)) {
      return ParseError::kBadSyndrome;
    }
    p.ack.cum_psn = a.cum_psn.value();
    p.ack.ack_psn = a.ack_psn.value();
    p.ack.ce_count = a.ce_count.value();
    p.ack.window_hint = a.window_hint.value();
    p.ack.syndrome = static_cast<Syndrome>(a.syndrome);
    p.ack.rnr_delay_us = a.rnr_delay_us.value();
    p.ack.pull_seq = a.pull_seq;
    p.ack.msg_seq = a.msg_seq.value();
    p.ack.sack = SackBitmap::FromWire(a.sack);
  }
  return ParseError::kNone;
}

}  // namespace

// One named result returned on one path: built in the caller's object (returning a second
// object cost a zeroing and a copy of the whole Packet per datagram).
ParseResult Parse(std::span<const std::byte> datagram) {
  ParseResult r;
  r.error = Decode(datagram, r.packet);
  if (r.error != ParseError::kNone) r.packet = Packet{};
  return r;
}

size_t SerializeHeaders(const Packet& p, std::span<std::byte> out) {
  const size_t headers = HeadersSize(p.opcode);
  if (out.size() < headers || p.payload.size() > 0xffff) return 0;
  const BaseFields base{p.version, p.opcode, p.flags, p.dest_conn, p.path_id, p.psn, p.token};
  if (IsData(p.opcode)) {
    WriteDataHeaders(base, p.data, static_cast<uint16_t>(p.payload.size()), out.data());
  } else if (p.opcode == Opcode::kAck) {
    WriteAckPacket(base, p.ack, out.data());
  } else {
    WriteBaseHeader(base, 0, out.data());
  }
  return headers;
}

}  // namespace metaroce::wire
