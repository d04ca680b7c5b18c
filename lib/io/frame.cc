#include "lib/io/frame.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"

namespace metaroce::io {
namespace {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr uint16_t kEtherTypeVlan = 0x8100;   // 802.1Q
constexpr uint16_t kEtherTypeQinQ = 0x88A8;   // 802.1ad outer tag
constexpr uint8_t kIpProtoUdp = 17;
constexpr uint8_t kIpv6NextFragment = 44;

uint8_t* U8(std::span<std::byte> s, size_t at) { return reinterpret_cast<uint8_t*>(s.data()) + at; }
const uint8_t* U8(std::span<const std::byte> s, size_t at) {
  return reinterpret_cast<const uint8_t*>(s.data()) + at;
}
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// One's complement sum of big-endian 16-bit words, host-order numeric value, not folded.
uint32_t SumWords(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += Get16(p + i);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1]) << 8;
  return sum;
}

// The UDP pseudo-header's sum (RFC 768, RFC 8200 section 8.1), host-order value.
uint32_t PseudoHeaderSum(const IpAddress& src, const IpAddress& dst, uint32_t udp_length) {
  const size_t n = src.v6 ? 16 : 4;
  uint32_t sum = SumWords(src.bytes.data(), n) + SumWords(dst.bytes.data(), n);
  sum += kIpProtoUdp;
  sum += (udp_length >> 16) + (udp_length & 0xFFFF);
  return sum;
}

}  // namespace

absl::StatusOr<MacAddress> MacAddress::Parse(std::string_view text) {
  MacAddress mac;
  unsigned v[6];
  char tail;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6) {
    return absl::InvalidArgumentError("not a MAC address (aa:bb:cc:dd:ee:ff): " + s);
  }
  for (int i = 0; i < 6; ++i) mac.bytes[i] = static_cast<uint8_t>(v[i]);
  return mac;
}

std::string MacAddress::ToString() const {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2], bytes[3],
                         bytes[4], bytes[5]);
}

namespace {

// The sum of the native-order 16-bit halves of the 32-bit words at p (`words` of them): equal,
// modulo 0xFFFF, to the one's complement sum, and zero only when every word is. Each block's
// halves go into 32-bit lanes, which cannot overflow in 2^15 words, so the compiler vectorizes it
// without widening shuffles; with AVX-512 and AVX2 clones chosen at load time where the CPU has
// them (a jumbo payload's sum and copy were ~6.8 % of a sender's CPU; 8,900 bytes here: sum then
// copy 292 ns, copied and summed at once 147). `dst`: also copies the words there (the bytes are
// loaded once).
// Not under ThreadSanitizer or AddressSanitizer: the clones' ifunc resolver runs while the
// program is relocated, before the sanitizer's runtime is up, and its instrumented code crashes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MR_SUM_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define MR_SUM_CLONES
#endif

template <bool kCopy>
inline uint64_t SumHalves(uint8_t* __restrict dst, const uint8_t* __restrict src, size_t words) {
  uint64_t total = 0;
  while (words > 0) {
    const size_t block = std::min<size_t>(words, size_t{1} << 15);
    uint32_t lo = 0, hi = 0;
    for (size_t i = 0; i < block; ++i) {
      uint32_t w;
      std::memcpy(&w, src + 4 * i, 4);
      if constexpr (kCopy) std::memcpy(dst + 4 * i, &w, 4);
      lo += w & 0xFFFF;
      hi += w >> 16;
    }
    total += uint64_t{lo} + hi;
    src += 4 * block;
    if constexpr (kCopy) dst += 4 * block;
    words -= block;
  }
  return total;
}

// Below this many words a plain 64-bit sum, inlined, beats the clones' dispatch and set-up, and
// SumHalves' split lanes (the headers' sums: an IPv4 header, the UDP header and MetaRoCE's,
// every frame; 63 bytes: ~7 against ~9 ns).
constexpr size_t kVectorWords = 32;

uint64_t SumSmall(const uint8_t* p, size_t words) {
  uint64_t sum = 0;
  for (size_t i = 0; i < words; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    sum += w;
  }
  return sum;
}

MR_SUM_CLONES uint64_t SumNativeWords(const uint8_t* p, size_t words) {
  return SumHalves<false>(nullptr, p, words);
}

MR_SUM_CLONES uint64_t CopySumWords(uint8_t* dst, const uint8_t* src, size_t words) {
  return SumHalves<true>(dst, src, words);
}

// Adds the last n % 4 bytes at p (native order, as the words before them pair) to `sum`.
uint64_t AddTail(uint64_t sum, const uint8_t* p, size_t n) {
  if (n >= 2) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    sum += w;
    p += 2;
    n -= 2;
  }
  if (n == 1) {
    const uint8_t pair[2] = {p[0], 0};
    uint16_t w;
    std::memcpy(&w, pair, 2);
    sum += w;
  }
  return sum;
}

