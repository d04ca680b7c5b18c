// A packet port moves MetaRoCE packets (UDP payloads) between the engine and one network
// interface. It knows nothing of the protocol beyond "this datagram is ours": it frames on send
// (Ethernet/IP/UDP where it builds frames itself), and on receive hands back the UDP payload with
// the addressing and ECN bits the core needs.
//
// Implementations: AfXdpPort (kernel bypass, lib/io/af_xdp_port.h), UdpPort (kernel UDP
// through io_uring, lib/io/udp_port.h), MemoryPort (in-process, tests and benchmarks).
//
// Threading: a port is owned by one worker thread and used from it only.
// Ownership: received payloads point into the port's buffers and stay valid until Release().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "lib/io/ip_address.h"

namespace metaroce::io {

struct TxPacket {
  IpAddress dst;                 // peer's address on this port's plane
  uint16_t src_port = 0;         // the path's source port (ECMP entropy)
  uint16_t dst_port = 0;
  bool ect = true;               // mark ECT(0) so the fabric can signal congestion with CE
  std::span<const std::byte> headers;  // MetaRoCE headers
  std::span<const std::byte> payload;  // MetaRoCE payload (gathered: copied once, into the frame)
};

struct RxPacket {
  std::span<const std::byte> payload;  // the UDP payload; valid until Release()
  IpAddress src;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  bool ce = false;                     // the IP ECN field was CE
  uint64_t cookie = 0;                 // the port's handle for Release()
};

struct PortStats {
  uint64_t tx_packets = 0, tx_bytes = 0, rx_packets = 0, rx_bytes = 0;
  uint64_t tx_ring_full = 0;      // Send() refused: no free frame or TX ring full
  uint64_t tx_unroutable = 0;     // Send() accepted but dropped: no route/neighbour/socket for the
                                  // destination, or a send error (the protocol sees a loss)
  uint64_t rx_dropped = 0;        // frames not ours or malformed below UDP (counted, released)
  // AF_XDP ring health (XDP_STATISTICS); zero for other ports.
  uint64_t rx_ring_full = 0, fill_ring_empty = 0, rx_invalid_descs = 0, tx_invalid_descs = 0;
  uint64_t rx_kernel_dropped = 0;  // XDP_STATISTICS rx_dropped (e.g. frame larger than a UMEM frame)
  // UDP port: messages that carried a run of datagrams with UDP_SEGMENT (tx_packets counts
  // the datagrams).
  uint64_t tx_segmented_messages = 0;
};

// What a port does, for code to act on and report (description() says it to people, with the
// kernel's reasons for what it refused).
struct PortFeatures {
  bool af_xdp = false;        // an AF_XDP socket; the fields below are about it
  bool zero_copy = false;     // XDP_ZEROCOPY (else copy mode)
  bool need_wakeup = false;   // XDP_USE_NEED_WAKEUP
  bool busy_poll = false;     // the kernel took SO_PREFER_BUSY_POLL, SO_BUSY_POLL and its budget
  bool multi_buffer = false;  // XDP_USE_SG: frames span UMEM frames (jumbo MTUs)
};

class PacketPort {
 public:
  virtual ~PacketPort() = default;

  // Queues one packet (copies headers and payload into a frame). Returns false when no frame or
  // ring slot is free: the caller should Flush(), Poll and retry; nothing was queued. Returns
  // true but drops (and counts tx_unroutable) a packet that can never leave as it is (no
  // next-hop MAC yet, too large for a frame): on a lossy fabric that is a loss, not back-pressure.
  virtual bool Send(const TxPacket& packet) = 0;
  // Hands queued packets to the kernel or NIC (one kick for the batch).
  virtual void Flush() = 0;
  // Receives up to out.size() packets without blocking; returns how many.
  virtual size_t Receive(std::span<RxPacket> out) = 0;
  // Returns received packets' buffers to the port.
  virtual void Release(std::span<const RxPacket> packets) = 0;
  // A file descriptor that becomes readable when packets arrive (for poll()), or -1.
  virtual int wait_fd() const = 0;

  virtual PortStats stats() const = 0;
  // What the port really is, e.g. "af_xdp copy mode, need_wakeup" or "udp io_uring": reported
  // by tools so that a user knows which datapath a figure came from.
  virtual std::string description() const = 0;
  // The same in fields; all false for ports other than AF_XDP.
  virtual PortFeatures features() const { return {}; }
};

}  // namespace metaroce::io
