#include "tests/io/netns_fixture.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metaroce::io::testing {
namespace {

// A new anonymous network namespace, held by the returned fd. unshare() runs on a throwaway
// thread so that the caller's thread stays where it is.
absl::StatusOr<int> NewNetworkNamespace() {
  int fd = -1;
  int error = 0;
  std::thread([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      error = errno;
      return;
    }
    fd = open("/proc/thread-self/ns/net", O_RDONLY);  // no O_CLOEXEC: children name it by path
    if (fd < 0) error = errno;
  }).join();
  if (fd < 0) {
    return absl::ErrnoToStatus(error, "new network namespace (needs CAP_SYS_ADMIN)");
  }
  return fd;
}

}  // namespace

std::string PrivilegedTestsUnavailableReason() {
  if (geteuid() != 0) return "not root";
  if (access("/usr/sbin/ip", X_OK) != 0 && access("/sbin/ip", X_OK) != 0 &&
      access("/usr/bin/ip", X_OK) != 0) {
    return "iproute2 `ip` not found (apt-get install iproute2)";
  }
  absl::StatusOr<int> fd = NewNetworkNamespace();
  if (!fd.ok()) return std::string(fd.status().message());
  close(*fd);
  return "";
}

absl::Status VethNamespacePair::Exec(int side, const std::vector<std::string>& argv,
                                     std::string* output) const {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2");
  const pid_t child = fork();
  if (child < 0) return absl::ErrnoToStatus(errno, "fork");
  if (child == 0) {
    // Only async-signal-safe calls until exec.
    if (setns(netns_fd_[side], CLONE_NEWNET) != 0) _exit(126);
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, n);
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (output != nullptr) *output = text;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "), "` in namespace ", side,
                                          " failed (status ", status, "): ", text));
}

absl::StatusOr<std::unique_ptr<VethNamespacePair>> VethNamespacePair::Create(Options options) {
  std::unique_ptr<VethNamespacePair> pair(new VethNamespacePair(std::move(options)));
  for (int side = 0; side < 2; ++side) {
    absl::StatusOr<int> fd = NewNetworkNamespace();
    if (!fd.ok()) return fd.status();
    pair->netns_fd_[side] = *fd;
  }
  // No duplicate address detection: addresses (link-local ones too) usable at once, so that the
  // first neighbour discovery is answered instead of waiting out a retransmission.
  for (int side = 0; side < 2; ++side) {
    pair->RunIn(side, [] {
      for (const char* path : {"/proc/sys/net/ipv6/conf/all/accept_dad",
                               "/proc/sys/net/ipv6/conf/default/accept_dad"}) {
        if (FILE* f = std::fopen(path, "w")) {
          std::fputs("0", f);
          std::fclose(f);
        }
      }
    });
  }
  const Options& o = pair->options_;
  const std::string queues = std::to_string(o.queues);
  // Created in namespace 0; the peer goes straight into namespace 1 (iproute2 accepts a path to
  // a namespace file; the forked child inherits our fd).
  const std::string peer_ns = absl::StrCat("/proc/self/fd/", pair->netns_fd_[1]);
  absl::Status s = pair->Exec(
      0, {"ip", "link", "add", o.ifname0, "numtxqueues", queues, "numrxqueues", queues, "type",
          "veth", "peer", "name", o.ifname1, "numtxqueues", queues, "numrxqueues", queues,
          "netns", peer_ns});
  if (!s.ok()) return s;
  for (int side = 0; side < 2; ++side) {
    const std::string& dev = pair->ifname(side);
    std::vector<std::vector<std::string>> commands = {
        {"ip", "link", "set", "lo", "up"},
        {"ip", "link", "set", dev, "mtu", std::to_string(o.mtu)},
        {"ip", "addr", "add", ipv4(side) + "/30", "dev", dev},
    };
    if (o.ipv6) {
      commands.push_back({"ip", "addr", "add", ipv6(side) + "/64", "dev", dev, "nodad"});
    }
    commands.push_back({"ip", "link", "set", dev, "up"});
    for (const auto& command : commands) {
      if (absl::Status st = pair->Exec(side, command); !st.ok()) return st;
    }
    if (!o.tx_checksum_offload) {
      if (absl::Status st = pair->Exec(side, {"ethtool", "-K", dev, "tx", "off"}); !st.ok()) {
        return st;
      }
    }
  }
  // Carrier comes up asynchronously (linkwatch, up to ~1 s): wait for it on both ends, or the
  // first ARP/ND requests go nowhere and the first packets of a test are lost.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int side = 0; side < 2; ++side) {
    bool running = false;
    while (!running && std::chrono::steady_clock::now() < deadline) {
      pair->RunIn(side, [&] {
        const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ifreq req{};
        std::snprintf(req.ifr_name, sizeof req.ifr_name, "%s", pair->ifname(side).c_str());
        running = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_RUNNING);
        if (fd >= 0) close(fd);
      });
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!running) {
      return absl::DeadlineExceededError(
          absl::StrCat(pair->ifname(side), " has no carrier 5 s after `ip link set up`"));
    }
  }
  return pair;
}

VethNamespacePair::~VethNamespacePair() {
  // Closing the last references destroys the namespaces, and with them the veth pair.
  for (int& fd : netns_fd_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void VethNamespacePair::RunIn(int side, const std::function<void()>& fn) const {
  StartIn(side, fn).join();
}

std::thread VethNamespacePair::StartIn(int side, std::function<void()> fn) const {
  const int fd = netns_fd_[side];
  return std::thread([fd, fn = std::move(fn)] {
    if (setns(fd, CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "setns failed: %s\n", std::strerror(errno));
      std::abort();
    }
    fn();
  });
}

absl::Status VethNamespacePair::Ping(int side, const std::string& address, int count,
                                     int timeout_ms) const {
  absl::Status result = absl::OkStatus();
  RunIn(side, [&] {
    const bool v6 = address.find(':') != std::string::npos;
    sockaddr_storage to{};
    socklen_t to_length;
    if (v6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&to);
      s6->sin6_family = AF_INET6;
      to_length = sizeof *s6;
      if (inet_pton(AF_INET6, address.c_str(), &s6->sin6_addr) != 1) {
        result = absl::InvalidArgumentError("bad address " + address);
        return;
      }
    } else {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&to);
      s4->sin_family = AF_INET;
      to_length = sizeof *s4;
      if (inet_pton(AF_INET, address.c_str(), &s4->sin_addr) != 1) {
        result = absl::InvalidArgumentError("bad address " + address);
        return;
      }
    }
    // Raw ICMP: the kernel fills ICMPv6 checksums itself; ICMPv4's is ours to compute.
    const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_RAW | SOCK_CLOEXEC,
                          v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP});
    if (fd < 0) {
      result = absl::ErrnoToStatus(errno, "raw ICMP socket");
      return;
    }
    const uint16_t id = static_cast<uint16_t>(getpid() ^ 0x4d52);
    for (int seq = 1; seq <= count && result.ok(); ++seq) {
      uint8_t packet[64] = {};
      packet[0] = v6 ? ICMP6_ECHO_REQUEST : ICMP_ECHO;
      packet[4] = static_cast<uint8_t>(id >> 8);
      packet[5] = static_cast<uint8_t>(id);
      packet[6] = static_cast<uint8_t>(seq >> 8);
      packet[7] = static_cast<uint8_t>(seq);
      if (!v6) {
        uint32_t sum = 0;
        for (size_t i = 0; i < sizeof packet; i += 2) sum += packet[i] << 8 | packet[i + 1];
        while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
        packet[2] = static_cast<uint8_t>(~sum >> 8);
        packet[3] = static_cast<uint8_t>(~sum);
      }
      if (sendto(fd, packet, sizeof packet, 0, reinterpret_cast<sockaddr*>(&to), to_length) < 0) {
        result = absl::ErrnoToStatus(errno, "ICMP echo to " + address);
        break;
      }
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      bool answered = false;
      while (!answered) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        pollfd p{fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) break;
        uint8_t reply[1500];
        const ssize_t n = recv(fd, reply, sizeof reply, 0);
        if (n <= 0) continue;
        // IPv4 raw sockets deliver the IP header too; IPv6 ones only the ICMPv6 message.
        const size_t at = v6 ? 0 : static_cast<size_t>(reply[0] & 0x0F) * 4;
        if (static_cast<size_t>(n) < at + 8) continue;
        const uint8_t want_type = v6 ? ICMP6_ECHO_REPLY : ICMP_ECHOREPLY;
        answered = reply[at] == want_type && (reply[at + 4] << 8 | reply[at + 5]) == id &&
                   (reply[at + 6] << 8 | reply[at + 7]) == seq;
      }
      if (!answered) {
        result = absl::DeadlineExceededError(absl::StrCat(
            "no ICMP echo reply from ", address, " in namespace ", side, " within ", timeout_ms,
            " ms (request ", seq, ")"));
      }
    }
    close(fd);
  });
  return result;
}

}  // namespace metaroce::io::testing
