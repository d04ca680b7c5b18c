// VethNamespacePair: two fresh network namespaces joined by a veth pair, for privileged tests.
//
//   namespace 0: interface `ifname(0)` (default "mrt0"), 198.18.0.1/30, fd00::1/64
//   namespace 1: interface `ifname(1)` (default "mrt1"), 198.18.0.2/30, fd00::2/64
//
// The namespaces are anonymous: they exist only as file descriptors held by this object (never
// bind-mounted under /run/netns), so they and the veth pair vanish when the object is destroyed
// AND when the process dies in any way (assertion, crash, kill): no test can leave them behind.
// Commands (`ip`, `ethtool`) run inside a namespace through fork + setns + exec.
//
// Threading: Create() and the destructor on one thread; RunIn()/StartIn()/Exec() from any
// thread. Code run with RunIn/StartIn is in the namespace for its whole thread (setns is per
// thread), so sockets and netlink lookups it makes belong to that namespace.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace metaroce::io::testing {

class VethNamespacePair {
 public:
  struct Options {
    std::string ifname0 = "mrt0";
    std::string ifname1 = "mrt1";
    int queues = 1;  // numrxqueues = numtxqueues of both ends
    int mtu = 1500;
    bool ipv6 = true;               // add fd00::1/64 and fd00::2/64 (nodad)
    bool tx_checksum_offload = false;  // false: `ethtool -K IF tx off`, so kernel UDP senders
                                       // fill their checksums (AF_XDP receivers check them)
  };

  // Errors name what is missing (root, `ip`, namespaces). Tests turn them into a skip (77).
  static absl::StatusOr<std::unique_ptr<VethNamespacePair>> Create(Options options);
  static absl::StatusOr<std::unique_ptr<VethNamespacePair>> Create() { return Create(Options{}); }
  ~VethNamespacePair();
  VethNamespacePair(const VethNamespacePair&) = delete;
  VethNamespacePair& operator=(const VethNamespacePair&) = delete;

  const std::string& ifname(int side) const { return side == 0 ? options_.ifname0 : options_.ifname1; }
  static std::string ipv4(int side) { return side == 0 ? "198.18.0.1" : "198.18.0.2"; }
  static std::string ipv6(int side) { return side == 0 ? "fd00::1" : "fd00::2"; }

  // Runs `fn` on a new thread inside namespace `side` and waits for it.
  void RunIn(int side, const std::function<void()>& fn) const;
  // Starts `fn` on a new thread inside namespace `side`; the caller joins it.
  std::thread StartIn(int side, std::function<void()> fn) const;
  // Runs a command (argv, PATH lookup) inside namespace `side`, output discarded unless
  // `output` is given. Returns its exit status as an error when nonzero.
  absl::Status Exec(int side, const std::vector<std::string>& argv,
                    std::string* output = nullptr) const;
  // ICMP (v4 or v6) echo from namespace `side` to `address`: `count` requests, each answered
  // within `timeout_ms`, else an error. In-process (raw socket), so no iputils-ping is needed.
  absl::Status Ping(int side, const std::string& address, int count = 1,
                    int timeout_ms = 2000) const;

 private:
  explicit VethNamespacePair(Options options) : options_(std::move(options)) {}
  Options options_;
  int netns_fd_[2] = {-1, -1};
};

// Why privileged io tests cannot run here ("" when they can): not root, no `ip`, no namespaces.
std::string PrivilegedTestsUnavailableReason();

}  // namespace metaroce::io::testing
