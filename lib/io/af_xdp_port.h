// AfXdpPort: a PacketPort on one AF_XDP socket (one receive/transmit queue of one interface),
// through libxdp's xsk API (<xdp/xsk.h>).
//
// The port builds its own Ethernet/IP/UDP frames (lib/io/frame.h) and parses received ones. It
// does NOT load an XDP program: sockets are opened with XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD and
// the caller registers xsk_fd() in the steering program's XSKMAP (XdpSteering::RegisterSocket),
// because libxdp's dispatcher does not run on our kernels.
//
// UMEM: frame_count frames of frame_size bytes in one anonymous mapping (huge pages when asked
// and available). Half the frames cycle through the fill and RX rings (a received frame is lent
// to the caller until Release()); the other half through the TX and completion rings.
//
// Multi-buffer (Options::multi_buffer): frames larger than a UMEM frame (jumbo MTUs) span
// several frames, bound with XDP_USE_SG (kernel >= 6.6) and chained with XDP_PKT_CONTD on both
// rings. A received chain is copied once into a contiguous buffer of the port's (the engine
// parses and places from one span); a frame to send gets its headers in its first UMEM frame and
// its payload copied straight after them, across as many frames as it needs. The interface's XDP program must be the frags one
// (XdpSteering::Options::frags). Single-frame packets go as without it, copy-free on receive.
//
// Modes: zero-copy needs driver support (veth has none: EOPNOTSUPP); kAuto tries it and falls
// back to copy mode. zero_copy() says which one is in use (to code: tools report it from there);
// description() says it to people, with the driver's refusal. In copy mode the kernel
// transmits only inside sendto(), at most Options::tx_budget descriptors a call (32 where the
// kernel refuses to raise it), and answers EAGAIN when more remain: Flush() kicks until the TX
// ring is drained or the kernel stops making progress.
//
// Threading: one owner thread for every method (the PacketPort contract). Open() must run in the
// network namespace that holds the interface (the calling thread's).
// Privileges: CAP_NET_RAW (socket), CAP_IPC_LOCK or enough RLIMIT_MEMLOCK (UMEM pinning);
// RaiseMemlockLimit() raises the limit as far as the process may.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/io/frame.h"
#include "lib/io/ip_address.h"
#include "lib/io/packet_port.h"

struct xsk_umem;
struct xsk_socket;
struct xdp_desc;

namespace metaroce::io {

class AfXdpPort final : public PacketPort {
 public:
  enum class ZeroCopy : uint8_t {
    kAuto,  // try XDP_ZEROCOPY, fall back to XDP_COPY when the driver refuses
    kOn,    // XDP_ZEROCOPY or fail
    kOff,   // XDP_COPY
  };

  // Maps a destination IP to the MAC of its next hop. Default: a NeighborTable (rtnetlink,
  // cached) restricted to the port's interface. Called on the owner thread, for a run of
  // packets to one destination once per kResolveEvery of them (the port remembers the answer).
  using NextHopResolver = std::function<absl::StatusOr<MacAddress>(const IpAddress&)>;

  struct Options {
    std::string ifname;
    uint32_t queue_id = 0;
    uint32_t frame_size = 2048;   // bytes per UMEM frame: 2048 or 4096 (a power of two)
    // XDP_USE_SG: frames up to max_frame_bytes (Ethernet header to the end) span UMEM frames.
    bool multi_buffer = false;
    uint32_t max_frame_bytes = 0;  // multi_buffer: the largest frame sent or received (<= 65535)
    uint32_t frame_count = 4096;  // UMEM frames, half for receive and half for transmit
    uint32_t ring_size = 2048;    // RX and TX descriptor rings (power of two)
    uint32_t batch_size = 64;     // most descriptors handled per Receive() call
    // Copy mode transmits only inside sendto(), at most this many TX descriptors a call
    // (XDP_MAX_TX_SKB_BUDGET, Linux 6.17+; the kernel's default and older kernels' fixed
    // figure is 32). 0: the TX ring's size, so one sendto() sends all that is queued. A kernel
    // that refuses it keeps 32, and description() says why.
    uint32_t tx_budget = 0;
    bool need_wakeup = true;      // XDP_USE_NEED_WAKEUP: kick the kernel only when it asks
    // SO_PREFER_BUSY_POLL + SO_BUSY_POLL(busy_poll_usecs) + SO_BUSY_POLL_BUDGET(batch_size).
    // When the kernel refuses, the port still opens and description() says so.
    bool busy_poll = false;
    uint32_t busy_poll_usecs = 20;
    ZeroCopy zero_copy = ZeroCopy::kAuto;
    bool huge_pages = false;  // MAP_HUGETLB for the UMEM; falls back to normal pages
    // Local addressing. Zero MAC: the interface's. Unset IP: the interface's first IPv4 address
    // (or first IPv6 address when it has no IPv4).
    MacAddress local_mac;
    std::optional<IpAddress> local_ip;
    std::optional<uint16_t> vlan_tci;  // tag every frame (host order TCI)
    uint8_t ttl = 64;
    // Received frames are ours when UDP from or to this port (host order); 0 accepts all UDP.
    uint16_t udp_port = 4792;
    bool verify_udp_checksum = false;  // see FrameFilter
    NextHopResolver resolve_next_hop;  // empty: NeighborTable on this interface
    // How long Open() retries a bind that fails with EBUSY (a socket on this queue closed less
    // than ~50 ms ago, or another one still bound).
    std::chrono::milliseconds busy_retry_budget{1000};
  };

