// MetaRoCE wire format, version 1 (docs/spec/wire-format.md).
//
// A MetaRoCE packet is the payload of one UDP datagram:
//
//   BaseHeader (24 B) | DataHeader (32 B) | payload      WRITE, WRITE_IMM, SEND, SEND_IMM
//   BaseHeader (24 B) | AckHeader  (56 B)                ACK (also NAKs and probe replies)
//   BaseHeader (24 B)                                    PROBE
//
// All multi-byte fields are big-endian. The packed layouts below are the normative byte offsets;
// they are static_asserted so the compiler checks the spec's tables.
//
// Parsing: Parse() validates every length, version and opcode before anything is read and returns
// the decoded host-order fields or a ParseError. It never reads outside the given span. It checks
// only what the packet alone can prove; connection-level checks (token, path id, rkey) belong to
// the core. Serialization writes headers only: payload bytes travel separately so that they can be
// gathered straight from registered memory.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "lib/wire/big_endian.h"

namespace metaroce::wire {

inline constexpr uint8_t kVersion = 1;
// Default UDP destination port. Configurable; deliberately not 4791 (RoCEv2), which RDMA NICs
// may consume in hardware.
inline constexpr uint16_t kDefaultUdpPort = 4792;
// Number of PSNs a SACK bitmap covers above the cumulative acknowledgement.
inline constexpr uint32_t kSackBits = 256;

enum class Opcode : uint8_t {
  kWrite = 0x01,
  kWriteImm = 0x02,
  kSend = 0x03,
  kSendImm = 0x04,
  kAck = 0x10,
  kProbe = 0x11,
};

inline constexpr bool IsData(Opcode op) {
  return op == Opcode::kWrite || op == Opcode::kWriteImm || op == Opcode::kSend ||
         op == Opcode::kSendImm;
}
inline constexpr bool CarriesImm(Opcode op) {
  return op == Opcode::kWriteImm || op == Opcode::kSendImm;
}
// Opcodes that consume a posted receive at the responder.
inline constexpr bool ConsumesReceive(Opcode op) {
  return op == Opcode::kSend || op == Opcode::kSendImm || op == Opcode::kWriteImm;
}
// Opcodes whose payload is placed at (rkey, remote_addr).
inline constexpr bool IsWrite(Opcode op) { return op == Opcode::kWrite || op == Opcode::kWriteImm; }

std::string_view OpcodeName(Opcode op);

// BaseHeader.flags bits. Unknown bits are sent as zero and ignored on receipt.
namespace flags {
inline constexpr uint16_t kAckRequest = 1u << 0;   // data: acknowledge this packet at once
inline constexpr uint16_t kRetransmit = 1u << 1;   // data: this is a retransmission (information)
// data: fills a PSN whose data was already acknowledged through another path. No payload; the
// responder records the PSN and places nothing (docs/spec/paths-and-recovery.md).
inline constexpr uint16_t kFiller = 1u << 2;
// data: the requester has more data waiting for this connection: a responder that pulls
// answers the packet with one pull (kPull) when its pacer allows (docs/spec/congestion.md §6).
inline constexpr uint16_t kWantsPull = 1u << 3;
inline constexpr uint16_t kDelayedAck = 1u << 4;   // ACK: sent by the delayed-ACK timer (no RTT)
inline constexpr uint16_t kProbeReply = 1u << 5;   // ACK: answers the PROBE whose PSN is ack_psn
// data: sent on a pull: the responder's pacer counted it when it pulled (congestion.md §6).
inline constexpr uint16_t kPulled = 1u << 6;
// ACK: carries a pull this responder just granted (its pull_seq counts it): the requester may send
// one more new data packet on this connection (§6).
inline constexpr uint16_t kPull = 1u << 7;
// ACK: the responder pulls: a paced requester sends its new data on pulls from now on (§6).
inline constexpr uint16_t kPulling = 1u << 8;
// ACK, go-back-N profile with DCQCN only: a congestion notification (RoCEv2's CNP): a CE-marked
// data packet arrived and the responder's CNP interval had passed (docs/spec/baselines.md [B3]).
inline constexpr uint16_t kCnp = 1u << 9;
inline constexpr uint16_t kKnownMask = kAckRequest | kRetransmit | kFiller | kWantsPull |
                                       kDelayedAck | kProbeReply | kPulled | kPull | kPulling |
                                       kCnp;
}  // namespace flags

// AckHeader.syndrome: ACK, or the reason a packet was refused (NAK).
enum class Syndrome : uint8_t {
  kAck = 0,
  kRnrNak = 1,             // receive not posted yet; retry ack_psn after rnr_delay_us
  kSequenceErrorNak = 2,   // go-back-N only: expected cum_psn, got ack_psn
  kRemoteAccessNak = 3,    // rkey, bounds or access flags refused the packet
  kInvalidRequestNak = 4,  // e.g. a Send larger than the receive buffer
  kRemoteOperationalNak = 5,
};
std::string_view SyndromeName(Syndrome s);

#pragma pack(push, 1)
struct BaseHeader {
  uint8_t version;    // 0: kVersion
  uint8_t opcode;     // 1: Opcode
  Be16 flags;         // 2: flags::*
  Be32 dest_conn;     // 4: connection id chosen by the receiving end
  Be16 path_id;       // 8: logical path, 0..path_count-1
  Be16 payload_len;   // 10: bytes after all headers
  Be32 psn;           // 12: per-path packet sequence number
  Be64 token;         // 16: per-connection secret
};
struct DataHeader {
  Be32 msg_seq;       // 0: message sequence number, per connection, in posting order
  Be32 msg_len;       // 4: total message length in bytes
  Be32 offset;        // 8: offset of this packet's first payload byte in the message
  Be32 rkey;          // 12: WRITE*: remote key; SEND*: 0
  Be64 remote_addr;   // 16: WRITE*: address of this packet's first payload byte; SEND*: 0
  Be32 recv_seq;      // 24: SEND*, WRITE_IMM: index of the receive it consumes; WRITE: 0
  Be32 imm;           // 28: *_IMM: immediate data (carried as opaque bytes); others: 0
};
struct AckHeader {
  Be32 cum_psn;       // 0: next PSN expected on this path; every PSN below it has arrived
  Be32 ack_psn;       // 4: PSN of the packet that caused this ACK/NAK (or PROBE answered)
  Be32 ce_count;      // 8: cumulative count of CE-marked packets received on this path
  Be32 window_hint;   // 12: receiver's fair-share hint in bytes in flight (0: none)
  uint8_t syndrome;   // 16: Syndrome
  uint8_t pull_seq;   // 17: pulls granted on this connection so far, mod 256 (congestion.md §6)
  Be16 rnr_delay_us;  // 18: RNR NAK: wait this long before retrying
  Be32 msg_seq;       // 20: NAK: message concerned; ACK: 0
  uint8_t sack[32];   // 24: bit k (byte k/8, bit k%8, LSB first) set: PSN cum_psn+1+k arrived
};
#pragma pack(pop)

static_assert(sizeof(BaseHeader) == 24);
static_assert(offsetof(BaseHeader, dest_conn) == 4 && offsetof(BaseHeader, path_id) == 8);
static_assert(offsetof(BaseHeader, psn) == 12 && offsetof(BaseHeader, token) == 16);
static_assert(sizeof(DataHeader) == 32);
static_assert(offsetof(DataHeader, remote_addr) == 16 && offsetof(DataHeader, imm) == 28);
static_assert(sizeof(AckHeader) == 56);
static_assert(offsetof(AckHeader, syndrome) == 16 && offsetof(AckHeader, sack) == 24);

inline constexpr size_t kDataHeadersSize = sizeof(BaseHeader) + sizeof(DataHeader);  // 56
inline constexpr size_t kAckPacketSize = sizeof(BaseHeader) + sizeof(AckHeader);     // 80
inline constexpr size_t kProbePacketSize = sizeof(BaseHeader);                       // 24
inline constexpr size_t kMaxHeadersSize = kAckPacketSize;

// The 256-bit selective acknowledgement bitmap in host form. Bit k stands for PSN cum_psn+1+k.
class SackBitmap {
 public:
  bool Test(uint32_t k) const { return k < kSackBits && ((words_[k / 64] >> (k % 64)) & 1u); }
  void Set(uint32_t k) {
    if (k < kSackBits) words_[k / 64] |= uint64_t{1} << (k % 64);
  }
  void Clear() { words_ = {}; }
  bool Empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }
  // Shifts the bitmap down by n positions (the cumulative point moved up by n).
  void ShiftDown(uint32_t n);
  // Index of the highest set bit + 1, or 0 when empty.
  uint32_t HighestPlusOne() const;
  // How many bits are set from bit 0 up to the first clear one (kSackBits when all are).
  uint32_t LeadingRun() const {
    for (uint32_t w = 0; w < words_.size(); ++w) {
      if (words_[w] != ~uint64_t{0}) return w * 64 + static_cast<uint32_t>(std::countr_one(words_[w]));
    }
    return kSackBits;
  }
  // Calls f(k) for every set bit k, in increasing order (cost: the set bits, not 256).
  template <typename F>
  void ForEachSet(F&& f) const {
    for (uint32_t w = 0; w < words_.size(); ++w) {
      for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
        f(w * 64 + static_cast<uint32_t>(std::countr_zero(bits)));
      }
    }
  }
  void ToWire(uint8_t out[32]) const;
  static SackBitmap FromWire(const uint8_t in[32]);
  friend bool operator==(const SackBitmap&, const SackBitmap&) = default;

 private:
  std::array<uint64_t, 4> words_ = {};
};

