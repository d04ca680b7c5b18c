#include "lib/io/ip_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace metaroce::io {

absl::StatusOr<IpAddress> IpAddress::Parse(std::string_view text) {
  const std::string s(text);
  IpAddress a;
  in_addr v4;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    std::memcpy(a.bytes.data(), &v4, 4);
    return a;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(a.bytes.data(), &v6, 16);
    a.v6 = true;
    return a;
  }
  return absl::InvalidArgumentError("not an IPv4 or IPv6 address: " + s);
}

IpAddress IpAddress::V4(uint32_t host_order) {
  IpAddress a;
  const uint32_t n = htonl(host_order);
  std::memcpy(a.bytes.data(), &n, 4);
  return a;
}

uint32_t IpAddress::v4_host() const {
  uint32_t n;
  std::memcpy(&n, bytes.data(), 4);
  return ntohl(n);
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

}  // namespace metaroce::io
