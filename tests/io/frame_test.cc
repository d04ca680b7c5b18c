#include "lib/io/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace metaroce::io {
namespace {

std::vector<std::byte> Bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 31 + seed) & 0xFF);
  return out;
}

uint8_t At(const std::vector<std::byte>& frame, size_t i) { return static_cast<uint8_t>(frame[i]); }

// Independent reference: the textbook RFC 1071 loop over 16-bit big-endian words, one word at a
// time, with an explicit pseudo-header buffer (no shared code with frame.cc).
uint16_t ReferenceChecksum(const std::vector<uint8_t>& data) {
  uint32_t sum = 0;
  for (size_t i = 0; i < data.size(); i += 2) {
    uint16_t word = static_cast<uint16_t>(data[i] << 8);
    if (i + 1 < data.size()) word |= data[i + 1];
    sum += word;
    while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  }
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

uint16_t ReferenceUdpChecksum(const IpAddress& src, const IpAddress& dst,
                              const std::vector<std::byte>& frame, size_t udp_at,
                              size_t udp_length) {
  std::vector<uint8_t> buf;
  const size_t n = src.v6 ? 16 : 4;
  buf.insert(buf.end(), src.bytes.begin(), src.bytes.begin() + n);
  buf.insert(buf.end(), dst.bytes.begin(), dst.bytes.begin() + n);
  if (src.v6) {
    buf.push_back(static_cast<uint8_t>(udp_length >> 24));
    buf.push_back(static_cast<uint8_t>(udp_length >> 16));
    buf.push_back(static_cast<uint8_t>(udp_length >> 8));
    buf.push_back(static_cast<uint8_t>(udp_length));
    buf.insert(buf.end(), {0, 0, 0, 17});
  } else {
    buf.insert(buf.end(), {0, 17});
    buf.push_back(static_cast<uint8_t>(udp_length >> 8));
    buf.push_back(static_cast<uint8_t>(udp_length));
  }
  for (size_t i = 0; i < udp_length; ++i) {
    // The checksum field itself counts as zero.
    buf.push_back(i == 6 || i == 7 ? 0 : At(frame, udp_at + i));
  }
  uint16_t c = ReferenceChecksum(buf);
  return c == 0 ? 0xFFFF : c;
}

FrameAddresses V4Addresses() {
  FrameAddresses a;
  a.src_mac = *MacAddress::Parse("02:00:00:00:00:01");
  a.dst_mac = *MacAddress::Parse("02:00:00:00:00:02");
  a.src_ip = *IpAddress::Parse("198.18.0.1");
  a.dst_ip = *IpAddress::Parse("198.18.0.2");
  a.src_port = 49152;
  a.dst_port = 4792;
  return a;
}

FrameAddresses V6Addresses() {
  FrameAddresses a = V4Addresses();
  a.src_ip = *IpAddress::Parse("fd00::1");
  a.dst_ip = *IpAddress::Parse("fd00::2");
  return a;
}

std::vector<std::byte> Build(const FrameAddresses& a, const std::vector<std::byte>& headers,
                             const std::vector<std::byte>& payload) {
  std::vector<std::byte> frame(4096);
  absl::StatusOr<size_t> n = BuildFrame(frame, a, headers, payload);
  EXPECT_TRUE(n.ok()) << n.status();
  frame.resize(n.ok() ? *n : 0);
  return frame;
}

TEST(MacAddress_Parse, RoundTripsAndRejectsGarbage) {
  absl::StatusOr<MacAddress> mac = MacAddress::Parse("0a:1B:2c:3d:4e:5F");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(mac->ToString(), "0a:1b:2c:3d:4e:5f");
  EXPECT_FALSE(MacAddress::Parse("0a:1b:2c:3d:4e").ok());
  EXPECT_FALSE(MacAddress::Parse("0a:1b:2c:3d:4e:5f:00").ok());
  EXPECT_FALSE(MacAddress::Parse("hello").ok());
}

TEST(InternetChecksum, MatchesRfc1071Example) {
  // RFC 1071 section 3: words 0001 f203 f4f5 f6f7 sum to ddf2 (before complement).
  const auto data = Bytes({0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7});
  EXPECT_EQ(InternetChecksum(data), static_cast<uint16_t>(~0xddf2));
}

TEST(InternetChecksum, MatchesReferenceForEveryLengthAndOffset) {
  const auto data = Pattern(300, 7);
  for (size_t offset = 0; offset < 4; ++offset) {
    for (size_t n = 0; n + offset <= data.size(); n += 7) {
      std::vector<uint8_t> ref;
      for (size_t i = 0; i < n; ++i) ref.push_back(At(data, offset + i));
      EXPECT_EQ(InternetChecksum(std::span(data).subspan(offset, n)), ReferenceChecksum(ref))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(InternetChecksum, MatchesReferenceForLargeAndSaturatedBuffers) {
  // Past 2^15 words (the sum's blocks), and every byte 0xFF (the largest sums).
  for (size_t n : {size_t{8900}, size_t{65535}, size_t{131077}, size_t{300001}}) {
    for (bool ones : {false, true}) {
      std::vector<std::byte> data = ones ? std::vector<std::byte>(n, std::byte{0xFF}) : Pattern(n, 3);
      std::vector<uint8_t> ref(n);
      for (size_t i = 0; i < n; ++i) ref[i] = At(data, i);
      EXPECT_EQ(InternetChecksum(data), ReferenceChecksum(ref)) << n << (ones ? " of 0xFF" : "");
    }
  }
}

TEST(CopyAndSum, CopiesExactlyAndSumsAsInternetSum) {
  const auto data = Pattern(9001, 5);
  for (size_t src_off = 0; src_off < 4; ++src_off) {
    for (size_t dst_off = 0; dst_off < 4; ++dst_off) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{63},
                       size_t{64}, size_t{65}, size_t{1413}, size_t{8997}}) {
        const auto src = std::span(data).subspan(src_off, n);
        std::vector<std::byte> dst(n + 8, std::byte{0xA5});
        EXPECT_EQ(CopyAndSum(dst.data() + dst_off, src), InternetSum(src))
            << "length " << n << " offsets " << src_off << "/" << dst_off;
        EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + dst_off)) << n;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (i < dst_off || i >= dst_off + n) EXPECT_EQ(dst[i], std::byte{0xA5}) << "byte " << i;
        }
      }
    }
  }
}

