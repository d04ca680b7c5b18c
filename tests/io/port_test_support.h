// Helpers shared by the privileged port tests: recognisable payloads and a kernel UDP sender
// that sets any TOS (CE included), standing in for a router that marks congestion.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "lib/io/ip_address.h"

namespace metaroce::io::testing {

// A payload of 24..(24 + spread - 1) bytes whose bytes all derive from `seq`; byte 0 is 1
// (MetaRoCE version 1, which the steering program requires), bytes 2..3 carry `spread` and bytes
// 4..7 seq (little-endian).
inline std::vector<std::byte> TestPayload(uint32_t seq, uint16_t spread = 1376) {
  const size_t size = 24 + (seq * 7919u) % spread;
  std::vector<std::byte> p(size);
  p[0] = std::byte{1};
  std::memcpy(p.data() + 2, &spread, 2);
  std::memcpy(p.data() + 4, &seq, 4);
  for (size_t i = 8; i < size; ++i) p[i] = static_cast<std::byte>((seq * 131u + i * 17u) & 0xFF);
  return p;
}

// The seq of a payload made by TestPayload, or -1 when the bytes are not exactly what it makes.
inline int64_t CheckTestPayload(std::span<const std::byte> payload) {
  if (payload.size() < 8) return -1;
  uint32_t seq;
  uint16_t spread;
  std::memcpy(&spread, payload.data() + 2, 2);
  std::memcpy(&seq, payload.data() + 4, 4);
  if (spread == 0) return -1;
  const std::vector<std::byte> expected = TestPayload(seq, spread);
  if (expected.size() != payload.size() ||
      std::memcmp(expected.data(), payload.data(), payload.size()) != 0) {
    return -1;
  }
  return seq;
}

// Sends `count` datagrams from an ephemeral port to ip:port with TOS `tos` (3 = CE) through a
// plain kernel socket. Returns how many sendto() accepted.
inline int SendWithTos(const std::string& ip, uint16_t port, int tos, int count) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 0;
  setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  int sent = 0;
  for (int i = 0; i < count; ++i) {
    const std::vector<std::byte> p = TestPayload(1000000 + i);
    if (sendto(fd, p.data(), p.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) > 0) ++sent;
  }
  close(fd);
  return sent;
}

inline bool Before(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::steady_clock::now() < deadline;
}

}  // namespace metaroce::io::testing

// ---- Two ports in two namespaces exchanging TestPayload packets --------------------------------

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "lib/io/packet_port.h"
#include "tests/io/netns_fixture.h"

