// lib/ofi/address.h: the provider's endpoint address (what fi_getname gives and fi_av_insert
// takes): Encode/Decode round trips for IPv4 (4 planes) and IPv6 (3 planes), ToString, and each
// refusal of Decode with a message naming what is wrong.
#include "lib/ofi/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace metaroce::ofi {
namespace {

using ::testing::HasSubstr;

io::IpAddress Ip(const char* text) { return *io::IpAddress::Parse(text); }

EndpointAddress FourV4Planes() {
  EndpointAddress a;
  a.planes = {Ip("10.0.0.1"), Ip("10.0.1.1"), Ip("10.0.2.1"), Ip("10.0.3.1")};
  a.tcp_port = 40123;
  a.nonce = 0xdeadbeef;
  return a;
}

EndpointAddress ThreeV6Planes() {
  EndpointAddress a;
  a.planes = {Ip("fd00::1"), Ip("fd00:1::1"), Ip("fd00:2::abcd")};
  a.tcp_port = 1;
  a.nonce = 7;
  return a;
}

absl::Status DecodeStatus(const EndpointAddress::Bytes& b) {
  return EndpointAddress::Decode(b).status();
}

TEST(EndpointAddress, RoundTripsFourIpv4Planes) {
  const EndpointAddress a = FourV4Planes();
  absl::StatusOr<EndpointAddress> b = EndpointAddress::Decode(a.Encode());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, a);
}

TEST(EndpointAddress, RoundTripsThreeIpv6Planes) {
  const EndpointAddress a = ThreeV6Planes();
  absl::StatusOr<EndpointAddress> b = EndpointAddress::Decode(a.Encode());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, a);
}

TEST(EndpointAddress, EncodesTheDocumentedLayout) {
  EndpointAddress a;
  a.planes = {Ip("192.168.1.2")};
  a.tcp_port = 0x1234;
  a.nonce = 0x01020304;
  const EndpointAddress::Bytes b = a.Encode();
  EXPECT_EQ(b.size(), 60u);
  EXPECT_EQ(b[0], 'M');
  EXPECT_EQ(b[1], 'R');
  EXPECT_EQ(b[2], 'A');
  EXPECT_EQ(b[3], 1);     // version
  EXPECT_EQ(b[4], 1);     // planes
  EXPECT_EQ(b[5], 4);     // family
  EXPECT_EQ(b[6], 0x12);  // port, big-endian
  EXPECT_EQ(b[7], 0x34);
  EXPECT_EQ(b[8], 0x01);  // nonce, big-endian
  EXPECT_EQ(b[11], 0x04);
  EXPECT_EQ(b[12], 192);
  EXPECT_EQ(b[15], 2);
  for (size_t i = 16; i < b.size(); ++i) EXPECT_EQ(b[i], 0) << "byte " << i;
}

TEST(EndpointAddress, ToStringNamesPlanesPortAndNonce) {
  EXPECT_EQ(FourV4Planes().ToString(),
            "metaroce://10.0.0.1,10.0.1.1,10.0.2.1,10.0.3.1:40123/deadbeef");
  EXPECT_EQ(ThreeV6Planes().ToString(),
            "metaroce://[fd00::1],[fd00:1::1],[fd00:2::abcd]:1/00000007");
}

TEST(EndpointAddress, DecodeRefusesAShortBuffer) {
  const EndpointAddress::Bytes b = FourV4Planes().Encode();
  absl::StatusOr<EndpointAddress> a =
      EndpointAddress::Decode(std::span<const uint8_t>(b.data(), b.size() - 1));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("59 bytes"));
}

TEST(EndpointAddress, DecodeRefusesABadMagic) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[1] = 'X';
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("magic"));
}

TEST(EndpointAddress, DecodeRefusesAnotherVersion) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[3] = 2;
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("version 2"));
}

TEST(EndpointAddress, DecodeRefusesAnUnknownFamily) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[5] = 5;
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("family 5"));
}

TEST(EndpointAddress, DecodeRefusesZeroPlanes) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[4] = 0;
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("0 planes"));
}

TEST(EndpointAddress, DecodeRefusesFiveIpv4Planes) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[4] = 5;
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("5 planes"));
}

TEST(EndpointAddress, DecodeRefusesFourIpv6Planes) {
  EndpointAddress::Bytes b = ThreeV6Planes().Encode();
  b[4] = 4;
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("4 planes"));
}

TEST(EndpointAddress, DecodeRefusesPortZero) {
  EndpointAddress a = FourV4Planes();
  a.tcp_port = 0;
  EXPECT_THAT(DecodeStatus(a.Encode()).message(), HasSubstr("TCP port 0"));
}

TEST(EndpointAddress, DecodeRefusesNoBufferAtAll) {
  // fi_av_insert of the dest_addr of an fi_info that has none (fabtests' fi_rdm g00n13s).
  absl::StatusOr<EndpointAddress> a = EndpointAddress::Decode(std::span<const uint8_t>());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("0 bytes"));
  EXPECT_FALSE(EndpointAddress::DecodeSource(std::span<const uint8_t>()).ok());
}

TEST(EndpointAddress, DecodeSourceTakesPortZero) {
  EndpointAddress a = FourV4Planes();
  a.tcp_port = 0;
  absl::StatusOr<EndpointAddress> b = EndpointAddress::DecodeSource(a.Encode());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, a);
}

TEST(EndpointAddress, DecodeSourceRefusesWhatDecodeRefusesBesidesThePort) {
  EndpointAddress::Bytes b = FourV4Planes().Encode();
  b[0] = 'X';
  EXPECT_THAT(EndpointAddress::DecodeSource(b).status().message(), HasSubstr("magic"));
}

}  // namespace
}  // namespace metaroce::ofi
