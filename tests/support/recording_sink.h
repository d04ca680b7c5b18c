// A PacketSink that records every packet the core emits, decoded, for assertions in tests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lib/core/packet_sink.h"
#include "lib/wire/packet.h"

namespace metaroce::testing {

struct RecordedPacket {
  core::TxMeta meta;
  std::vector<std::byte> bytes;  // headers + payload, as on the wire
  wire::Packet packet;           // decoded (payload points into `bytes`)
};

class RecordingSink : public core::PacketSink {
 public:
  void Transmit(const core::TxMeta& meta, std::span<const std::byte> headers,
                std::span<const std::byte> payload) override;

  // Packets recorded so far. Pointers into it stay valid until Clear() (a std::vector of
  // unique storage per packet).
  std::vector<RecordedPacket>& packets() { return packets_; }
  // Removes and returns the recorded packets.
  std::vector<RecordedPacket> Take();
  void Clear() { packets_.clear(); }
  // One line per packet, e.g. "path 1 WRITE psn 3 msg 0 off 4096 len 4096 flags=ACK_REQ".
  std::string Log() const;

 private:
  std::vector<RecordedPacket> packets_;
};

std::string Describe(const wire::Packet& p);

}  // namespace metaroce::testing