TEST(CombineSums, SumOfPartsAtEvenAndOddOffsetsIsTheSumOfTheWhole) {
  const auto data = Pattern(4001, 9);
  for (size_t split : {size_t{0}, size_t{1}, size_t{2}, size_t{1001}, size_t{2048}, size_t{4001}}) {
    const auto a = std::span(data).first(split), b = std::span(data).subspan(split);
    EXPECT_EQ(CombineSums(InternetSum(a), a.size(), InternetSum(b)), InternetSum(data))
        << "split at " << split;
  }
}

TEST(BuildFrame_Ipv4, WritesHeadersTheReferenceAgreesWith) {
  const auto headers = Pattern(24, 1);
  const auto payload = Pattern(1001, 2);  // odd length: the checksum's trailing byte
  const FrameAddresses a = V4Addresses();
  const auto frame = Build(a, headers, payload);
  ASSERT_EQ(frame.size(), 14 + 20 + 8 + 24 + 1001);
  // Ethernet.
  EXPECT_EQ(At(frame, 0), 0x02);
  EXPECT_EQ(At(frame, 5), 0x02);
  EXPECT_EQ(At(frame, 11), 0x01);
  EXPECT_EQ(At(frame, 12), 0x08);
  EXPECT_EQ(At(frame, 13), 0x00);
  // IPv4: version/IHL, ECT(0), total length, DF, TTL, protocol.
  EXPECT_EQ(At(frame, 14), 0x45);
  EXPECT_EQ(At(frame, 15), 0x02);
  EXPECT_EQ(At(frame, 16) << 8 | At(frame, 17), 20 + 8 + 24 + 1001);
  EXPECT_EQ(At(frame, 20), 0x40);
  EXPECT_EQ(At(frame, 22), 64);
  EXPECT_EQ(At(frame, 23), 17);
  std::vector<uint8_t> ip;
  for (size_t i = 14; i < 34; ++i) ip.push_back(i == 24 || i == 25 ? 0 : At(frame, i));
  EXPECT_EQ(At(frame, 24) << 8 | At(frame, 25), ReferenceChecksum(ip));
  // UDP.
  EXPECT_EQ(At(frame, 34) << 8 | At(frame, 35), 49152);
  EXPECT_EQ(At(frame, 36) << 8 | At(frame, 37), 4792);
  EXPECT_EQ(At(frame, 38) << 8 | At(frame, 39), 8 + 24 + 1001);
  EXPECT_EQ(At(frame, 40) << 8 | At(frame, 41),
            ReferenceUdpChecksum(a.src_ip, a.dst_ip, frame, 34, 8 + 24 + 1001));
  EXPECT_EQ(std::memcmp(frame.data() + 42, headers.data(), 24), 0);
  EXPECT_EQ(std::memcmp(frame.data() + 66, payload.data(), 1001), 0);
}

