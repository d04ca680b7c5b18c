// Tests of lib/wire/packet.h: the normative byte layout of every header (against hand-written
// byte arrays), round trips of every opcode, every ParseError reason, the SACK bitmap, and that
// Parse() never reads outside the datagram it is given.
#include "lib/wire/packet.h"

#include <bitset>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <span>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::wire {
namespace {

using ::testing::ElementsAreArray;

constexpr Opcode kAllOpcodes[] = {Opcode::kWrite, Opcode::kWriteImm, Opcode::kSend,
                                  Opcode::kSendImm, Opcode::kAck,    Opcode::kProbe};

std::vector<std::byte> Bytes(std::initializer_list<uint8_t> in) {
  std::vector<std::byte> out;
  for (uint8_t b : in) out.push_back(std::byte{b});
  return out;
}

std::vector<std::byte> PayloadOf(size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte(static_cast<uint8_t>(0xa0 + i));
  return out;
}

// Headers from SerializeHeaders() followed by the payload: one whole UDP payload.
std::vector<std::byte> Datagram(const Packet& p) {
  std::vector<std::byte> out(kMaxHeadersSize);
  const size_t n = SerializeHeaders(p, out);
  EXPECT_EQ(n, HeadersSize(p.opcode));
  out.resize(n);
  if (IsData(p.opcode)) out.insert(out.end(), p.payload.begin(), p.payload.end());
  return out;
}

// Parses a copy of `bytes` that lives in a heap block of exactly that size, so that a read past
// the end is caught by AddressSanitizer in the sanitizer build.
ParseResult ParseExact(std::span<const std::byte> bytes) {
  auto copy = std::make_unique<std::byte[]>(bytes.size());
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  ParseResult r = Parse(std::span<const std::byte>(copy.get(), bytes.size()));
  r.packet.payload = {};  // points into `copy`, which dies here
  return r;
}

void ExpectSamePacket(const Packet& a, const Packet& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.dest_conn, b.dest_conn);
  EXPECT_EQ(a.path_id, b.path_id);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.data.msg_seq, b.data.msg_seq);
  EXPECT_EQ(a.data.msg_len, b.data.msg_len);
  EXPECT_EQ(a.data.offset, b.data.offset);
  EXPECT_EQ(a.data.rkey, b.data.rkey);
  EXPECT_EQ(a.data.remote_addr, b.data.remote_addr);
  EXPECT_EQ(a.data.recv_seq, b.data.recv_seq);
  EXPECT_EQ(a.data.imm, b.data.imm);
  EXPECT_EQ(a.ack.cum_psn, b.ack.cum_psn);
  EXPECT_EQ(a.ack.ack_psn, b.ack.ack_psn);
  EXPECT_EQ(a.ack.ce_count, b.ack.ce_count);
  EXPECT_EQ(a.ack.window_hint, b.ack.window_hint);
  EXPECT_EQ(a.ack.syndrome, b.ack.syndrome);
  EXPECT_EQ(a.ack.rnr_delay_us, b.ack.rnr_delay_us);
  EXPECT_EQ(a.ack.msg_seq, b.ack.msg_seq);
  EXPECT_EQ(a.ack.sack, b.ack.sack);
  EXPECT_THAT(a.payload, ElementsAreArray(b.payload));
}