// Decoded, host-order view of one packet. Fields of headers the opcode does not carry are zero.
struct Packet {
  uint8_t version = kVersion;
  Opcode opcode = Opcode::kProbe;
  uint16_t flags = 0;
  uint32_t dest_conn = 0;
  uint16_t path_id = 0;
  uint32_t psn = 0;
  uint64_t token = 0;

  struct Data {
    uint32_t msg_seq = 0;
    uint32_t msg_len = 0;
    uint32_t offset = 0;
    uint32_t rkey = 0;
    uint64_t remote_addr = 0;
    uint32_t recv_seq = 0;
    uint32_t imm = 0;
  } data;

  struct Ack {
    uint32_t cum_psn = 0;
    uint32_t ack_psn = 0;
    uint32_t ce_count = 0;
    uint32_t window_hint = 0;
    Syndrome syndrome = Syndrome::kAck;
    uint16_t rnr_delay_us = 0;
    uint8_t pull_seq = 0;
    uint32_t msg_seq = 0;
    SackBitmap sack;
  } ack;

  // Data packets: the payload (points into the parsed buffer). Others: empty.
  std::span<const std::byte> payload;
};

enum class ParseError : uint8_t {
  kNone = 0,
  kTruncated,        // shorter than the headers its opcode needs
  kBadVersion,       // version byte is not kVersion
  kBadOpcode,        // opcode unknown
  kLengthMismatch,   // payload_len disagrees with the datagram length
  kBadRange,         // offset + payload_len exceeds msg_len
  kBadSyndrome,      // ACK syndrome unknown
  kCount,
};
std::string_view ParseErrorName(ParseError e);

