// MemoryPort: an in-process PacketPort. MemoryPort::CreatePair() joins two ports by two bounded
// lock-free single-producer/single-consumer rings (one per direction), for tests and engine
// benchmarks that need no privileges and no network.
//
// Semantics: whatever one port Send()s and Flush()es, the other Receive()s, in order, with the
// sender's ports, its local address as source, and CE as decided by the optional marker. The
// destination address of a TxPacket is not checked (the pair has one peer). A full ring makes
// Send() return false (back-pressure, nothing lost); a packet larger than max_packet_bytes is
// dropped and counted as tx_unroutable.
//
// Threading: each port of a pair may be owned by a different thread (one thread per port; the
// rings are SPSC). Destroy both ports after both threads stopped using them.
// wait_fd(): an eventfd signalled by the peer's Flush() when it published packets.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lib/io/ip_address.h"
#include "lib/io/packet_port.h"

namespace metaroce::io {

class MemoryPort final : public PacketPort {
 public:
  struct Options {
    IpAddress local_ip;             // the source address the peer sees
    uint32_t ring_capacity = 1024;  // packets in flight per direction (rounded up to 2^n)
    uint32_t max_packet_bytes = 9216;
    // Called on the sending thread for each packet with ect set: true marks it CE on the way.
    std::function<bool(const TxPacket&)> mark_ce;
  };

  // Two joined ports: a's packets arrive at b and b's at a.
  static std::pair<std::unique_ptr<MemoryPort>, std::unique_ptr<MemoryPort>> CreatePair(
      Options a, Options b);

  ~MemoryPort() override;
  MemoryPort(const MemoryPort&) = delete;
  MemoryPort& operator=(const MemoryPort&) = delete;

  bool Send(const TxPacket& packet) override;
  void Flush() override;
  size_t Receive(std::span<RxPacket> out) override;
  void Release(std::span<const RxPacket> packets) override;
  int wait_fd() const override { return event_fd_; }
  PortStats stats() const override { return stats_; }
  std::string description() const override { return "memory (in-process pair)"; }

 private:
  struct Ring;
  MemoryPort(Options options, std::shared_ptr<Ring> outbound, std::shared_ptr<Ring> inbound);

  Options options_;
  std::shared_ptr<Ring> outbound_;  // this port produces
  std::shared_ptr<Ring> inbound_;   // this port consumes
  int event_fd_ = -1;               // signalled by the peer (it writes inbound_->event_fd)
  uint32_t published_unflushed_ = 0;
  std::vector<std::vector<std::byte>> lent_buffers_;  // by cookie; empty vector: free
  std::vector<uint64_t> free_cookies_;
  PortStats stats_;
};

}  // namespace metaroce::io