// A packet of the given opcode with every field it carries set to a distinct non-zero value.
Packet SamplePacket(Opcode op, std::span<const std::byte> payload) {
  Packet p;
  p.opcode = op;
  p.flags = flags::kAckRequest | flags::kRetransmit;
  p.dest_conn = 0xc0ffee01u;
  p.path_id = 7;
  p.psn = 0xfffffff0u;
  p.token = 0x0123456789abcdefull;
  if (IsData(op)) {
    p.data.msg_seq = 42;
    p.data.offset = 8192;
    p.data.msg_len = 8192 + static_cast<uint32_t>(payload.size()) + 100;
    if (IsWrite(op)) {
      p.data.rkey = 0x5a5a0101u;
      p.data.remote_addr = 0x00007f0012345000ull;
    }
    if (ConsumesReceive(op)) p.data.recv_seq = 9;
    if (CarriesImm(op)) p.data.imm = 0xdeadbeefu;
    p.payload = payload;
  } else if (op == Opcode::kAck) {
    p.flags = flags::kDelayedAck;
    p.ack.cum_psn = 1000;
    p.ack.ack_psn = 1003;
    p.ack.ce_count = 17;
    p.ack.window_hint = 65536;
    p.ack.syndrome = Syndrome::kRnrNak;
    p.ack.rnr_delay_us = 20;
    p.ack.msg_seq = 5;
    p.ack.sack.Set(0);
    p.ack.sack.Set(2);
    p.ack.sack.Set(255);
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Byte layout against hand-written arrays (docs/spec/wire-format.md).

// A WRITE_IMM with a 4-byte payload; every field has a distinct value so a field at the wrong
// offset or in the wrong byte order shows up.
Packet LayoutDataPacket(std::span<const std::byte> payload) {
  Packet p;
  p.opcode = Opcode::kWriteImm;
  p.flags = 0x0102;
  p.dest_conn = 0x03040506u;
  p.path_id = 0x0708;
  p.psn = 0x090a0b0cu;
  p.token = 0x1112131415161718ull;
  p.data.msg_seq = 0x21222324u;
  p.data.msg_len = 0x25262728u;
  p.data.offset = 0x00000010u;
  p.data.rkey = 0x2d2e2f30u;
  p.data.remote_addr = 0x3132333435363738ull;
  p.data.recv_seq = 0x393a3b3cu;
  p.data.imm = 0x3d3e3f40u;
  p.payload = payload;
  return p;
}

const std::vector<std::byte> kLayoutDataBytes = Bytes({
    // BaseHeader
    0x01,                                            // 0: version
    0x02,                                            // 1: opcode WRITE_IMM
    0x01, 0x02,                                      // 2: flags
    0x03, 0x04, 0x05, 0x06,                          // 4: dest_conn
    0x07, 0x08,                                      // 8: path_id
    0x00, 0x04,                                      // 10: payload_len
    0x09, 0x0a, 0x0b, 0x0c,                          // 12: psn
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // 16: token
    // DataHeader
    0x21, 0x22, 0x23, 0x24,                          // 0: msg_seq
    0x25, 0x26, 0x27, 0x28,                          // 4: msg_len
    0x00, 0x00, 0x00, 0x10,                          // 8: offset
    0x2d, 0x2e, 0x2f, 0x30,                          // 12: rkey
    0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,  // 16: remote_addr
    0x39, 0x3a, 0x3b, 0x3c,                          // 24: recv_seq
    0x3d, 0x3e, 0x3f, 0x40,                          // 28: imm
    // payload
    0xa0, 0xa1, 0xa2, 0xa3,
});

Packet LayoutAckPacket() {
  Packet p;
  p.opcode = Opcode::kAck;
  p.flags = flags::kProbeReply;
  p.dest_conn = 0x03040506u;
  p.path_id = 0x0708;
  p.psn = 0x090a0b0cu;
  p.token = 0x1112131415161718ull;
  p.ack.cum_psn = 0x41424344u;
  p.ack.ack_psn = 0x45464748u;
  p.ack.ce_count = 0x494a4b4cu;
  p.ack.window_hint = 0x4d4e4f50u;
  p.ack.syndrome = Syndrome::kRemoteAccessNak;
  p.ack.rnr_delay_us = 0x5152;
  p.ack.msg_seq = 0x53545556u;
  for (uint32_t k : {0u, 9u, 64u, 130u, 255u}) p.ack.sack.Set(k);
  return p;
}

const std::vector<std::byte> kLayoutAckBytes = Bytes({
    // BaseHeader
    0x01, 0x10, 0x00, 0x20,                          // version, opcode ACK, flags PROBE_REPLY
    0x03, 0x04, 0x05, 0x06,                          // 4: dest_conn
    0x07, 0x08, 0x00, 0x00,                          // 8: path_id, 10: payload_len 0
    0x09, 0x0a, 0x0b, 0x0c,                          // 12: psn
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // 16: token
    // AckHeader
    0x41, 0x42, 0x43, 0x44,                          // 0: cum_psn
    0x45, 0x46, 0x47, 0x48,                          // 4: ack_psn
    0x49, 0x4a, 0x4b, 0x4c,                          // 8: ce_count
    0x4d, 0x4e, 0x4f, 0x50,                          // 12: window_hint
    0x03,                                            // 16: syndrome REMOTE_ACCESS_NAK
    0x00,                                            // 17: reserved
    0x51, 0x52,                                      // 18: rnr_delay_us
    0x53, 0x54, 0x55, 0x56,                          // 20: msg_seq
    // 24: sack. Bit k is byte k/8, bit k%8, LSB first: bits 0, 9, 64, 130, 255.
    0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // bytes 0..7: bit 0, bit 9
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // bytes 8..15: bit 64
    0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // bytes 16..23: bit 130
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,  // bytes 24..31: bit 255
});

Packet LayoutProbePacket() {
  Packet p;
  p.opcode = Opcode::kProbe;
  p.flags = 0;
  p.dest_conn = 0xfffffffeu;
  p.path_id = 0xffff;
  p.psn = 0x80000001u;
  p.token = 0xfedcba9876543210ull;
  return p;
}

const std::vector<std::byte> kLayoutProbeBytes = Bytes({
    0x01, 0x11, 0x00, 0x00,                          // version, opcode PROBE, flags
    0xff, 0xff, 0xff, 0xfe,                          // 4: dest_conn
    0xff, 0xff, 0x00, 0x00,                          // 8: path_id, 10: payload_len
    0x80, 0x00, 0x00, 0x01,                          // 12: psn
    0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,  // 16: token
});

TEST(Layout_Data, SerializeMatchesSpecOffsets) {
  const auto payload = PayloadOf(4);
  ASSERT_EQ(kLayoutDataBytes.size(), kDataHeadersSize + 4);
  EXPECT_THAT(Datagram(LayoutDataPacket(payload)), ElementsAreArray(kLayoutDataBytes));
}

TEST(Layout_Data, ParseReadsSpecOffsets) {
  const auto payload = PayloadOf(4);
  const ParseResult r = Parse(kLayoutDataBytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, LayoutDataPacket(payload));
  // The payload is a view into the datagram, right after the headers.
  EXPECT_EQ(r.packet.payload.data(), kLayoutDataBytes.data() + kDataHeadersSize);
  EXPECT_EQ(r.packet.payload.size(), 4u);
}

TEST(Layout_Ack, SerializeMatchesSpecOffsets) {
  ASSERT_EQ(kLayoutAckBytes.size(), kAckPacketSize);
  EXPECT_THAT(Datagram(LayoutAckPacket()), ElementsAreArray(kLayoutAckBytes));
}

TEST(Layout_Ack, ParseReadsSpecOffsets) {
  const ParseResult r = Parse(kLayoutAckBytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, LayoutAckPacket());
  EXPECT_TRUE(r.packet.payload.empty());
}

TEST(Layout_Ack, ReservedByteIsWrittenAsZero) {
  const auto bytes = Datagram(LayoutAckPacket());
  EXPECT_EQ(bytes[sizeof(BaseHeader) + 17], std::byte{0});
}

TEST(Layout_Probe, SerializeMatchesSpecOffsets) {
  ASSERT_EQ(kLayoutProbeBytes.size(), kProbePacketSize);
  EXPECT_THAT(Datagram(LayoutProbePacket()), ElementsAreArray(kLayoutProbeBytes));
}

TEST(Layout_Probe, ParseReadsSpecOffsets) {
  const ParseResult r = Parse(kLayoutProbeBytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, LayoutProbePacket());
}

TEST(Layout_Sizes, MatchSpec) {
  EXPECT_EQ(sizeof(BaseHeader), 24u);
  EXPECT_EQ(sizeof(DataHeader), 32u);
  EXPECT_EQ(sizeof(AckHeader), 56u);
  EXPECT_EQ(kDataHeadersSize, 56u);
  EXPECT_EQ(kAckPacketSize, 80u);
  EXPECT_EQ(kProbePacketSize, 24u);
  EXPECT_EQ(offsetof(BaseHeader, flags), 2u);
  EXPECT_EQ(offsetof(BaseHeader, payload_len), 10u);
  EXPECT_EQ(offsetof(DataHeader, msg_len), 4u);
  EXPECT_EQ(offsetof(DataHeader, offset), 8u);
  EXPECT_EQ(offsetof(DataHeader, rkey), 12u);
  EXPECT_EQ(offsetof(DataHeader, recv_seq), 24u);
  EXPECT_EQ(offsetof(AckHeader, ack_psn), 4u);
  EXPECT_EQ(offsetof(AckHeader, ce_count), 8u);
  EXPECT_EQ(offsetof(AckHeader, window_hint), 12u);
  EXPECT_EQ(offsetof(AckHeader, pull_seq), 17u);
  EXPECT_EQ(offsetof(AckHeader, rnr_delay_us), 18u);
  EXPECT_EQ(offsetof(AckHeader, msg_seq), 20u);
}

TEST(Layout_Opcodes, NumericValuesMatchSpec) {
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kWrite), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kWriteImm), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kSend), 0x03);
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kSendImm), 0x04);
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kAck), 0x10);
  EXPECT_EQ(static_cast<uint8_t>(Opcode::kProbe), 0x11);
}