struct ParseResult {
  Packet packet;
  ParseError error = ParseError::kNone;
  bool ok() const { return error == ParseError::kNone; }
};

// Validates and decodes one UDP payload. Never reads outside `datagram`.
ParseResult Parse(std::span<const std::byte> datagram);

// Writes the headers of `p` (base plus the extension its opcode carries) into `out` and returns
// the number of bytes written, or 0 if `out` is too small. payload_len is taken from
// p.payload.size(); the payload itself is not copied.
size_t SerializeHeaders(const Packet& p, std::span<std::byte> out);

// Size of the headers that SerializeHeaders writes for this opcode.
size_t HeadersSize(Opcode op);

// Writers for a sender that builds no Packet: the headers written straight from host-order
// fields, the whole Packet (ACK half and all, 144 bytes) neither filled in nor read back. The
// bytes are exactly those SerializeHeaders writes for a Packet with the same fields (it uses
// these writers itself), and the same rules hold: the caller states the payload's length.

// The BaseHeader's fields (payload_len aside: each writer's own).
struct BaseFields {
  uint8_t version = kVersion;
  Opcode opcode = Opcode::kProbe;
  uint16_t flags = 0;
  uint32_t dest_conn = 0;
  uint16_t path_id = 0;
  uint32_t psn = 0;
  uint64_t token = 0;
};

// Writes the BaseHeader (kProbePacketSize bytes) at `out`.
inline void WriteBaseHeader(const BaseFields& f, uint16_t payload_len, std::byte* out) {
  BaseHeader base;
  base.version = f.version;
  base.opcode = static_cast<uint8_t>(f.opcode);
  base.flags = Be16::FromHost(f.flags);
  base.dest_conn = Be32::FromHost(f.dest_conn);
  base.path_id = Be16::FromHost(f.path_id);
  base.payload_len = Be16::FromHost(payload_len);
  base.psn = Be32::FromHost(f.psn);
  base.token = Be64::FromHost(f.token);
  std::memcpy(out, &base, sizeof base);
}

// Writes a data packet's headers (kDataHeadersSize bytes: BaseHeader, DataHeader) at `out`, for
// a payload of `payload_len` bytes. Precondition: IsData(base.opcode).
inline void WriteDataHeaders(const BaseFields& base, const Packet::Data& data,
                             uint16_t payload_len, std::byte* out) {
  WriteBaseHeader(base, payload_len, out);
  DataHeader d;
  d.msg_seq = Be32::FromHost(data.msg_seq);
  d.msg_len = Be32::FromHost(data.msg_len);
  d.offset = Be32::FromHost(data.offset);
  d.rkey = Be32::FromHost(data.rkey);
  d.remote_addr = Be64::FromHost(data.remote_addr);
  d.recv_seq = Be32::FromHost(data.recv_seq);
  d.imm = Be32::FromHost(data.imm);
  std::memcpy(out + sizeof(BaseHeader), &d, sizeof d);
}

// Writes an ACK (kAckPacketSize bytes: BaseHeader, AckHeader; no payload) at `out`.
// Precondition: base.opcode == Opcode::kAck.
inline void WriteAckPacket(const BaseFields& base, const Packet::Ack& ack, std::byte* out) {
  WriteBaseHeader(base, 0, out);
  AckHeader a;
  a.cum_psn = Be32::FromHost(ack.cum_psn);
  a.ack_psn = Be32::FromHost(ack.ack_psn);
  a.ce_count = Be32::FromHost(ack.ce_count);
  a.window_hint = Be32::FromHost(ack.window_hint);
  a.syndrome = static_cast<uint8_t>(ack.syndrome);
  a.pull_seq = ack.pull_seq;
  a.rnr_delay_us = Be16::FromHost(ack.rnr_delay_us);
  a.msg_seq = Be32::FromHost(ack.msg_seq);
  ack.sack.ToWire(a.sack);
  std::memcpy(out + sizeof(BaseHeader), &a, sizeof a);
}

}  // namespace metaroce::wire
