// The core's only way out: packets are handed to a PacketSink that the caller supplies (a packet
// port of lib/io, the simulator's fabric, or a recording fake in tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace metaroce::core {

// Addressing the core decides for one outgoing packet. Addresses themselves (IP, MAC) belong to
// the caller; the core chooses the logical path, its plane and the UDP ports that steer it.
struct TxMeta {
  uint32_t conn_id = 0;   // local connection id (the sender of this packet)
  uint16_t path_id = 0;
  uint8_t plane = 0;      // which interface/plane the path uses
  uint16_t src_port = 0;  // UDP source port: the path's port (ECMP entropy), on ACKs too
  uint16_t dst_port = 0;  // UDP destination port: always the MetaRoCE port
};

// What the caller knows about a received datagram beyond its bytes.
struct RxMeta {
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t plane = 0;
  bool ce = false;  // IP ECN field was CE (congestion experienced)
};

class PacketSink {
 public:
  virtual ~PacketSink() = default;
  // Emits one MetaRoCE packet: `headers` then `payload` form the UDP payload. Both spans are valid
  // only during the call; the sink copies what it keeps. Must not call back into the core.
  virtual void Transmit(const TxMeta& meta, std::span<const std::byte> headers,
                        std::span<const std::byte> payload) = 0;
};

}  // namespace metaroce::core