// The worked examples of docs/spec/wire-format.md section 10, byte for byte.

const std::vector<std::byte> kSpecWriteHeaders = Bytes({
    0x01, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x03, 0x10, 0x00, 0x00, 0x00, 0x00, 0x2a,
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
    0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x20, 0x00, 0x5a, 0x5a, 0x01, 0x00,
    0x00, 0x00, 0x7f, 0x00, 0x00, 0x10, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
});

TEST(SpecExample_Write, MatchesBytes) {
  const auto payload = PayloadOf(4096);
  Packet p;
  p.opcode = Opcode::kWrite;
  p.flags = flags::kAckRequest;
  p.dest_conn = 7;
  p.path_id = 3;
  p.psn = 42;
  p.token = 0x0123456789abcdefull;
  p.data.msg_seq = 5;
  p.data.msg_len = 12288;
  p.data.offset = 8192;
  p.data.rkey = 0x5a5a0100u;
  p.data.remote_addr = 0x00007f0000102000ull;
  p.payload = payload;
  const auto bytes = Datagram(p);
  ASSERT_EQ(bytes.size(), 4152u);
  EXPECT_THAT(std::span(bytes).first(kDataHeadersSize), ElementsAreArray(kSpecWriteHeaders));
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, p);
}

TEST(SpecExample_Ack, MatchesBytes) {
  const auto expected = Bytes({
      0x01, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10,
      0x00, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x03, 0x00, 0x02, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  });
  Packet p;
  p.opcode = Opcode::kAck;
  p.dest_conn = 9;
  p.path_id = 3;
  p.token = 0xfedcba9876543210ull;
  p.ack.cum_psn = 41;
  p.ack.ack_psn = 44;
  p.ack.ce_count = 3;
  p.ack.window_hint = 131072;
  p.ack.sack.Set(0);  // PSN 42
  p.ack.sack.Set(2);  // PSN 44
  EXPECT_THAT(Datagram(p), ElementsAreArray(expected));
  const ParseResult r = Parse(expected);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, p);
}