// Folds a native-order 64-bit sum to 16 bits and turns it to host order (RFC 1071 2(B): the one's
// complement sum is byte-order independent up to a final swap).
uint16_t FoldToHost(uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  const uint16_t native = static_cast<uint16_t>(sum);
  return std::endian::native == std::endian::little ? __builtin_bswap16(native) : native;
}

uint16_t AddFolded(uint32_t a, uint32_t b) {
  uint32_t total = a + b;
  while (total >> 16) total = (total & 0xFFFF) + (total >> 16);
  return static_cast<uint16_t>(total);
}

}  // namespace

uint16_t InternetChecksum(std::span<const std::byte> data, uint32_t initial) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const size_t words = data.size() / 4;
  const uint64_t sum = words < kVectorWords ? SumSmall(p, words) : SumNativeWords(p, words);
  const uint16_t host = FoldToHost(AddTail(sum, p + 4 * words, data.size() % 4));
  return static_cast<uint16_t>(~AddFolded(host, (initial & 0xFFFF) + (initial >> 16)));
}

uint16_t CopyAndSum(std::byte* dst, std::span<const std::byte> src) {
  const auto* p = reinterpret_cast<const uint8_t*>(src.data());
  auto* d = reinterpret_cast<uint8_t*>(dst);
  const size_t words = src.size() / 4;
  uint64_t sum;
  if (words < kVectorWords) {
    sum = SumSmall(p, words);
    std::memcpy(d, p, 4 * words);
  } else {
    sum = CopySumWords(d, p, words);
  }
  const size_t tail = src.size() % 4;
  if (tail > 0) std::memcpy(d + 4 * words, p + 4 * words, tail);
  return FoldToHost(AddTail(sum, p + 4 * words, tail));
}

uint16_t CombineSums(uint16_t a_sum, size_t a_len, uint16_t b_sum) {
  return AddFolded(a_sum, a_len % 2 == 0 ? b_sum : __builtin_bswap16(b_sum));
}

size_t FrameHeaderBytes(const FrameAddresses& a) {
  return kEthernetHeaderBytes + (a.vlan_tci ? kVlanTagBytes : 0) +
         (a.dst_ip.v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes) + kUdpHeaderBytes;
}

uint16_t InternetSum(std::span<const std::byte> data) {
  return static_cast<uint16_t>(~InternetChecksum(data, 0));
}

absl::StatusOr<size_t> BuildFrame(std::span<std::byte> out, const FrameAddresses& a,
                                  std::span<const std::byte> headers,
                                  std::span<const std::byte> payload) {
  // The payload is copied and summed in one pass where the frame will take it; the checks below
  // refuse what does not fit (and say why) exactly as before.
  const size_t at = FrameHeaderBytes(a) + headers.size();
  const bool copied = !payload.empty() && a.src_ip.v6 == a.dst_ip.v6 &&
                      at + payload.size() <= out.size();
  const uint16_t sum = copied ? CopyAndSum(out.data() + at, payload) : InternetSum(payload);
  absl::StatusOr<size_t> head = BuildFrameHead(out, a, headers, payload.size(), sum);
  if (!head.ok()) return head.status();
  if (*head + payload.size() > out.size()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "frame of %d bytes does not fit a %d-byte buffer (raise the frame size)",
        *head + payload.size(), out.size()));
  }
  if (!payload.empty() && !copied) std::memcpy(out.data() + *head, payload.data(), payload.size());
  return *head + payload.size();
}

