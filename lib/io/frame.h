// Ethernet (+ one optional 802.1Q tag) / IPv4 or IPv6 / UDP framing for ports that build their
// own frames (AF_XDP). Pure functions: no allocation, no system calls, safe from any thread.
//
// Wire choices (what BuildFrame writes):
//   - IPv4: IHL 5 (no options), DF set, identification 0, TTL/hop limit from FrameAddresses,
//     header checksum computed; UDP checksum computed (RFC 768 allows 0, but receivers may check
//     and a software stack has no offload to lean on).
//   - IPv6: no extension headers, flow label 0, UDP checksum computed (mandatory, RFC 8200 8.1).
//   - ECN: ECT(0) (binary 10) when requested, else Not-ECT; DSCP 0.
// ParseFrame is the mirror: it validates every length before reading and says why it refuses.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "lib/io/ip_address.h"

namespace metaroce::io {

struct MacAddress {
  std::array<uint8_t, 6> bytes = {};

  // "aa:bb:cc:dd:ee:ff" (case-insensitive).
  static absl::StatusOr<MacAddress> Parse(std::string_view text);
  std::string ToString() const;
  bool is_zero() const { return bytes == std::array<uint8_t, 6>{}; }
  friend bool operator==(const MacAddress&, const MacAddress&) = default;
};

inline constexpr size_t kEthernetHeaderBytes = 14;
inline constexpr size_t kVlanTagBytes = 4;
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kIpv6HeaderBytes = 40;
inline constexpr size_t kUdpHeaderBytes = 8;

// The IP ECN field (RFC 3168 section 5).
enum class Ecn : uint8_t { kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3 };

// Everything below the UDP payload that a frame carries. src_ip and dst_ip must be the same family.
struct FrameAddresses {
  MacAddress src_mac;
  MacAddress dst_mac;              // next hop's MAC (the peer's, or the gateway's)
  std::optional<uint16_t> vlan_tci;  // 802.1Q tag control (PCP, DEI, VID), host order; none: untagged
  IpAddress src_ip;
  IpAddress dst_ip;
  uint16_t src_port = 0;  // host order
  uint16_t dst_port = 0;  // host order
  bool ect = true;        // mark ECT(0)
  uint8_t ttl = 64;       // IPv4 TTL / IPv6 hop limit
};

// Bytes of headers a frame for `addresses` needs in front of its UDP payload.
size_t FrameHeaderBytes(const FrameAddresses& addresses);

// Writes one frame into `out`: headers, then `headers` and `payload` gathered as the UDP payload.
// Returns the frame length in bytes. Errors: InvalidArgument when the address families differ;
// ResourceExhausted when `out` is too small or the datagram exceeds 65535 bytes. Nothing is
// promised about `out`'s contents on error.
absl::StatusOr<size_t> BuildFrame(std::span<std::byte> out, const FrameAddresses& addresses,
                                  std::span<const std::byte> headers,
                                  std::span<const std::byte> payload);

// BuildFrame without the payload: the headers and `headers` into `out` (FrameHeaderBytes +
// headers.size() bytes), lengths and checksums for a datagram whose payload of `payload_len`
// bytes, with InternetSum `payload_sum`, the caller puts after them (in this buffer or in the
// next ones of a multi-buffer frame). Returns the bytes written. Errors as BuildFrame's.
absl::StatusOr<size_t> BuildFrameHead(std::span<std::byte> out, const FrameAddresses& addresses,
                                      std::span<const std::byte> headers, size_t payload_len,
                                      uint16_t payload_sum);

// The one's complement sum of `data` (RFC 1071), folded, not complemented, host order: what
// BuildFrameHead takes for a payload.
uint16_t InternetSum(std::span<const std::byte> data);
// Copies `src` to `dst` (src.size() bytes; the two must not overlap) and returns
// InternetSum(src), in one pass over the bytes: the payload's way into a frame.
uint16_t CopyAndSum(std::byte* dst, std::span<const std::byte> src);
// InternetSum of the concatenation a || b, from the sums of its parts and a's length (a part at
// an odd offset pairs its bytes the other way round: RFC 1071 2(B)).
uint16_t CombineSums(uint16_t a_sum, size_t a_len, uint16_t b_sum);

// Why a frame was not accepted. Every value but kOk means "drop it (or give it to the kernel)".
enum class FrameVerdict : uint8_t {
  kOk,
  kTruncated,          // shorter than the headers it announces
  kNotIp,              // EtherType is neither IPv4 nor IPv6 (ARP, LLDP, a second VLAN tag...)
  kBadIpHeader,        // wrong version nibble, IHL < 5, total/payload length inconsistent
  kBadIpChecksum,      // IPv4 header checksum does not verify
  kIpFragment,         // IPv4 MF/offset or an IPv6 Fragment header: MetaRoCE never fragments
  kNotUdp,             // another transport protocol (or an IPv6 extension header)
  kBadUdpLength,       // UDP length < 8 or beyond the IP payload
  kBadUdpChecksum,     // checksum present and wrong, or zero over IPv6
  kNotOurPort,         // UDP, but neither port is the one the filter asks for
};
std::string_view FrameVerdictName(FrameVerdict verdict);

struct ParsedFrame {
  std::span<const std::byte> payload;  // the UDP payload, inside the parsed frame
  MacAddress src_mac;
  MacAddress dst_mac;
  std::optional<uint16_t> vlan_tci;
  IpAddress src_ip;
  IpAddress dst_ip;
  uint16_t src_port = 0;  // host order
  uint16_t dst_port = 0;  // host order
  Ecn ecn = Ecn::kNotEct;
  uint8_t ttl = 0;

  bool ce() const { return ecn == Ecn::kCe; }
};

struct FrameFilter {
  // Accept only datagrams whose source or destination port is this one (host order): data comes
  // to MetaRoCE's port, ACKs come from it (to the path's source port). 0 accepts every UDP port.
  uint16_t port = 0;
  // Verify the UDP checksum (a zero checksum over IPv4 means "none" and passes). Off by default
  // for frames of kernel senders on veth, which leave the checksum to an offload that never runs
  // (`ethtool -K DEV tx off` on such senders).
  bool verify_udp_checksum = false;
};

// Parses one frame. On kOk fills `*out` (payload points into `frame`); otherwise `*out` is
// unspecified. Trailing bytes after the IP datagram (Ethernet padding) are ignored.
FrameVerdict ParseFrame(std::span<const std::byte> frame, const FrameFilter& filter,
                        ParsedFrame* out);

// The Internet checksum (RFC 1071) of `data` added to `initial` (a partial one's complement sum,
// host order), folded and complemented: the value to store in a checksum field, host order.
uint16_t InternetChecksum(std::span<const std::byte> data, uint32_t initial = 0);

}  // namespace metaroce::io
