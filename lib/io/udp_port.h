// UdpPort: a PacketPort on kernel UDP sockets, for hosts where AF_XDP is not available.
//
// Same wire bytes as AfXdpPort: the UDP payload is the MetaRoCE packet. Sockets:
//   - the port socket, bound to local_ip:udp_port, receives data (and sends ACKs, whose source
//     port is udp_port);
//   - one socket per other source port in use (the paths' ECMP entropy), bound to
//     local_ip:src_port (SO_REUSEADDR, so a just-evicted port can be bound again at once) and
//     created on the first Send() from that port, because a kernel UDP
//     socket cannot choose its source port per datagram. ACKs come back to those ports, so each
//     of these sockets receives too. At most max_source_ports are kept; the least recently used
//     one is closed when a new one is needed.
// ECN: IP_TOS / IPV6_TCLASS per datagram (ECT(0) or Not-ECT) on send; IP_RECVTOS /
// IPV6_RECVTCLASS on receive give the CE bit.
//
// Two ways to drive the sockets (Options::io_uring):
//   - batched system calls (the default): Flush() sends what Send() queued with one sendmmsg per
//     source socket, runs of like datagrams as single UDP_SEGMENT messages (Options::segmentation),
//     Receive() takes what an epoll set reports ready with recvmmsg;
//   - io_uring (liburing 2.3 API: IORING_OP_SENDMSG / IORING_OP_RECVMSG posted ahead, no
//     provided-buffer rings). Measured on the namespace fabric (docs/performance.md) it moved
//     0.35-0.4 of the batched calls' bandwidth: every arriving datagram wakes the receives armed
//     on its socket and completes through task work, and spinning on an empty ring costs an
//     eventfd read. Kept as an option for kernels and hosts where that differs; when io_uring
//     cannot be set up (seccomp, kernel.io_uring_disabled) the port uses the batched calls and
//     description() says why.
//
// Threading: one owner thread (the PacketPort contract). Open() must run in the network namespace
// of the address (the calling thread's).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/io/ip_address.h"
#include "lib/io/packet_port.h"

struct io_uring;
struct io_uring_sqe;

namespace metaroce::io {

class UdpPort final : public PacketPort {
 public:
  struct Options {
    IpAddress local_ip;        // this plane's address (IPv4 or IPv6); all sockets bind to it
    uint16_t udp_port = 4792;  // MetaRoCE's port, host order
    uint32_t send_slots = 256;   // datagrams queued or in flight before Send() says "full"
    uint32_t buffer_bytes = 4096;  // largest datagram; larger ones are dropped (rx_dropped)
    uint32_t max_source_ports = 1024;
    bool io_uring = false;  // drive the sockets through io_uring instead of batched calls
    // Batched calls: a run of datagrams of one socket to one peer, one ECN codepoint and one
    // size (the last may be shorter) leaves as one message with UDP_SEGMENT (generic
    // segmentation offload; off by itself when the kernel refuses it, description() says why).
    bool segmentation = true;
    // io_uring only:
    uint32_t receive_slots = 256;                 // receives kept posted on the port socket
    uint32_t receive_slots_per_source_port = 8;   // ... and on each source-port socket
    uint32_t ring_entries = 1024;  // submission queue entries
  };

  // Errors: the bind of the port socket (EADDRINUSE: another socket owns the port, including a
  // second UdpPort: the port socket has no SO_REUSEADDR; EADDRNOTAVAIL: the address is not on an interface of this namespace), buffer allocation.
  static absl::StatusOr<std::unique_ptr<UdpPort>> Open(Options options);

  ~UdpPort() override;
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  bool Send(const TxPacket& packet) override;
  void Flush() override;
  size_t Receive(std::span<RxPacket> out) override;
  void Release(std::span<const RxPacket> packets) override;
  // io_uring: an eventfd signalled on completions (Receive() drains it when it finds nothing).
  // Fallback: an epoll fd over the sockets.
  int wait_fd() const override { return wait_fd_; }
  PortStats stats() const override { return stats_; }
  std::string description() const override;

  bool uses_io_uring() const { return ring_ != nullptr; }
  size_t open_socket_count() const { return sockets_.size(); }

 private:
  struct Socket;
  struct Slot;

  explicit UdpPort(Options options);
  absl::Status Init();
  absl::StatusOr<Socket*> OpenSocket(uint16_t port);
  Socket* SocketFor(uint16_t src_port);
  void EvictLeastRecentlyUsed();
  Slot* TakeReceiveSlot(Socket* owner);
  void PostReceive(Slot* slot);
  void ReturnReceiveSlot(Slot* slot);
  void DropSocketReference(Socket* socket);
  void ReapCompletions();
  void ReceiveFallback();
  void FlushFallback();
  // How many queued datagrams from `first` on can leave as one UDP_SEGMENT message (1: alone).
  size_t SegmentRun(const std::vector<uint32_t>& queued, size_t first) const;
  // Sends `count` queued datagrams from `first` on one by one (a run the kernel refused whole).
  void SendEach(Socket* socket, const std::vector<uint32_t>& queued, size_t first, size_t count);
  void PrepareMessage(Slot* slot, bool for_send);
  ::io_uring_sqe* NextSqe();

  Options options_;
  std::unique_ptr<io_uring> ring_;  // null: batched system calls
  std::string fallback_reason_;     // why io_uring was asked for and not used
  int wait_fd_ = -1;  // eventfd (io_uring) or epoll fd (batched calls)
  int epoll_fd_ = -1;

  absl::flat_hash_map<uint16_t, std::unique_ptr<Socket>> sockets_;
  std::vector<std::unique_ptr<Socket>> closing_sockets_;  // waiting for their receives to end
  Socket* port_socket_ = nullptr;
  uint64_t use_clock_ = 0;

  std::vector<std::unique_ptr<Slot>> rx_slots_;  // index == cookie
  std::vector<uint32_t> free_rx_slots_;
  std::deque<uint32_t> ready_rx_slots_;          // completed receives not yet returned
  std::vector<std::unique_ptr<Slot>> tx_slots_;
  std::vector<uint32_t> free_tx_slots_;
  std::vector<Socket*> sockets_with_queued_;     // batched calls: sockets Flush() sends from
  bool segmentation_ = false;                    // UDP_SEGMENT runs (Options::segmentation)
  std::string segmentation_off_;                 // why the kernel made us stop
  std::vector<iovec> segment_iovs_;              // a flush's runs, one iovec per datagram
  uint32_t unsubmitted_ = 0;                     // io_uring: SQEs prepared, not submitted

  PortStats stats_;
};

}  // namespace metaroce::io
