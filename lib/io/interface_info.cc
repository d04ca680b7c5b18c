#include "lib/io/interface_info.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace metaroce::io {
namespace {

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

uint8_t PrefixLength(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const auto* bytes = mask->sa_family == AF_INET6
                          ? reinterpret_cast<const uint8_t*>(
                                &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr)
                          : reinterpret_cast<const uint8_t*>(
                                &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
  const int n = mask->sa_family == AF_INET6 ? 16 : 4;
  int bits = 0;
  for (int i = 0; i < n; ++i) bits += std::popcount(static_cast<unsigned>(bytes[i]));
  return static_cast<uint8_t>(bits);
}

// /sys/class/net shows the namespace that mounted sysfs, which may not be the calling thread's:
// only a fallback for drivers without ethtool channels.
void CountQueuesFromSysfs(std::string_view name, InterfaceInfo* info) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path("/sys/class/net") / name / "queues";
  uint32_t rx = 0, tx = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string leaf = entry.path().filename().string();
    if (absl::StartsWith(leaf, "rx-")) ++rx;
    if (absl::StartsWith(leaf, "tx-")) ++tx;
  }
  if (rx > 0) info->rx_queue_count = rx;
  if (tx > 0) info->tx_queue_count = tx;
}

}  // namespace

absl::StatusOr<InterfaceInfo> ReadInterfaceInfo(std::string_view name) {
  InterfaceInfo info;
  info.name = std::string(name);
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return absl::InvalidArgumentError(absl::StrCat("bad interface name '", info.name, "'"));
  }
  info.index = if_nametoindex(info.name.c_str());
  if (info.index == 0) {
    return absl::NotFoundError(absl::StrCat("no interface '", info.name,
                                            "' in this network namespace (check `ip link`, and "
                                            "run in the namespace that holds it)"));
  }
  ScopedFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::ErrnoToStatus(errno, "socket(AF_INET, SOCK_DGRAM)");

  ifreq req{};
  std::memcpy(req.ifr_name, info.name.data(), info.name.size());
  if (ioctl(fd.get(), SIOCGIFHWADDR, &req) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("SIOCGIFHWADDR ", info.name));
  }
  std::memcpy(info.mac.bytes.data(), req.ifr_hwaddr.sa_data, 6);
  if (ioctl(fd.get(), SIOCGIFMTU, &req) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("SIOCGIFMTU ", info.name));
  }
  info.mtu = static_cast<uint32_t>(req.ifr_mtu);

  ethtool_channels channels{};
  channels.cmd = ETHTOOL_GCHANNELS;
  req.ifr_data = reinterpret_cast<char*>(&channels);
  if (ioctl(fd.get(), SIOCETHTOOL, &req) == 0 &&
      channels.rx_count + channels.combined_count > 0) {
    info.rx_queue_count = channels.rx_count + channels.combined_count;
    info.tx_queue_count = std::max(1u, channels.tx_count + channels.combined_count);
  } else {
    CountQueuesFromSysfs(name, &info);
  }

  ifaddrs* list = nullptr;
  if (getifaddrs(&list) < 0) return absl::ErrnoToStatus(errno, "getifaddrs");
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || info.name != it->ifa_name) continue;
    InterfaceAddress a;
    if (it->ifa_addr->sa_family == AF_INET) {
      std::memcpy(a.address.bytes.data(),
                  &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr, 4);
      a.prefix_length = PrefixLength(it->ifa_netmask);
      info.ipv4.push_back(a);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      a.address.v6 = true;
      std::memcpy(a.address.bytes.data(),
                  &reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr, 16);
      a.prefix_length = PrefixLength(it->ifa_netmask);
      info.ipv6.push_back(a);
    }
  }
  freeifaddrs(list);
  return info;
}

}  // namespace metaroce::io