// ---------------------------------------------------------------------------------------------
// Round trips.

class RoundTrip_EveryOpcode : public ::testing::TestWithParam<Opcode> {};

TEST_P(RoundTrip_EveryOpcode, ParseOfSerializeGivesBackEveryField) {
  const auto payload = PayloadOf(IsData(GetParam()) ? 37 : 0);
  const Packet sent = SamplePacket(GetParam(), payload);
  const auto bytes = Datagram(sent);
  EXPECT_EQ(bytes.size(), HeadersSize(GetParam()) + payload.size());
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, sent);
}

TEST_P(RoundTrip_EveryOpcode, EmptyPayload) {
  const Packet sent = SamplePacket(GetParam(), {});
  const auto bytes = Datagram(sent);
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, sent);
}

TEST_P(RoundTrip_EveryOpcode, FieldsOfOtherHeadersDecodeAsZero) {
  const auto payload = PayloadOf(IsData(GetParam()) ? 3 : 0);
  const auto bytes = Datagram(SamplePacket(GetParam(), payload));
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok());
  const Packet empty;
  if (!IsData(GetParam())) {
    EXPECT_EQ(r.packet.data.msg_seq, 0u);
    EXPECT_EQ(r.packet.data.msg_len, 0u);
    EXPECT_EQ(r.packet.data.remote_addr, 0u);
    EXPECT_TRUE(r.packet.payload.empty());
  }
  if (GetParam() != Opcode::kAck) {
    EXPECT_EQ(r.packet.ack.cum_psn, 0u);
    EXPECT_EQ(r.packet.ack.syndrome, Syndrome::kAck);
    EXPECT_EQ(r.packet.ack.sack, empty.ack.sack);
  }
}

TEST_P(RoundTrip_EveryOpcode, OpcodeHasAName) {
  EXPECT_NE(OpcodeName(GetParam()), "UNKNOWN");
}

INSTANTIATE_TEST_SUITE_P(Opcodes, RoundTrip_EveryOpcode, ::testing::ValuesIn(kAllOpcodes),
                         [](const ::testing::TestParamInfo<Opcode>& info) {
                           return std::string(OpcodeName(info.param));
                         });

TEST(RoundTrip_Ack, EverySyndrome) {
  for (uint8_t s = 0; s <= static_cast<uint8_t>(Syndrome::kRemoteOperationalNak); ++s) {
    Packet sent = SamplePacket(Opcode::kAck, {});
    sent.ack.syndrome = static_cast<Syndrome>(s);
    const auto bytes = Datagram(sent);
    const ParseResult r = Parse(bytes);
    ASSERT_TRUE(r.ok()) << "syndrome " << int{s};
    EXPECT_EQ(r.packet.ack.syndrome, sent.ack.syndrome);
    EXPECT_NE(SyndromeName(sent.ack.syndrome), "UNKNOWN");
  }
}

TEST(RoundTrip_Data, MaximumFieldValues) {
  const auto payload = PayloadOf(1);
  Packet sent = SamplePacket(Opcode::kWriteImm, payload);
  sent.flags = 0xffff;
  sent.dest_conn = 0xffffffffu;
  sent.path_id = 0xffff;
  sent.psn = 0xffffffffu;
  sent.token = ~uint64_t{0};
  sent.data.msg_seq = 0xffffffffu;
  sent.data.msg_len = 0xffffffffu;
  sent.data.offset = 0xfffffffeu;  // offset + 1 == msg_len: the last byte of the largest message
  sent.data.rkey = 0xffffffffu;
  sent.data.remote_addr = ~uint64_t{0};
  sent.data.recv_seq = 0xffffffffu;
  sent.data.imm = 0xffffffffu;
  const auto bytes = Datagram(sent);
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  ExpectSamePacket(r.packet, sent);
}

TEST(RoundTrip_Data, LargestPayload) {
  const auto payload = PayloadOf(0xffff);
  Packet sent = SamplePacket(Opcode::kSend, payload);
  const auto bytes = Datagram(sent);
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok()) << ParseErrorName(r.error);
  EXPECT_EQ(r.packet.payload.size(), 0xffffu);
}

// ---------------------------------------------------------------------------------------------
// SerializeHeaders and HeadersSize.

TEST(SerializeHeaders_Buffer, TooSmallWritesNothing) {
  for (Opcode op : kAllOpcodes) {
    const Packet p = SamplePacket(op, {});
    std::vector<std::byte> out(HeadersSize(op) - 1, std::byte{0x77});
    EXPECT_EQ(SerializeHeaders(p, out), 0u) << OpcodeName(op);
    for (std::byte b : out) EXPECT_EQ(b, std::byte{0x77}) << OpcodeName(op);
  }
}