  // Creates the UMEM and the socket and fills the fill ring. Errors name their fix: memlock
  // (RaiseMemlockLimit / CAP_IPC_LOCK), busy queue, zero-copy unsupported, missing interface or
  // queue, bad options.
  static absl::StatusOr<std::unique_ptr<AfXdpPort>> Open(Options options);

  // Raises RLIMIT_MEMLOCK's soft limit to the hard limit, or both to infinity when privileged.
  // Returns the resulting soft limit in bytes (RLIM_INFINITY as UINT64_MAX).
  static absl::StatusOr<uint64_t> RaiseMemlockLimit();

  ~AfXdpPort() override;
  AfXdpPort(const AfXdpPort&) = delete;
  AfXdpPort& operator=(const AfXdpPort&) = delete;

  bool Send(const TxPacket& packet) override;
  void Flush() override;
  size_t Receive(std::span<RxPacket> out) override;
  void Release(std::span<const RxPacket> packets) override;
  // The XSK itself: readable when the RX ring has descriptors.
  int wait_fd() const override { return xsk_fd_; }
  PortStats stats() const override;
  std::string description() const override;
  PortFeatures features() const override;

  // The socket to register in the steering program's XSKMAP under queue_id().
  int xsk_fd() const { return xsk_fd_; }
  uint32_t queue_id() const { return options_.queue_id; }
  uint32_t ifindex() const { return ifindex_; }
  bool zero_copy() const { return zero_copy_; }  // bound with XDP_ZEROCOPY (else XDP_COPY)
  bool multi_buffer() const { return options_.multi_buffer; }  // bound with XDP_USE_SG
  const IpAddress& local_ip() const { return local_ip_; }
  const MacAddress& local_mac() const { return local_mac_; }

 private:
  explicit AfXdpPort(Options options);
  absl::Status Init();
  absl::Status MapUmem();
  absl::Status CreateSocket();
  void ReclaimCompletions();
  void RefillFillRing();
  void KickTx();
  void KickFillRing();
  void SetTxBudget();  // copy mode: Options::tx_budget, or the kernel keeps its 32
  // The xsk_ring_drops probe (docs/tracing.md): while a tracer is attached, every 256th
  // Receive() reads XDP_STATISTICS and fires the probe with what grew since the last reading.
  void ProbeRingDrops();
  bool probe_baseline_ = false;  // the counters below are a reading of this tracing session
  uint32_t probe_polls_ = 0;
  uint64_t probe_last_[5] = {};  // rx_dropped, rx_ring_full, fill_ring_empty, rx/tx_invalid

  // The next hop of the last destination sent to, asked of resolver_ again after kResolveEvery
  // packets: a bandwidth run sends ~200,000 packets a second to one peer, and each lookup (a
  // std::function, a clock read, a hash probe) was ~1 % of the sender's CPU at MTU 9000.
  static constexpr uint32_t kResolveEvery = 256;
  absl::StatusOr<MacAddress> NextHop(const IpAddress& destination);
  IpAddress last_destination_;
  MacAddress last_next_hop_;
  uint32_t last_next_hop_uses_ = 0;  // left before asking again; 0: none remembered

  Options options_;
  NextHopResolver resolver_;
  uint32_t ifindex_ = 0;
  MacAddress local_mac_;
  IpAddress local_ip_;

  void* umem_area_ = nullptr;
  size_t umem_bytes_ = 0;
  bool umem_huge_pages_ = false;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  int xsk_fd_ = -1;
  bool zero_copy_ = false;
  std::string zero_copy_refusal_;  // why kAuto fell back to copy mode
  static constexpr uint32_t kKernelTxBudget = 32;  // the kernel's TX_BATCH_SIZE
  std::string busy_poll_state_;  // "" (off), "busy_poll", or "busy_poll unsupported (...)"
  bool busy_poll_ = false;       // the kernel took all three busy-poll options
  uint32_t tx_budget_ = kKernelTxBudget;  // descriptors one sendto() transmits (copy mode)
  std::string tx_budget_refusal_;         // why the kernel kept its default

  // libxdp ring handles (struct xsk_ring_prod / xsk_ring_cons), kept opaque to this header.
  struct Rings;
  std::unique_ptr<Rings> rings_;

  // Multi-buffer receive: a chain of descriptors copied into one of these buffers; the
  // RxPacket's cookie is kAssembledCookie | its index until Release().
  static constexpr uint64_t kAssembledCookie = uint64_t{1} << 63;
  bool ReceiveChain(std::span<const struct xdp_desc* const> chain, RxPacket* out);
  std::vector<std::unique_ptr<std::byte[]>> assembled_;
  std::vector<uint32_t> free_assembled_;
  bool SendChain(const FrameAddresses& a, const TxPacket& packet);

  std::vector<uint64_t> free_tx_frames_;   // UMEM addresses of frames ready for Send()
  std::vector<uint64_t> fill_backlog_;     // received frames returned, not yet in the fill ring
  uint32_t tx_reserved_unsubmitted_ = 0;   // descriptors written by Send(), not yet submitted
  uint32_t tx_in_flight_ = 0;              // submitted, completion not yet reclaimed

  PortStats stats_;
};

}  // namespace metaroce::io
