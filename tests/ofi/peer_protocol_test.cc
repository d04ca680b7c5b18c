// lib/ofi/peer_protocol.h: the header every provider message carries: a round trip of every
// field, its little-endian layout, and DecodeHeader's refusals (short buffer, unknown kind,
// unknown flag bits).
#include "lib/ofi/peer_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>

namespace metaroce::ofi {
namespace {

using ::testing::HasSubstr;

using Buffer = std::array<std::byte, kHeaderBytes>;

// Every field with a distinct value whose bytes all differ.
MessageHeader Full() {
  MessageHeader h;
  h.kind = MessageKind::kCts;
  h.flags = header_flags::kTagged | header_flags::kRemoteData;
  h.credits = 0xa1b2;
  h.status = 0xc1c2c3c4;
  h.tag = 0x1011121314151617;
  h.data = 0x2021222324252627;
  h.length = 0x3031323334353637;
  h.send_id = 0x4041424344454647;
  h.addr = 0x5051525354555657;
  h.key = 0x6061626364656667;
  h.offset = 0x7071727374757677;
  h.recv_id = 0x81828384;
  h.chunk = 0x91929394;
  return h;
}

Buffer Encoded(const MessageHeader& h) {
  Buffer b{};
  EncodeHeader(h, b);
  return b;
}

void ExpectSame(const MessageHeader& a, const MessageHeader& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.credits, b.credits);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.tag, b.tag);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.send_id, b.send_id);
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.recv_id, b.recv_id);
  EXPECT_EQ(a.chunk, b.chunk);
}

TEST(PeerProtocol, RoundTripsEveryField) {
  const MessageHeader h = Full();
  const Buffer b = Encoded(h);
  absl::StatusOr<MessageHeader> d = DecodeHeader(b);
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectSame(*d, h);
}

TEST(PeerProtocol, RoundTripsEveryKind) {
  for (MessageKind k : {MessageKind::kEager, MessageKind::kRts, MessageKind::kCts,
                        MessageKind::kWrite, MessageKind::kWriteRts, MessageKind::kAck,
                        MessageKind::kCredit}) {
    MessageHeader h;
    h.kind = k;
    absl::StatusOr<MessageHeader> d = DecodeHeader(Encoded(h));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->kind, k);
  }
}

TEST(PeerProtocol, StoresFieldsLittleEndian) {
  const Buffer b = Encoded(Full());
  EXPECT_EQ(b[0], std::byte{3});     // kind kCts
  EXPECT_EQ(b[1], std::byte{3});     // flags
  EXPECT_EQ(b[2], std::byte{0xb2});  // credits, low byte first
  EXPECT_EQ(b[3], std::byte{0xa1});
  EXPECT_EQ(b[8], std::byte{0x17});  // tag
  EXPECT_EQ(b[15], std::byte{0x10});
  EXPECT_EQ(b[64], std::byte{0x84});  // recv_id
  EXPECT_EQ(b[71], std::byte{0x91});  // chunk's last byte
}

TEST(PeerProtocol, DecodeRefusesAShortBuffer) {
  const Buffer b = Encoded(Full());
  absl::StatusOr<MessageHeader> d = DecodeHeader(std::span(b).first(kHeaderBytes - 1));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("71 bytes"));
}

TEST(PeerProtocol, DecodeRefusesKindZero) {
  Buffer b = Encoded(Full());
  b[0] = std::byte{0};
  EXPECT_THAT(DecodeHeader(b).status().message(), HasSubstr("unknown kind 0"));
}

TEST(PeerProtocol, DecodeRefusesAKindBeyondCredit) {
  Buffer b = Encoded(Full());
  b[0] = std::byte{8};
  EXPECT_THAT(DecodeHeader(b).status().message(), HasSubstr("unknown kind 8"));
}

TEST(PeerProtocol, DecodeRefusesUnknownFlagBits) {
  Buffer b = Encoded(Full());
  b[1] = std::byte{0x08 | header_flags::kTagged};
  EXPECT_THAT(DecodeHeader(b).status().message(), HasSubstr("unknown flag bits 0x9"));
}

}  // namespace
}  // namespace metaroce::ofi