namespace metaroce::io::testing {

struct OpenedPort {
  std::unique_ptr<PacketPort> port;
  std::shared_ptr<void> keep_alive;  // e.g. the XdpSteering the port depends on; destroyed after
};
// Runs inside the port's namespace thread (and so does the port's destruction).
using PortFactory = std::function<absl::StatusOr<OpenedPort>()>;

struct ExchangeResult {
  std::string sender_error, receiver_error;  // Open() failures
  uint64_t sent = 0, received = 0, corrupt = 0, duplicates = 0, ce = 0;
  double seconds = 0;  // first send to last receive
  std::string sender_description, receiver_description;
  PortStats sender_stats, receiver_stats;
};

struct ExchangeOptions {
  uint32_t count = 10000;
  IpAddress dst;
  uint16_t dst_port = 4792;
  std::function<uint16_t(uint32_t seq)> src_port = [](uint32_t seq) {
    return static_cast<uint16_t>(49152 + seq % 8);
  };
  std::function<bool(uint32_t seq)> ect = [](uint32_t) { return true; };
  uint16_t payload_spread = 1376;  // payloads of 24..24 + spread - 1 bytes (TestPayload)
  uint32_t window = 256;  // most packets in flight (sent, not yet received): no overrun losses
  std::chrono::seconds timeout{20};
  // Called on the receiver's thread once its port is open (e.g. to send extra traffic).
  std::function<void()> after_receiver_ready;
};

inline ExchangeResult RunExchange(const VethNamespacePair& pair, int sender_side,
                                  PortFactory make_sender, int receiver_side,
                                  PortFactory make_receiver, const ExchangeOptions& o) {
  ExchangeResult r;
  std::atomic<uint64_t> received{0};
  std::atomic<bool> receiver_ready{false}, receiver_failed{false}, done{false};
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  std::chrono::steady_clock::time_point first_send, last_receive;

  std::thread receiver = pair.StartIn(receiver_side, [&] {
    absl::StatusOr<OpenedPort> opened = make_receiver();
    if (!opened.ok()) {
      r.receiver_error = opened.status().ToString();
      receiver_failed = true;
      return;
    }
    PacketPort& port = *opened->port;
    r.receiver_description = port.description();
    receiver_ready = true;
    std::vector<bool> seen(o.count, false);
    RxPacket batch[64];
    while (received.load() < o.count && Before(deadline)) {
      const size_t n = port.Receive(batch);
      for (size_t i = 0; i < n; ++i) {
        const int64_t seq = CheckTestPayload(batch[i].payload);
        if (seq >= 1000000) {  // the CE sender's packets (SendWithTos)
          if (batch[i].ce) ++r.ce;
          continue;
        }
        if (seq < 0 || seq >= o.count) {
          ++r.corrupt;
          continue;
        }
        if (seen[seq]) {
          ++r.duplicates;
          continue;
        }
        seen[seq] = true;
        if (batch[i].ce) ++r.ce;
        received.fetch_add(1);
        last_receive = std::chrono::steady_clock::now();
      }
      port.Release(std::span(batch, n));
      if (n == 0) std::this_thread::yield();
    }
    done = true;
    r.received = received.load();
    // Let late packets (e.g. the CE sender's) arrive before counting them.
    if (o.after_receiver_ready) {
      const auto drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      while (Before(drain_until)) {
        const size_t n = port.Receive(batch);
        for (size_t i = 0; i < n; ++i) {
          if (CheckTestPayload(batch[i].payload) >= 1000000 && batch[i].ce) ++r.ce;
        }
        port.Release(std::span(batch, n));
      }
    }
    r.receiver_stats = port.stats();
  });
  while (!receiver_ready && !receiver_failed && Before(deadline)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (receiver_ready && o.after_receiver_ready) pair.RunIn(sender_side, o.after_receiver_ready);

  std::thread sender = pair.StartIn(sender_side, [&] {
    if (!receiver_ready) return;
    absl::StatusOr<OpenedPort> opened = make_sender();
    if (!opened.ok()) {
      r.sender_error = opened.status().ToString();
      done = true;
      return;
    }
    PacketPort& port = *opened->port;
    r.sender_description = port.description();
    first_send = std::chrono::steady_clock::now();
    uint32_t seq = 0;
    std::vector<std::byte> payload = TestPayload(0, o.payload_spread);
    RxPacket ignored[32];
    while (seq < o.count && !done && Before(deadline)) {
      if (seq - received.load() >= o.window) {
        port.Flush();
        port.Release(std::span(ignored, port.Receive(ignored)));  // keep rings moving
        std::this_thread::yield();
        continue;
      }
      payload = TestPayload(seq, o.payload_spread);
      TxPacket tx;
      tx.dst = o.dst;
      tx.dst_port = o.dst_port;
      tx.src_port = o.src_port(seq);
      tx.ect = o.ect(seq);
      tx.headers = std::span(payload).first(24);
      tx.payload = std::span(payload).subspan(24);
      if (port.Send(tx)) {
        ++seq;
        if (seq % 32 == 0) port.Flush();
      } else {
        port.Flush();
      }
    }
    r.sent = seq;
    while (!done && Before(deadline)) {  // frames may wait in rings until kicked
      port.Flush();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    r.sender_stats = port.stats();
  });
  sender.join();
  done = true;
  receiver.join();
  r.seconds = std::chrono::duration<double>(last_receive - first_send).count();
  return r;
}

}  // namespace metaroce::io::testing