TEST(SerializeHeaders_Buffer, ExactSizeSuffices) {
  for (Opcode op : kAllOpcodes) {
    std::vector<std::byte> out(HeadersSize(op));
    EXPECT_EQ(SerializeHeaders(SamplePacket(op, {}), out), HeadersSize(op)) << OpcodeName(op);
  }
}

TEST(SerializeHeaders_Payload, LongerThanPayloadLenFieldIsRefused) {
  const auto payload = PayloadOf(0x10000);
  Packet p = SamplePacket(Opcode::kWrite, payload);
  std::vector<std::byte> out(kMaxHeadersSize);
  EXPECT_EQ(SerializeHeaders(p, out), 0u);
}

TEST(SerializeHeaders_Payload, NonDataOpcodesWriteZeroPayloadLen) {
  const auto payload = PayloadOf(9);
  for (Opcode op : {Opcode::kAck, Opcode::kProbe}) {
    Packet p = SamplePacket(op, {});
    p.payload = payload;
    std::vector<std::byte> out(kMaxHeadersSize);
    ASSERT_EQ(SerializeHeaders(p, out), HeadersSize(op));
    EXPECT_EQ(out[10], std::byte{0});
    EXPECT_EQ(out[11], std::byte{0});
  }
}

// The writers a sender uses without a Packet: the same bytes as SerializeHeaders, and nothing
// written past their headers.
TEST(WriteHeaders_FromFields, SameBytesAsSerializeHeaders) {
  const auto payload = PayloadOf(33);
  for (Opcode op : kAllOpcodes) {
    const Packet p = SamplePacket(op, IsData(op) ? std::span<const std::byte>(payload)
                                                 : std::span<const std::byte>());
    std::vector<std::byte> expected(kMaxHeadersSize);
    ASSERT_EQ(SerializeHeaders(p, expected), HeadersSize(op)) << OpcodeName(op);
    expected.resize(HeadersSize(op));
    const BaseFields base{p.version, p.opcode, p.flags, p.dest_conn, p.path_id, p.psn, p.token};
    std::vector<std::byte> out(kMaxHeadersSize + 8, std::byte{0x77});
    if (IsData(op)) {
      WriteDataHeaders(base, p.data, static_cast<uint16_t>(payload.size()), out.data());
    } else if (op == Opcode::kAck) {
      WriteAckPacket(base, p.ack, out.data());
    } else {
      WriteBaseHeader(base, 0, out.data());
    }
    EXPECT_THAT(std::span<const std::byte>(out).first(HeadersSize(op)),
                ElementsAreArray(expected))
        << OpcodeName(op);
    for (size_t i = HeadersSize(op); i < out.size(); ++i) {
      EXPECT_EQ(out[i], std::byte{0x77}) << OpcodeName(op) << " byte " << i;
    }
  }
}

TEST(HeadersSize_EveryOpcode, MatchesSpec) {
  EXPECT_EQ(HeadersSize(Opcode::kWrite), 56u);
  EXPECT_EQ(HeadersSize(Opcode::kWriteImm), 56u);
  EXPECT_EQ(HeadersSize(Opcode::kSend), 56u);
  EXPECT_EQ(HeadersSize(Opcode::kSendImm), 56u);
  EXPECT_EQ(HeadersSize(Opcode::kAck), 80u);
  EXPECT_EQ(HeadersSize(Opcode::kProbe), 24u);
}

TEST(Opcode_Predicates, MatchSpec) {
  EXPECT_TRUE(IsData(Opcode::kWrite) && IsData(Opcode::kSendImm));
  EXPECT_FALSE(IsData(Opcode::kAck) || IsData(Opcode::kProbe));
  EXPECT_TRUE(CarriesImm(Opcode::kWriteImm) && CarriesImm(Opcode::kSendImm));
  EXPECT_FALSE(CarriesImm(Opcode::kWrite) || CarriesImm(Opcode::kSend));
  EXPECT_TRUE(ConsumesReceive(Opcode::kSend) && ConsumesReceive(Opcode::kSendImm) &&
              ConsumesReceive(Opcode::kWriteImm));
  EXPECT_FALSE(ConsumesReceive(Opcode::kWrite));
  EXPECT_TRUE(IsWrite(Opcode::kWrite) && IsWrite(Opcode::kWriteImm));
  EXPECT_FALSE(IsWrite(Opcode::kSend) || IsWrite(Opcode::kSendImm));
}

// ---------------------------------------------------------------------------------------------
// Every ParseError reason.

TEST(ParseError_Truncated, EveryLengthBelowBaseHeader) {
  const auto full = Datagram(SamplePacket(Opcode::kWrite, {}));
  for (size_t n = 0; n < sizeof(BaseHeader); ++n) {
    EXPECT_EQ(ParseExact(std::span(full).first(n)).error, ParseError::kTruncated) << n;
  }
}