absl::StatusOr<size_t> BuildFrameHead(std::span<std::byte> out, const FrameAddresses& a,
                                      std::span<const std::byte> headers, size_t payload_len,
                                      uint16_t payload_sum) {
  if (a.src_ip.v6 != a.dst_ip.v6) {
    return absl::InvalidArgumentError("frame source and destination IP families differ: " +
                                      a.src_ip.ToString() + " -> " + a.dst_ip.ToString());
  }
  const size_t header_bytes = FrameHeaderBytes(a);
  const size_t udp_payload = headers.size() + payload_len;
  const size_t udp_length = kUdpHeaderBytes + udp_payload;
  const size_t total = header_bytes + headers.size();
  if (udp_length > 0xFFFF - (a.dst_ip.v6 ? 0 : kIpv4HeaderBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("UDP datagram of %d bytes exceeds what IP carries", udp_length));
  }
  if (total > out.size()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "frame headers of %d bytes do not fit a %d-byte buffer (raise the frame size)", total,
        out.size()));
  }

  size_t at = 0;
  std::memcpy(U8(out, 0), a.dst_mac.bytes.data(), 6);
  std::memcpy(U8(out, 6), a.src_mac.bytes.data(), 6);
  at = 12;
  if (a.vlan_tci) {
    Put16(U8(out, at), kEtherTypeVlan);
    Put16(U8(out, at + 2), *a.vlan_tci);
    at += kVlanTagBytes;
  }
  const uint8_t tos = a.ect ? static_cast<uint8_t>(Ecn::kEct0) : 0;
  size_t ip_at;
  if (!a.dst_ip.v6) {
    Put16(U8(out, at), kEtherTypeIpv4);
    ip_at = at + 2;
    // Summed from the fields, not read back from the frame: the bytes just stored there are
    // behind the payload's copy in the store buffer (the payload goes in first), and a load of
    // them waited for that copy to reach the cache (InternetChecksum, nearly all of it on its
    // first load, was 1.5-1.9 % of the sender's CPU at MTU 9000; now ~0.2 %).
    const uint16_t total_length = static_cast<uint16_t>(kIpv4HeaderBytes + udp_length);
    const uint8_t* src = a.src_ip.bytes.data();
    const uint8_t* dst = a.dst_ip.bytes.data();
    uint32_t sum =
        (0x45u << 8 | tos) + total_length + 0x4000u + (uint32_t{a.ttl} << 8 | kIpProtoUdp);
    for (int i = 0; i < 4; i += 2) sum += (src[i] << 8 | src[i + 1]) + (dst[i] << 8 | dst[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    uint8_t* ip = U8(out, ip_at);
    ip[0] = 0x45;
    ip[1] = tos;
    Put16(ip + 2, total_length);
    Put16(ip + 4, 0);       // identification: DF datagrams are never fragmented (RFC 6864)
    Put16(ip + 6, 0x4000);  // DF
    ip[8] = a.ttl;
    ip[9] = kIpProtoUdp;
    Put16(ip + 10, static_cast<uint16_t>(~sum));
    std::memcpy(ip + 12, src, 4);
    std::memcpy(ip + 16, dst, 4);
    at = ip_at + kIpv4HeaderBytes;
  } else {
    Put16(U8(out, at), kEtherTypeIpv6);
    ip_at = at + 2;
    uint8_t* ip = U8(out, ip_at);
    ip[0] = static_cast<uint8_t>(0x60 | (tos >> 4));
    ip[1] = static_cast<uint8_t>((tos & 0x0F) << 4);
    ip[2] = 0;
    ip[3] = 0;
    Put16(ip + 4, static_cast<uint16_t>(udp_length));
    ip[6] = kIpProtoUdp;
    ip[7] = a.ttl;
    std::memcpy(ip + 8, a.src_ip.bytes.data(), 16);
    std::memcpy(ip + 24, a.dst_ip.bytes.data(), 16);
    at = ip_at + kIpv6HeaderBytes;
  }
  // The UDP header's words join the sum as values, likewise; the transport headers are summed
  // where the caller built them (before the payload's copy).
  // The payload's sum joins at its offset in the datagram: at an odd one its bytes pair the
  // other way round, which swaps the bytes of its one's complement sum (RFC 1071 2(B)). The
  // headers start at an even offset (after the 8-byte UDP header): their bytes pair as there.
  const uint32_t payload_part =
      headers.size() % 2 == 0 ? payload_sum : __builtin_bswap16(payload_sum);
  const uint32_t udp_words = uint32_t{a.src_port} + a.dst_port + static_cast<uint32_t>(udp_length);
  uint16_t csum = InternetChecksum(
      headers, PseudoHeaderSum(a.src_ip, a.dst_ip, udp_length) + payload_part + udp_words);
  if (csum == 0) csum = 0xFFFF;  // 0 means "no checksum" (RFC 768)
  uint8_t* udp = U8(out, at);
  Put16(udp, a.src_port);
  Put16(udp + 2, a.dst_port);
  Put16(udp + 4, static_cast<uint16_t>(udp_length));
  Put16(udp + 6, csum);
  if (!headers.empty()) std::memcpy(udp + kUdpHeaderBytes, headers.data(), headers.size());
  return total;
}

std::string_view FrameVerdictName(FrameVerdict v) {
  switch (v) {
    case FrameVerdict::kOk: return "ok";
    case FrameVerdict::kTruncated: return "truncated";
    case FrameVerdict::kNotIp: return "not_ip";
    case FrameVerdict::kBadIpHeader: return "bad_ip_header";
    case FrameVerdict::kBadIpChecksum: return "bad_ip_checksum";
    case FrameVerdict::kIpFragment: return "ip_fragment";
    case FrameVerdict::kNotUdp: return "not_udp";
    case FrameVerdict::kBadUdpLength: return "bad_udp_length";
    case FrameVerdict::kBadUdpChecksum: return "bad_udp_checksum";
    case FrameVerdict::kNotOurPort: return "not_our_port";
  }
  return "unknown";
}

FrameVerdict ParseFrame(std::span<const std::byte> frame, const FrameFilter& filter,
                        ParsedFrame* out) {
  const size_t n = frame.size();
  if (n < kEthernetHeaderBytes) return FrameVerdict::kTruncated;
  std::memcpy(out->dst_mac.bytes.data(), U8(frame, 0), 6);
  std::memcpy(out->src_mac.bytes.data(), U8(frame, 6), 6);
  size_t at = 12;
  uint16_t ether_type = Get16(U8(frame, at));
  out->vlan_tci.reset();
  if (ether_type == kEtherTypeVlan || ether_type == kEtherTypeQinQ) {
    if (n < at + 2 + kVlanTagBytes) return FrameVerdict::kTruncated;
    out->vlan_tci = Get16(U8(frame, at + 2));
    at += kVlanTagBytes;
    ether_type = Get16(U8(frame, at));
  }
  const size_t ip_at = at + 2;
  size_t udp_at;
  size_t ip_end;  // one past the IP datagram
  if (ether_type == kEtherTypeIpv4) {
    if (n < ip_at + kIpv4HeaderBytes) return FrameVerdict::kTruncated;
    const uint8_t* ip = U8(frame, ip_at);
    if ((ip[0] >> 4) != 4) return FrameVerdict::kBadIpHeader;
    const size_t ihl = static_cast<size_t>(ip[0] & 0x0F) * 4;
    if (ihl < kIpv4HeaderBytes) return FrameVerdict::kBadIpHeader;
    if (n < ip_at + ihl) return FrameVerdict::kTruncated;
    const size_t total_length = Get16(ip + 2);
    if (total_length < ihl) return FrameVerdict::kBadIpHeader;
    if (n < ip_at + total_length) return FrameVerdict::kTruncated;
    if (InternetChecksum(frame.subspan(ip_at, ihl)) != 0) return FrameVerdict::kBadIpChecksum;
    if ((Get16(ip + 6) & 0x3FFF) != 0) return FrameVerdict::kIpFragment;  // MF or offset
    if (ip[9] != kIpProtoUdp) return FrameVerdict::kNotUdp;
    out->ecn = static_cast<Ecn>(ip[1] & 0x03);
    out->ttl = ip[8];
    out->src_ip = IpAddress{};
    out->dst_ip = IpAddress{};
    std::memcpy(out->src_ip.bytes.data(), ip + 12, 4);
    std::memcpy(out->dst_ip.bytes.data(), ip + 16, 4);
    udp_at = ip_at + ihl;
    ip_end = ip_at + total_length;
  } else if (ether_type == kEtherTypeIpv6) {
    if (n < ip_at + kIpv6HeaderBytes) return FrameVerdict::kTruncated;
    const uint8_t* ip = U8(frame, ip_at);
    if ((ip[0] >> 4) != 6) return FrameVerdict::kBadIpHeader;
    const size_t payload_length = Get16(ip + 4);
    if (n < ip_at + kIpv6HeaderBytes + payload_length) return FrameVerdict::kTruncated;
    if (ip[6] == kIpv6NextFragment) return FrameVerdict::kIpFragment;
    if (ip[6] != kIpProtoUdp) return FrameVerdict::kNotUdp;
    const uint8_t traffic_class = static_cast<uint8_t>((ip[0] & 0x0F) << 4 | ip[1] >> 4);
    out->ecn = static_cast<Ecn>(traffic_class & 0x03);
    out->ttl = ip[7];
    out->src_ip.v6 = out->dst_ip.v6 = true;
    std::memcpy(out->src_ip.bytes.data(), ip + 8, 16);
    std::memcpy(out->dst_ip.bytes.data(), ip + 24, 16);
    udp_at = ip_at + kIpv6HeaderBytes;
    ip_end = udp_at + payload_length;
  } else {
    return FrameVerdict::kNotIp;
  }
  if (ip_end < udp_at + kUdpHeaderBytes) {
    return ip_end < udp_at ? FrameVerdict::kBadIpHeader : FrameVerdict::kTruncated;
  }
  const uint8_t* udp = U8(frame, udp_at);
  const size_t udp_length = Get16(udp + 4);
  if (udp_length < kUdpHeaderBytes || udp_at + udp_length > ip_end) {
    return FrameVerdict::kBadUdpLength;
  }
  out->src_port = Get16(udp);
  out->dst_port = Get16(udp + 2);
  if (filter.port != 0 && out->src_port != filter.port && out->dst_port != filter.port) {
    return FrameVerdict::kNotOurPort;
  }
  const uint16_t stored = Get16(udp + 6);
  if (out->src_ip.v6 && stored == 0) return FrameVerdict::kBadUdpChecksum;
  if (filter.verify_udp_checksum && stored != 0 &&
      InternetChecksum(frame.subspan(udp_at, udp_length),
                       PseudoHeaderSum(out->src_ip, out->dst_ip,
                                       static_cast<uint32_t>(udp_length))) != 0) {
    return FrameVerdict::kBadUdpChecksum;
  }
  out->payload = frame.subspan(udp_at + kUdpHeaderBytes, udp_length - kUdpHeaderBytes);
  return FrameVerdict::kOk;
}

}  // namespace metaroce::io
