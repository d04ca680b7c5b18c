// The provider's endpoint address: what fi_getname() gives and fi_av_insert() takes.
//
// An endpoint is reached through the set-up exchange (lib/api/exchange.h) at its listener, and
// its connection then spans every plane of its host: the address names the host's address on
// each plane (the first is where the exchange's TCP connection goes), the listener's TCP port and
// a nonce drawn when the endpoint opened (so that an endpoint reopened on the same port is another
// address, and a connection request names the endpoint it was meant for).
//
// Layout (kAddressBytes, fixed: libfabric's addr_format is FI_FORMAT_UNSPEC with this length):
//   0 magic "MRA" | 3 version u8 (1) | 4 plane_count u8 (1..kMaxAddressPlanes) | 5 reserved u8
//   6 tcp_port u16 big-endian | 8 nonce u32 big-endian
//   12 + 17 * i: plane i: family u8 (4|6), address 16 bytes (IPv4 in the first 4)
//   unused planes are zero.
// Decode() checks magic, version, count, families and a non-zero port, and names what it refuses.
//
// Text form (fi_av_straddr): metaroce://ADDR[,ADDR...]:PORT/NONCE (nonce in hex).
//
// Pure functions; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/io/ip_address.h"

namespace metaroce::ofi {

inline constexpr size_t kMaxAddressPlanes = 4;
inline constexpr size_t kAddressBytes = 12 + 17 * kMaxAddressPlanes;  // 80

struct EndpointAddress {
  std::vector<io::IpAddress> planes;  // the host's address on each plane, plane 0 first
  uint16_t tcp_port = 0;              // the endpoint's set-up listener (on planes[0])
  uint32_t nonce = 0;

  using Bytes = std::array<uint8_t, kAddressBytes>;
  // Precondition: 1 <= planes.size() <= kMaxAddressPlanes.
  Bytes Encode() const;
  static absl::StatusOr<EndpointAddress> Decode(std::span<const uint8_t> bytes);
  std::string ToString() const;
  friend bool operator==(const EndpointAddress&, const EndpointAddress&) = default;
};

}  // namespace metaroce::ofi