TEST(ParseError_Truncated, EveryLengthBelowEachOpcodesHeaders) {
  for (Opcode op : kAllOpcodes) {
    const auto full = Datagram(SamplePacket(op, {}));
    ASSERT_EQ(full.size(), HeadersSize(op));
    for (size_t n = 0; n < HeadersSize(op); ++n) {
      EXPECT_EQ(ParseExact(std::span(full).first(n)).error, ParseError::kTruncated)
          << OpcodeName(op) << " length " << n;
    }
    EXPECT_TRUE(ParseExact(full).ok()) << OpcodeName(op);
  }
}

TEST(ParseError_BadVersion, AnyOtherVersionByte) {
  auto bytes = Datagram(SamplePacket(Opcode::kProbe, {}));
  for (int v = 0; v < 256; ++v) {
    if (v == kVersion) continue;
    bytes[0] = std::byte(v);
    EXPECT_EQ(Parse(bytes).error, ParseError::kBadVersion) << v;
  }
}

TEST(ParseError_BadOpcode, EveryUnknownOpcodeByte) {
  for (int op = 0; op < 256; ++op) {
    bool known = false;
    for (Opcode k : kAllOpcodes) known |= static_cast<uint8_t>(k) == op;
    // Long enough for any opcode's headers, so only the opcode can be wrong.
    auto bytes = Datagram(SamplePacket(Opcode::kAck, {}));
    bytes[1] = std::byte(op);
    const ParseError e = Parse(bytes).error;
    if (known) {
      EXPECT_NE(e, ParseError::kBadOpcode) << op;
    } else {
      EXPECT_EQ(e, ParseError::kBadOpcode) << op;
    }
  }
}

TEST(ParseError_BadVersion, CheckedBeforeOpcode) {
  auto bytes = Datagram(SamplePacket(Opcode::kProbe, {}));
  bytes[0] = std::byte{2};
  bytes[1] = std::byte{0xee};
  EXPECT_EQ(Parse(bytes).error, ParseError::kBadVersion);
}

TEST(ParseError_LengthMismatch, PayloadLenLargerThanDatagram) {
  const auto payload = PayloadOf(10);
  auto bytes = Datagram(SamplePacket(Opcode::kWrite, payload));
  bytes.pop_back();
  EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch);
}

TEST(ParseError_LengthMismatch, PayloadLenSmallerThanDatagram) {
  const auto payload = PayloadOf(10);
  auto bytes = Datagram(SamplePacket(Opcode::kSend, payload));
  bytes.push_back(std::byte{0});
  EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch);
}

TEST(ParseError_LengthMismatch, PayloadLenFieldDisagrees) {
  const auto payload = PayloadOf(10);
  auto bytes = Datagram(SamplePacket(Opcode::kSendImm, payload));
  bytes[11] = std::byte{11};  // payload_len low byte
  EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch);
  bytes[10] = std::byte{0xff};
  bytes[11] = std::byte{0xff};
  EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch);
}

TEST(ParseError_LengthMismatch, NonDataPacketWithPayload) {
  for (Opcode op : {Opcode::kAck, Opcode::kProbe}) {
    auto bytes = Datagram(SamplePacket(op, {}));
    // A payload_len that agrees with the datagram is still refused: only data carries payload.
    bytes[11] = std::byte{4};
    bytes.insert(bytes.end(), 4, std::byte{0xab});
    EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch) << OpcodeName(op);
  }
}

TEST(ParseError_LengthMismatch, NonDataPacketWithTrailingBytes) {
  for (Opcode op : {Opcode::kAck, Opcode::kProbe}) {
    auto bytes = Datagram(SamplePacket(op, {}));
    bytes.push_back(std::byte{0});
    EXPECT_EQ(Parse(bytes).error, ParseError::kLengthMismatch) << OpcodeName(op);
  }
}

TEST(ParseError_BadRange, OffsetPlusLengthBeyondMessage) {
  const auto payload = PayloadOf(100);
  Packet p = SamplePacket(Opcode::kWrite, payload);
  p.data.offset = 1000;
  p.data.msg_len = 1099;
  EXPECT_EQ(Parse(Datagram(p)).error, ParseError::kBadRange);
  p.data.msg_len = 1100;  // ends exactly at the message's end
  EXPECT_TRUE(Parse(Datagram(p)).ok());
}

TEST(ParseError_BadRange, DoesNotWrapAround) {
  const auto payload = PayloadOf(2);
  Packet p = SamplePacket(Opcode::kSend, payload);
  p.data.offset = 0xffffffffu;
  p.data.msg_len = 0xffffffffu;
  EXPECT_EQ(Parse(Datagram(p)).error, ParseError::kBadRange);
}

TEST(ParseError_BadRange, EmptyPayloadAtMessageEnd) {
  Packet p = SamplePacket(Opcode::kSend, {});
  p.data.offset = 64;
  p.data.msg_len = 64;
  EXPECT_TRUE(Parse(Datagram(p)).ok());
  p.data.offset = 65;
  EXPECT_EQ(Parse(Datagram(p)).error, ParseError::kBadRange);
}

