// An IPv4 or IPv6 address, stored as 16 bytes in network order (IPv4 in the low 4 bytes).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace metaroce::io {

struct IpAddress {
  std::array<uint8_t, 16> bytes = {};
  bool v6 = false;

  static absl::StatusOr<IpAddress> Parse(std::string_view text);
  static IpAddress V4(uint32_t host_order);
  // IPv4: the address in host order. Precondition: !v6.
  uint32_t v4_host() const;
  std::string ToString() const;
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

}  // namespace metaroce::io
