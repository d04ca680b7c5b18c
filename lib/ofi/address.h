// The provider's endpoint address: what fi_getname() gives and fi_av_insert() takes.
//
// An endpoint is reached through the set-up exchange (lib/api/exchange.h) at its listener, and
// its connection then spans every plane of its host: the address names the host's address on
// each plane (the first is where the exchange's TCP connection goes), the listener's TCP port and
// a nonce drawn when the endpoint opened (so that an endpoint reopened on the same port is another
// address, and a connection request names the endpoint it was meant for).
//
// Layout (kAddressBytes, fixed: libfabric's addr_format is FI_FORMAT_UNSPEC with this length,
// within FI_NAME_MAX, the 64 bytes Open MPI and others keep a name in):
//   0 magic "MRA" | 3 version u8 (1) | 4 plane_count u8 | 5 family u8 (4|6, every plane's)
//   6 tcp_port u16 big-endian | 8 nonce u32 big-endian
//   12 the planes' addresses, 4 bytes each (IPv4: up to 4 planes) or 16 (IPv6: up to 3);
//   the rest zero.
// Decode() checks the length, magic, version, count, family and a non-zero port, and names what
// it refuses; it reads only the bytes of the span it is given (an application's address may be
// short or malformed: refused, never read past).
// Nonce 0 is never an open endpoint's (Endpoint::Enable draws a non-zero one): it names "the
// endpoint that listens at planes[0]:tcp_port, whichever it is", the address fi_getinfo makes of
// an application's node and service (docs/ofi.md, "Addressing"). A connection to it takes the
// endpoint that answers; the acceptor takes a request naming nonce 0.
// DecodeSource() reads a source address (fi_info's src_addr, FI_SOURCE): the same, except that
// tcp_port 0 (any port: the listener takes one) is allowed.
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

inline constexpr size_t kMaxAddressPlanes = 4;      // IPv4; 3 with IPv6
inline constexpr size_t kMaxAddressPlanesV6 = 3;
inline constexpr size_t kAddressBytes = 12 + 16 * kMaxAddressPlanesV6;  // 60

struct EndpointAddress {
  std::vector<io::IpAddress> planes;  // the host's address on each plane, plane 0 first
  uint16_t tcp_port = 0;              // the endpoint's set-up listener (on planes[0])
  uint32_t nonce = 0;

  using Bytes = std::array<uint8_t, kAddressBytes>;
  // Precondition: 1 <= planes.size() <= kMaxAddressPlanes (kMaxAddressPlanesV6 for IPv6), all
  // of one family (Endpoint::Enable keeps the first planes that fit).
  Bytes Encode() const;
  static absl::StatusOr<EndpointAddress> Decode(std::span<const uint8_t> bytes);
  static absl::StatusOr<EndpointAddress> DecodeSource(std::span<const uint8_t> bytes);
  std::string ToString() const;
  friend bool operator==(const EndpointAddress&, const EndpointAddress&) = default;
};

}  // namespace metaroce::ofi