TEST(ParseError_BadSyndrome, EveryUnknownSyndromeByte) {
  auto bytes = Datagram(SamplePacket(Opcode::kAck, {}));
  constexpr size_t kSyndromeAt = sizeof(BaseHeader) + offsetof(AckHeader, syndrome);
  for (int s = static_cast<int>(Syndrome::kRemoteOperationalNak) + 1; s < 256; ++s) {
    bytes[kSyndromeAt] = std::byte(s);
    EXPECT_EQ(Parse(bytes).error, ParseError::kBadSyndrome) << s;
  }
}

// When a datagram fails several checks, the first in the spec's order (section 9) is reported.
TEST(ParseError_Order, FirstFailedCheckIsReported) {
  // 1 before 2: too short for a base header, and a bad version.
  auto short_bad_version = Datagram(SamplePacket(Opcode::kProbe, {}));
  short_bad_version[0] = std::byte{9};
  short_bad_version.resize(10);
  EXPECT_EQ(Parse(short_bad_version).error, ParseError::kTruncated);

  // 3 before 4: an unknown opcode in a datagram shorter than any data or ACK headers.
  auto bad_opcode = Datagram(SamplePacket(Opcode::kProbe, {}));
  bad_opcode[1] = std::byte{0x7f};
  bad_opcode.push_back(std::byte{0});
  EXPECT_EQ(Parse(bad_opcode).error, ParseError::kBadOpcode);

  // 4 before 5: data headers cut short, payload_len disagreeing too.
  auto short_data = Datagram(SamplePacket(Opcode::kWrite, PayloadOf(100)));
  short_data.resize(40);
  EXPECT_EQ(Parse(short_data).error, ParseError::kTruncated);

  // 5 before 7: payload_len wrong and offset beyond msg_len.
  const auto payload = PayloadOf(8);
  Packet both = SamplePacket(Opcode::kSend, payload);
  both.data.offset = 1000;
  both.data.msg_len = 10;
  auto mismatch_and_range = Datagram(both);
  mismatch_and_range.push_back(std::byte{0});
  EXPECT_EQ(Parse(mismatch_and_range).error, ParseError::kLengthMismatch);

  // 6 before 8: an ACK with a payload and an unknown syndrome.
  auto ack = Datagram(SamplePacket(Opcode::kAck, {}));
  ack[sizeof(BaseHeader) + offsetof(AckHeader, syndrome)] = std::byte{0xee};
  ack[11] = std::byte{1};
  ack.push_back(std::byte{0});
  EXPECT_EQ(Parse(ack).error, ParseError::kLengthMismatch);
}

TEST(ParseError_Names, DistinctForEveryReason) {
  std::set<std::string_view> names;
  for (int e = 0; e < static_cast<int>(ParseError::kCount); ++e) {
    const std::string_view name = ParseErrorName(static_cast<ParseError>(e));
    EXPECT_NE(name, "unknown") << e;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ParseError::kCount));
}

TEST(ParseError_Result, FailedParseCarriesNoPayload) {
  auto bytes = Datagram(SamplePacket(Opcode::kWrite, PayloadOf(8)));
  bytes.push_back(std::byte{0});
  const ParseResult r = Parse(bytes);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.packet.payload.empty());
}

// ---------------------------------------------------------------------------------------------
// Parse never reads out of bounds: every prefix of every valid packet, each in a heap block of
// exactly its size (the sanitizer build turns an over-read into a failure).

TEST(Parse_Bounds, EveryPrefixOfEveryOpcode) {
  const auto payload = PayloadOf(33);
  for (Opcode op : kAllOpcodes) {
    const auto full = Datagram(SamplePacket(op, IsData(op) ? std::span(payload) : std::span(payload).first(0)));
    for (size_t n = 0; n < full.size(); ++n) {
      const ParseResult r = ParseExact(std::span(full).first(n));
      EXPECT_FALSE(r.ok()) << OpcodeName(op) << " prefix " << n;
      EXPECT_EQ(r.error, n < HeadersSize(op) ? ParseError::kTruncated : ParseError::kLengthMismatch)
          << OpcodeName(op) << " prefix " << n;
    }
    EXPECT_TRUE(ParseExact(full).ok()) << OpcodeName(op);
  }
}

TEST(Parse_Bounds, PayloadViewLiesInsideDatagram) {
  const auto payload = PayloadOf(33);
  const auto bytes = Datagram(SamplePacket(Opcode::kWrite, payload));
  const ParseResult r = Parse(bytes);
  ASSERT_TRUE(r.ok());
  EXPECT_GE(r.packet.payload.data(), bytes.data());
  EXPECT_EQ(r.packet.payload.data() + r.packet.payload.size(), bytes.data() + bytes.size());
}

// ---------------------------------------------------------------------------------------------
// SackBitmap, checked against std::bitset as a reference model.

std::bitset<kSackBits> Reference(const SackBitmap& b) {
  std::bitset<kSackBits> out;
  for (uint32_t k = 0; k < kSackBits; ++k) out[k] = b.Test(k);
  return out;
}

// A deterministic pattern with bits in every word and at both ends.
SackBitmap Pattern() {
  SackBitmap b;
  uint32_t x = 12345;
  for (uint32_t k = 0; k < kSackBits; ++k) {
    x = x * 1103515245u + 12345u;
    if ((x >> 16) & 1) b.Set(k);
  }
  b.Set(0);
  b.Set(63);
  b.Set(64);
  b.Set(255);
  return b;
}

