// What a port needs to know about a network interface: index, MAC, MTU, addresses, queues.
//
// Read from the kernel of the calling thread's network namespace (ioctl on a datagram socket for
// MAC/MTU and ethtool channels, getifaddrs (rtnetlink) for addresses). Stateless and thread-safe;
// every call asks the kernel again (interfaces change; callers cache what they keep).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/io/frame.h"
#include "lib/io/ip_address.h"

namespace metaroce::io {

struct InterfaceAddress {
  IpAddress address;
  uint8_t prefix_length = 0;
};

struct InterfaceInfo {
  std::string name;
  uint32_t index = 0;
  MacAddress mac;
  uint32_t mtu = 0;  // bytes of IP datagram (the L3 MTU, as `ip link` shows it)
  std::vector<InterfaceAddress> ipv4;
  std::vector<InterfaceAddress> ipv6;  // global and link-local, in kernel order
  // Receive queues an AF_XDP socket can bind to (ethtool channels: rx + combined; else the
  // rx-N entries of /sys/class/net/NAME/queues; else 1).
  uint32_t rx_queue_count = 1;
  uint32_t tx_queue_count = 1;
};

// Errors: NotFound when no interface has that name in this namespace (the message says to check
// `ip link` in the right namespace); errno-mapped statuses for kernel failures.
absl::StatusOr<InterfaceInfo> ReadInterfaceInfo(std::string_view name);

}  // namespace metaroce::io
