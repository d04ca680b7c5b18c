// XdpSteering: the one owner of the MetaRoCE steering XDP program (bpf/xdp_steer.bpf.c) on one
// network interface. It loads the program with the configured UDP port, attaches it with libbpf
// (netlink, not libxdp: libxdp's dispatcher does not run on our kernels), fills the XSKMAP with
// the AF_XDP sockets the caller opened (XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD), reads the
// program's counters, and detaches on destruction.
//
// What the program does with each frame: bpf/include/metaroce_xdp_abi.h.
//
// Errors: every failure is an absl::Status whose message names the fix (another XDP program on
// the interface, missing privileges, MTU too large for non-frags XDP, unknown interface).
// libbpf's own diagnostics during Load() (e.g. the verifier log) are captured into the Status
// instead of being printed: this library does not log.
//
// Threading: not thread-safe; one owner thread. Load() temporarily replaces libbpf's global print
// callback, so do not call it concurrently with other libbpf users that rely on theirs.
// Requires CAP_BPF + CAP_NET_ADMIN (or root).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct xdp_steer;  // bpf/xdp_steer.skel.h (generated)

namespace metaroce::io {

enum class XdpMode : uint8_t {
  kAuto,     // native (driver) mode if the driver has it, otherwise generic (skb) mode
  kNative,   // XDP_FLAGS_DRV_MODE
  kGeneric,  // XDP_FLAGS_SKB_MODE
};
std::string_view XdpModeName(XdpMode mode);

// Sums over CPUs of the program's counters (struct mr_xdp_counters); packet counts since load.
struct XdpSteeringCounters {
  uint64_t redirected = 0;        // handed to the queue's AF_XDP socket
  uint64_t pass_no_socket = 0;    // ours, no socket on that queue, passed to the kernel
  uint64_t drop_no_socket = 0;    // ours, no socket on that queue, dropped
  uint64_t drop_truncated = 0;    // ours, shorter than the 24-byte base header
  uint64_t drop_bad_version = 0;  // ours, version byte != 1
  uint64_t pass_not_ip = 0;
  uint64_t pass_not_udp = 0;
  uint64_t pass_other_port = 0;
  uint64_t pass_fragment = 0;
  uint64_t pass_malformed = 0;    // too short to tell whether it is ours
  friend bool operator==(const XdpSteeringCounters&, const XdpSteeringCounters&) = default;
};

class XdpSteering {
 public:
  // What to do with our packets when no socket is registered for their receive queue.
  enum class NoSocket : uint8_t {
    kPass,  // to the kernel stack (a kernel UDP socket on the port may take them)
    kDrop,
  };

  struct Options {
    // The interface: ifname, or ifindex when ifname is empty.
    std::string ifname;
    int ifindex = 0;
    // UDP destination port steered to AF_XDP, host byte order (default: MetaRoCE's 4792).
    uint16_t port = 4792;
    // Load the SEC("xdp.frags") program: multi-buffer frames, needed above one page of MTU
    // (veth: MTU > 3506). Its sockets must be bound with XDP_USE_SG to receive such frames.
    bool frags = false;
    XdpMode mode = XdpMode::kAuto;
    NoSocket no_socket = NoSocket::kPass;
    // Size of the XSKMAP: receive queues 0..max_queues-1 can be steered.
    uint32_t max_queues = 256;
  };

  // Loads and attaches. Fails if the interface already has an XDP program (it is named in the
  // error, with the command that removes it); this class never replaces a program it did not
  // attach.
  static absl::StatusOr<std::unique_ptr<XdpSteering>> Load(const Options& options);

  // Detaches the program if it is still the one attached, then unloads it.
  ~XdpSteering();
  XdpSteering(const XdpSteering&) = delete;
  XdpSteering& operator=(const XdpSteering&) = delete;

  // Steers our packets arriving on receive queue `queue_id` to the AF_XDP socket `xsk_fd`, which
  // must be bound to this interface and that queue (the kernel drops redirects to a socket bound
  // elsewhere). Replaces an earlier registration of the queue. The map keeps its own reference:
  // the socket is removed from it when the last fd to the socket is closed.
  absl::Status RegisterSocket(uint32_t queue_id, int xsk_fd);
  // Our packets on that queue then get the NoSocket treatment. Idempotent: OK when none is
  // registered (the kernel cannot tell; an XSKMAP cannot be read from user space).
  absl::Status UnregisterSocket(uint32_t queue_id);

  absl::StatusOr<XdpSteeringCounters> Counters() const;

  int ifindex() const { return ifindex_; }
  const std::string& ifname() const { return ifname_; }
  // The mode the program is attached in (never kAuto).
  XdpMode attached_mode() const { return attached_mode_; }
  bool frags() const { return frags_; }
  // The attached program (e.g. for BPF_PROG_TEST_RUN or `bpftool prog show id`).
  int prog_fd() const { return prog_fd_; }
  uint32_t prog_id() const { return prog_id_; }
  int xsks_map_fd() const { return xsks_map_fd_; }

 private:
  XdpSteering() = default;

  xdp_steer* skel_ = nullptr;
  std::string ifname_;
  int ifindex_ = 0;
  XdpMode attached_mode_ = XdpMode::kNative;
  bool frags_ = false;
  bool attached_ = false;
  int prog_fd_ = -1;
  uint32_t prog_id_ = 0;
  int xsks_map_fd_ = -1;
  int counters_map_fd_ = -1;
  uint32_t max_queues_ = 0;
};

}  // namespace metaroce::io