TEST(BuildFrame_Ipv6, WritesMandatoryChecksumAndTrafficClass) {
  const auto headers = Pattern(24, 3);
  const auto payload = Pattern(500, 4);
  const FrameAddresses a = V6Addresses();
  const auto frame = Build(a, headers, payload);
  ASSERT_EQ(frame.size(), 14 + 40 + 8 + 524);
  EXPECT_EQ(At(frame, 12) << 8 | At(frame, 13), 0x86DD);
  EXPECT_EQ(At(frame, 14), 0x60);  // version 6, traffic class high nibble 0
  EXPECT_EQ(At(frame, 15), 0x20);  // traffic class low nibble 0x2: ECT(0)
  EXPECT_EQ(At(frame, 18) << 8 | At(frame, 19), 8 + 524);
  EXPECT_EQ(At(frame, 20), 17);
  EXPECT_EQ(At(frame, 21), 64);
  const uint16_t udp_checksum = static_cast<uint16_t>(At(frame, 60) << 8 | At(frame, 61));
  EXPECT_NE(udp_checksum, 0);
  EXPECT_EQ(udp_checksum, ReferenceUdpChecksum(a.src_ip, a.dst_ip, frame, 54, 8 + 524));
}

// A multi-buffer sender writes the head and puts the payload elsewhere: the same bytes as
// BuildFrame, checksum included, whether the payload starts at an even or an odd offset.
TEST(BuildFrameHead, MatchesBuildFrameWithThePayloadAfterIt) {
  for (bool v6 : {false, true}) {
    for (size_t header_len : {size_t{56}, size_t{7}}) {
      const FrameAddresses a = v6 ? V6Addresses() : V4Addresses();
      std::vector<std::byte> headers(header_len), payload(1001);
      for (size_t i = 0; i < headers.size(); ++i) headers[i] = std::byte(0x30 + i);
      for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte((i * 37 + 11) & 0xFF);
      std::vector<std::byte> whole(2048), split(2048);
      absl::StatusOr<size_t> n = BuildFrame(whole, a, headers, payload);
      ASSERT_TRUE(n.ok()) << n.status();
      absl::StatusOr<size_t> head =
          BuildFrameHead(split, a, headers, payload.size(), InternetSum(payload));
      ASSERT_TRUE(head.ok()) << head.status();
      EXPECT_EQ(*head, FrameHeaderBytes(a) + header_len);
      std::memcpy(split.data() + *head, payload.data(), payload.size());
      EXPECT_TRUE(std::equal(whole.begin(), whole.begin() + *n, split.begin()))
          << (v6 ? "IPv6" : "IPv4") << ", headers of " << header_len << " bytes";
      const size_t udp_at = FrameHeaderBytes(a) - 8;
      const size_t udp_length = 8 + header_len + payload.size();
      EXPECT_EQ(At(split, udp_at + 6) << 8 | At(split, udp_at + 7),
                ReferenceUdpChecksum(a.src_ip, a.dst_ip, split, udp_at, udp_length))
          << (v6 ? "IPv6" : "IPv4") << ", headers of " << header_len << " bytes";
    }
  }
}