TEST(SackBitmap_Set, SetsOnlyThatBit) {
  for (uint32_t k = 0; k < kSackBits; ++k) {
    SackBitmap b;
    b.Set(k);
    EXPECT_FALSE(b.Empty());
    for (uint32_t j = 0; j < kSackBits; ++j) ASSERT_EQ(b.Test(j), j == k) << k << " " << j;
  }
}

TEST(SackBitmap_Set, OutOfRangeIsIgnored) {
  SackBitmap b;
  b.Set(kSackBits);
  b.Set(1000);
  b.Set(0xffffffffu);
  EXPECT_TRUE(b.Empty());
  EXPECT_FALSE(b.Test(kSackBits));
  EXPECT_FALSE(b.Test(0xffffffffu));
}

TEST(SackBitmap_Clear, EmptiesTheBitmap) {
  SackBitmap b = Pattern();
  EXPECT_FALSE(b.Empty());
  b.Clear();
  EXPECT_TRUE(b.Empty());
  EXPECT_EQ(b, SackBitmap());
}

class SackBitmap_ShiftDown : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SackBitmap_ShiftDown, MatchesReference) {
  const uint32_t n = GetParam();
  SackBitmap b = Pattern();
  const std::bitset<kSackBits> expected = n >= kSackBits ? std::bitset<kSackBits>() : Reference(b) >> n;
  b.ShiftDown(n);
  EXPECT_EQ(Reference(b), expected) << "shift " << n;
  EXPECT_EQ(b.Empty(), expected.none());
}

TEST_P(SackBitmap_ShiftDown, SingleTopBitMoves) {
  const uint32_t n = GetParam();
  SackBitmap b;
  b.Set(kSackBits - 1);
  b.ShiftDown(n);
  if (n < kSackBits) {
    EXPECT_TRUE(b.Test(kSackBits - 1 - n));
    EXPECT_EQ(b.HighestPlusOne(), kSackBits - n);
  } else {
    EXPECT_TRUE(b.Empty());
  }
}

class SackBitmap_LeadingRun : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SackBitmap_LeadingRun, CountsSetBitsFromBitZero) {
  const uint32_t run = GetParam();
  SackBitmap b;
  for (uint32_t k = 0; k < run; ++k) b.Set(k);
  if (run + 1 < kSackBits) b.Set(run + 1);  // a later bit past the gap does not count
  EXPECT_EQ(b.LeadingRun(), run);
}

INSTANTIATE_TEST_SUITE_P(Runs, SackBitmap_LeadingRun,
                         ::testing::Values(0u, 1u, 2u, 63u, 64u, 65u, 127u, 128u, 200u, 255u,
                                           256u));

INSTANTIATE_TEST_SUITE_P(Shifts, SackBitmap_ShiftDown,
                         ::testing::Values(0u, 1u, 63u, 64u, 65u, 127u, 128u, 255u, 256u, 300u,
                                           0xffffffffu));

TEST(SackBitmap_HighestPlusOne, EmptyIsZero) { EXPECT_EQ(SackBitmap().HighestPlusOne(), 0u); }

TEST(SackBitmap_HighestPlusOne, EveryBit) {
  for (uint32_t k = 0; k < kSackBits; ++k) {
    SackBitmap b;
    b.Set(0);
    b.Set(k);
    EXPECT_EQ(b.HighestPlusOne(), k + 1) << k;
  }
}

TEST(SackBitmap_Wire, BitKIsByteKDiv8BitKMod8) {
  for (uint32_t k = 0; k < kSackBits; ++k) {
    SackBitmap b;
    b.Set(k);
    uint8_t wire[32];
    b.ToWire(wire);
    for (uint32_t i = 0; i < 32; ++i) {
      ASSERT_EQ(wire[i], i == k / 8 ? uint8_t(1u << (k % 8)) : 0u) << "bit " << k << " byte " << i;
    }
    EXPECT_EQ(SackBitmap::FromWire(wire), b);
  }
}

TEST(SackBitmap_Wire, RoundTripOfPattern) {
  const SackBitmap b = Pattern();
  uint8_t wire[32];
  b.ToWire(wire);
  EXPECT_EQ(SackBitmap::FromWire(wire), b);
  EXPECT_EQ(Reference(SackBitmap::FromWire(wire)), Reference(b));
}

TEST(SackBitmap_Wire, EveryByteValueDecodes) {
  for (int v = 0; v < 256; ++v) {
    uint8_t wire[32] = {};
    wire[13] = static_cast<uint8_t>(v);
    const SackBitmap b = SackBitmap::FromWire(wire);
    for (uint32_t bit = 0; bit < 8; ++bit) {
      EXPECT_EQ(b.Test(13 * 8 + bit), ((v >> bit) & 1) != 0) << v << " " << bit;
    }
    uint8_t back[32];
    b.ToWire(back);
    EXPECT_EQ(std::memcmp(back, wire, 32), 0) << v;
  }
}

}  // namespace
}  // namespace metaroce::wire