TEST(BuildFrame, RefusesTooSmallBufferAndMixedFamilies) {
  FrameAddresses a = V4Addresses();
  const auto payload = Pattern(100, 0);
  std::vector<std::byte> small(14 + 20 + 8 + 99);
  absl::StatusOr<size_t> n = BuildFrame(small, a, {}, payload);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kResourceExhausted);
  small.resize(14 + 20 + 8 + 100);
  EXPECT_TRUE(BuildFrame(small, a, {}, payload).ok());
  a.dst_ip = *IpAddress::Parse("fd00::2");
  EXPECT_EQ(BuildFrame(small, a, {}, payload).status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct RoundTripCase {
  bool v6;
  bool vlan;
  bool ect;
  size_t payload_bytes;
};

class FrameRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(FrameRoundTrip, ParseGivesBackWhatBuildWrote) {
  const RoundTripCase c = GetParam();
  FrameAddresses a = c.v6 ? V6Addresses() : V4Addresses();
  if (c.vlan) a.vlan_tci = 0x2064;  // PCP 1, VID 100
  a.ect = c.ect;
  const auto headers = Pattern(24, 5);
  const auto payload = Pattern(c.payload_bytes, 6);
  const auto frame = Build(a, headers, payload);
  ParsedFrame parsed;
  ASSERT_EQ(ParseFrame(frame, {.port = 4792, .verify_udp_checksum = true}, &parsed),
            FrameVerdict::kOk);
  EXPECT_EQ(parsed.src_mac, a.src_mac);
  EXPECT_EQ(parsed.dst_mac, a.dst_mac);
  EXPECT_EQ(parsed.vlan_tci, a.vlan_tci);
  EXPECT_EQ(parsed.src_ip, a.src_ip);
  EXPECT_EQ(parsed.dst_ip, a.dst_ip);
  EXPECT_EQ(parsed.src_port, a.src_port);
  EXPECT_EQ(parsed.dst_port, a.dst_port);
  EXPECT_EQ(parsed.ecn, c.ect ? Ecn::kEct0 : Ecn::kNotEct);
  EXPECT_FALSE(parsed.ce());
  ASSERT_EQ(parsed.payload.size(), headers.size() + payload.size());
  EXPECT_TRUE(std::equal(headers.begin(), headers.end(), parsed.payload.begin()));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(),
                         parsed.payload.begin() + static_cast<ptrdiff_t>(headers.size())));
}

INSTANTIATE_TEST_SUITE_P(Cases, FrameRoundTrip,
                         ::testing::Values(RoundTripCase{false, false, true, 0},
                                           RoundTripCase{false, false, false, 1},
                                           RoundTripCase{false, true, true, 1400},
                                           RoundTripCase{true, false, true, 999},
                                           RoundTripCase{true, true, false, 1},
                                           RoundTripCase{true, true, true, 3000}));

TEST(ParseFrame, EveryTruncationIsRefusedWithoutReadingPastTheEnd) {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      FrameAddresses a = v6 ? V6Addresses() : V4Addresses();
      if (vlan) a.vlan_tci = 7;
      const auto frame = Build(a, Pattern(24, 0), Pattern(33, 0));
      for (size_t n = 0; n < frame.size(); ++n) {
        // An exact-size copy, so that AddressSanitizer would see any over-read.
        std::vector<std::byte> cut(frame.begin(), frame.begin() + n);
        ParsedFrame parsed;
        const FrameVerdict v = ParseFrame(cut, {.port = 4792}, &parsed);
        EXPECT_NE(v, FrameVerdict::kOk) << "v6 " << v6 << " vlan " << vlan << " length " << n;
        EXPECT_EQ(v, FrameVerdict::kTruncated) << FrameVerdictName(v) << " at length " << n;
      }
      ParsedFrame parsed;
      EXPECT_EQ(ParseFrame(frame, {.port = 4792}, &parsed), FrameVerdict::kOk);
    }
  }
}

TEST(ParseFrame, ReadsCeInIpv4AndIpv6) {
  for (bool v6 : {false, true}) {
    auto frame = Build(v6 ? V6Addresses() : V4Addresses(), Pattern(24, 0), {});
    // Mark CE as a router would (and fix the IPv4 header checksum as it would).
    if (v6) {
      frame[15] = static_cast<std::byte>(0x30);  // traffic class low nibble 0x3
    } else {
      frame[15] = static_cast<std::byte>(0x03);
      frame[24] = frame[25] = std::byte{0};
      const uint16_t c = InternetChecksum(std::span(frame).subspan(14, 20));
      frame[24] = static_cast<std::byte>(c >> 8);
      frame[25] = static_cast<std::byte>(c & 0xFF);
    }
    ParsedFrame parsed;
    ASSERT_EQ(ParseFrame(frame, {.port = 4792}, &parsed), FrameVerdict::kOk) << v6;
    EXPECT_TRUE(parsed.ce());
  }
}

TEST(ParseFrame, NamesWhyAFrameIsNotOurs) {
  ParsedFrame parsed;
  const auto good = Build(V4Addresses(), Pattern(24, 0), Pattern(10, 0));

  auto arp = good;
  arp[12] = static_cast<std::byte>(0x08);
  arp[13] = static_cast<std::byte>(0x06);
  EXPECT_EQ(ParseFrame(arp, {}, &parsed), FrameVerdict::kNotIp);

  auto bad_ip_checksum = good;
  bad_ip_checksum[24] ^= std::byte{0x01};
  EXPECT_EQ(ParseFrame(bad_ip_checksum, {}, &parsed), FrameVerdict::kBadIpChecksum);

  auto bad_version = good;
  bad_version[14] = static_cast<std::byte>(0x55);
  EXPECT_EQ(ParseFrame(bad_version, {}, &parsed), FrameVerdict::kBadIpHeader);

  EXPECT_EQ(ParseFrame(good, {.port = 9999}, &parsed), FrameVerdict::kNotOurPort);
  EXPECT_EQ(ParseFrame(good, {.port = 49152}, &parsed), FrameVerdict::kOk);  // source port: an ACK
  EXPECT_EQ(ParseFrame(good, {.port = 0}, &parsed), FrameVerdict::kOk);

  auto corrupt_payload = good;
  corrupt_payload.back() ^= std::byte{0xFF};
  EXPECT_EQ(ParseFrame(corrupt_payload, {.verify_udp_checksum = true}, &parsed),
            FrameVerdict::kBadUdpChecksum);
  EXPECT_EQ(ParseFrame(corrupt_payload, {.verify_udp_checksum = false}, &parsed),
            FrameVerdict::kOk);

  auto no_checksum = corrupt_payload;  // IPv4: zero means "none"
  no_checksum[40] = no_checksum[41] = std::byte{0};
  EXPECT_EQ(ParseFrame(no_checksum, {.verify_udp_checksum = true}, &parsed), FrameVerdict::kOk);

  auto v6 = Build(V6Addresses(), Pattern(24, 0), {});
  v6[60] = v6[61] = std::byte{0};  // IPv6: zero is forbidden
  EXPECT_EQ(ParseFrame(v6, {}, &parsed), FrameVerdict::kBadUdpChecksum);

  auto tcp = good;
  tcp[23] = static_cast<std::byte>(6);
  tcp[24] = tcp[25] = std::byte{0};
  const uint16_t c = InternetChecksum(std::span(tcp).subspan(14, 20));
  tcp[24] = static_cast<std::byte>(c >> 8);
  tcp[25] = static_cast<std::byte>(c & 0xFF);
  EXPECT_EQ(ParseFrame(tcp, {}, &parsed), FrameVerdict::kNotUdp);

  auto fragment = good;
  fragment[20] = static_cast<std::byte>(0x20);  // MF
  fragment[24] = fragment[25] = std::byte{0};
  const uint16_t f = InternetChecksum(std::span(fragment).subspan(14, 20));
  fragment[24] = static_cast<std::byte>(f >> 8);
  fragment[25] = static_cast<std::byte>(f & 0xFF);
  EXPECT_EQ(ParseFrame(fragment, {}, &parsed), FrameVerdict::kIpFragment);

  auto udp_too_long = good;
  udp_too_long[38] = static_cast<std::byte>(0x7F);
  EXPECT_EQ(ParseFrame(udp_too_long, {}, &parsed), FrameVerdict::kBadUdpLength);
}

TEST(ParseFrame, IgnoresEthernetPadding) {
  auto frame = Build(V4Addresses(), Bytes({1, 2, 3}), {});  // 45 bytes, padded to 60 on the wire
  frame.resize(60, std::byte{0});
  ParsedFrame parsed;
  ASSERT_EQ(ParseFrame(frame, {.verify_udp_checksum = true}, &parsed), FrameVerdict::kOk);
  EXPECT_EQ(parsed.payload.size(), 3u);
}

}  // namespace
}  // namespace metaroce::io
