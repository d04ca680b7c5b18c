// lib/io/udp_port between two network namespaces joined by a veth pair (suite
// 'privileged'): 10k packets each way with byte-for-byte checks, CE read from the IP header,
// ACK-shaped replies to the paths' source ports, runs sent with UDP_SEGMENT, the io_uring mode,
// IPv6, socket eviction.
#include "lib/io/udp_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/io/netns_fixture.h"
#include "tests/io/port_test_support.h"

namespace metaroce::io {
namespace {

using ::metaroce::io::testing::ExchangeOptions;
using ::metaroce::io::testing::ExchangeResult;
using ::metaroce::io::testing::OpenedPort;
using ::metaroce::io::testing::PortFactory;
using ::metaroce::io::testing::RunExchange;
using ::metaroce::io::testing::VethNamespacePair;

PortFactory UdpPortAt(std::string ip, UdpPort::Options base = {}) {
  return [ip, base]() -> absl::StatusOr<OpenedPort> {
    UdpPort::Options o = base;
    o.local_ip = *IpAddress::Parse(ip);
    absl::StatusOr<std::unique_ptr<UdpPort>> port = UdpPort::Open(o);
    if (!port.ok()) return port.status();
    return OpenedPort{std::move(*port), nullptr};
  };
}

class UdpPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<VethNamespacePair>> pair = VethNamespacePair::Create();
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(*pair);
  }
  std::unique_ptr<VethNamespacePair> pair_;
};

void ExpectClean(const ExchangeResult& r, uint32_t count) {
  EXPECT_EQ(r.sender_error, "");
  EXPECT_EQ(r.receiver_error, "");
  EXPECT_EQ(r.sent, count);
  EXPECT_EQ(r.received, count);
  EXPECT_EQ(r.corrupt, 0u);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_EQ(r.sender_stats.tx_unroutable, 0u);
}

TEST_F(UdpPortTest, TenThousandPacketsEachWayWithCe) {
  for (int sender : {0, 1}) {
    const int receiver = 1 - sender;
    ExchangeOptions o;
    o.count = 10000;
    o.dst = *IpAddress::Parse(VethNamespacePair::ipv4(receiver));
    o.ect = [](uint32_t seq) { return seq % 2 == 0; };
    // A router's CE mark, emulated: 50 datagrams sent with TOS = CE by a kernel socket.
    const std::string to = VethNamespacePair::ipv4(receiver);
    o.after_receiver_ready = [to] {
      EXPECT_EQ(::metaroce::io::testing::SendWithTos(to, 4792, 0x03, 50), 50);
    };
    const ExchangeResult r =
        RunExchange(*pair_, sender, UdpPortAt(VethNamespacePair::ipv4(sender)), receiver,
                    UdpPortAt(VethNamespacePair::ipv4(receiver)), o);
    ExpectClean(r, o.count);
    EXPECT_EQ(r.ce, 50u) << "exactly the CE-marked datagrams read as CE, ECT/Not-ECT ones not";
    EXPECT_THAT(r.sender_description, ::testing::HasSubstr("udp sendmmsg+gso/recvmmsg"));
    std::printf("udp sendmmsg+gso/recvmmsg %d -> %d: %lu packets in %.3f s (%.0f pps, window %u)\n",
                sender, receiver, static_cast<unsigned long>(r.received), r.seconds,
                r.received / r.seconds, o.window);
  }
}

TEST_F(UdpPortTest, AckShapedRepliesComeBackFromThePathsPortsToTheMetaRocePort) {
  // Data goes 0 -> 1 from source ports 49152..49159 to 4792; ACKs come back to 4792 carrying
  // each path's port as their source (every MetaRoCE datagram is addressed to the MetaRoCE
  // port), so the responder sends them from its own per-source-port sockets.
  pair_->RunIn(0, [&] {
    auto a = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.1")});
    ASSERT_TRUE(a.ok()) << a.status();
    std::unique_ptr<UdpPort> b;
    pair_->RunIn(1, [&] {
      auto opened = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.2")});
      ASSERT_TRUE(opened.ok()) << opened.status();
      b = std::move(*opened);
    });
    ASSERT_NE(b, nullptr);
    const std::vector<std::byte> data = ::metaroce::io::testing::TestPayload(7);
    for (uint16_t path = 0; path < 8; ++path) {
      TxPacket tx{.dst = *IpAddress::Parse("198.18.0.2"),
                  .src_port = static_cast<uint16_t>(49152 + path),
                  .dst_port = 4792,
                  .payload = data};
      ASSERT_TRUE((*a)->Send(tx));
    }
    (*a)->Flush();
    // b replies to each datagram from its path's port, to 4792. Its per-source-port sockets are
    // opened on demand, so b must run in its own namespace (the port's threading contract).
    RxPacket rx[16];
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::vector<uint16_t> reply_ports;
    pair_->RunIn(1, [&] {
      while (got < 8 && ::metaroce::io::testing::Before(deadline)) {
        const size_t n = b->Receive(rx);
        for (size_t i = 0; i < n; ++i) {
          EXPECT_EQ(rx[i].src.ToString(), "198.18.0.1");
          EXPECT_EQ(rx[i].dst_port, 4792);
          reply_ports.push_back(rx[i].src_port);
          TxPacket ack{.dst = rx[i].src, .src_port = rx[i].src_port, .dst_port = 4792,
                       .payload = data};
          EXPECT_TRUE(b->Send(ack));
        }
        b->Release(std::span(rx, n));
        b->Flush();
        got += n;
      }
    });
    ASSERT_EQ(got, 8u);
    std::vector<uint16_t> acked_ports;
    while (acked_ports.size() < 8 && ::metaroce::io::testing::Before(deadline)) {
      const size_t n = (*a)->Receive(rx);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(rx[i].dst_port, 4792);
        acked_ports.push_back(rx[i].src_port);
      }
      (*a)->Release(std::span(rx, n));
    }
    EXPECT_THAT(acked_ports, ::testing::UnorderedElementsAreArray(reply_ports));
    EXPECT_EQ((*a)->open_socket_count(), 9u);  // the port socket + one per path
    EXPECT_EQ(b->open_socket_count(), 9u);     // the responder sends from the paths' ports
  });
}

// One flush of like datagrams (one socket, one peer, one ECN codepoint, one size but the last):
// with segmentation they leave as UDP_SEGMENT messages, and the kernel must deliver exactly the
// datagrams that were queued, each with its own bytes and ECN, in order. A shorter datagram, a
// change of codepoint and a second peer port each end a run.
struct SegmentedFlush {
  uint64_t segmented_messages = 0;
  std::string description;
  std::vector<std::vector<std::byte>> received;
  std::vector<std::vector<std::byte>> sent;
};

SegmentedFlush SendRunsOfLikeDatagrams(VethNamespacePair& pair, bool segmentation) {
  SegmentedFlush out;
  // 40 of 1000 bytes, one of 500, 30 of 1000 Not-ECT, 29 of 1000 to a second port, 3 of 1472.
  struct Group { uint32_t count; uint32_t size; bool ect; uint16_t dst_port; };
  const Group groups[] = {{40, 1000, true, 4792}, {1, 500, true, 4792}, {30, 1000, false, 4792},
                          {29, 1000, true, 4793}, {3, 1472, true, 4792}};
  std::vector<TxPacket> packets;
  uint32_t seq = 0;
  for (const Group& g : groups) {
    for (uint32_t i = 0; i < g.count; ++i, ++seq) {
      std::vector<std::byte> bytes(g.size);
      for (uint32_t k = 0; k < g.size; ++k) {
        bytes[k] = static_cast<std::byte>((seq * 31 + k) & 0xFF);
      }
      std::memcpy(bytes.data(), &seq, sizeof seq);
      out.sent.push_back(std::move(bytes));
      packets.push_back(TxPacket{.dst = *IpAddress::Parse("198.18.0.2"), .src_port = 50001,
                                 .dst_port = g.dst_port, .ect = g.ect});
    }
  }
  pair.RunIn(0, [&] {
    UdpPort::Options o{.local_ip = *IpAddress::Parse("198.18.0.1")};
    o.segmentation = segmentation;
    auto a = UdpPort::Open(o);
    ASSERT_TRUE(a.ok()) << a.status();
    std::unique_ptr<UdpPort> b;
    std::unique_ptr<UdpPort> b2;  // the second peer port's receiver
    pair.RunIn(1, [&] {
      auto opened = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.2")});
      ASSERT_TRUE(opened.ok()) << opened.status();
      b = std::move(*opened);
      auto opened2 =
          UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.2"), .udp_port = 4793});
      ASSERT_TRUE(opened2.ok()) << opened2.status();
      b2 = std::move(*opened2);
    });
    ASSERT_NE(b2, nullptr);
    for (size_t i = 0; i < packets.size(); ++i) {
      packets[i].payload = out.sent[i];
      ASSERT_TRUE((*a)->Send(packets[i]));
    }
    (*a)->Flush();
    out.segmented_messages = (*a)->stats().tx_segmented_messages;
    out.description = (*a)->description();
    EXPECT_EQ((*a)->stats().tx_unroutable, 0u);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    pair.RunIn(1, [&] {
      std::vector<std::vector<std::byte>> second;
      RxPacket rx[64];
      while (out.received.size() + second.size() < packets.size() &&
             ::metaroce::io::testing::Before(deadline)) {
        const std::pair<UdpPort*, std::vector<std::vector<std::byte>>*> receivers[] = {
            {b.get(), &out.received}, {b2.get(), &second}};
        for (const auto& [port, into] : receivers) {
          const size_t n = port->Receive(rx);
          for (size_t i = 0; i < n; ++i) {
            into->emplace_back(rx[i].payload.begin(), rx[i].payload.end());
          }
          port->Release(std::span(rx, n));
        }
      }
      // The second port's datagrams were sent after the first 71: put them where they belong.
      out.received.insert(out.received.begin() + std::min<size_t>(71, out.received.size()),
                          second.begin(), second.end());
    });
  });
  return out;
}

TEST_F(UdpPortTest, RunsOfLikeDatagramsLeaveSegmentedAndArriveAsTheyWereQueued) {
  const SegmentedFlush s = SendRunsOfLikeDatagrams(*pair_, /*segmentation=*/true);
  EXPECT_THAT(s.description, ::testing::HasSubstr("udp sendmmsg+gso/recvmmsg"));
  // Runs: 40 (ended by the shorter one, which joins it as its last), 30 Not-ECT, 29 to 4793,
  // 3 of 1472: four messages.
  EXPECT_EQ(s.segmented_messages, 4u);
  ASSERT_EQ(s.received.size(), s.sent.size());
  for (size_t i = 0; i < s.sent.size(); ++i) {
    EXPECT_EQ(s.received[i], s.sent[i]) << "datagram " << i;
  }
}

TEST_F(UdpPortTest, WithoutSegmentationTheSameDatagramsLeaveOneByOne) {
  const SegmentedFlush s = SendRunsOfLikeDatagrams(*pair_, /*segmentation=*/false);
  EXPECT_THAT(s.description, ::testing::HasSubstr("udp sendmmsg/recvmmsg"));
  EXPECT_EQ(s.segmented_messages, 0u);
  ASSERT_EQ(s.received.size(), s.sent.size());
  for (size_t i = 0; i < s.sent.size(); ++i) EXPECT_EQ(s.received[i], s.sent[i]) << i;
}

TEST_F(UdpPortTest, IoUringCarriesTheSameBytes) {
  ExchangeOptions o;
  o.count = 3000;
  o.dst = *IpAddress::Parse("198.18.0.2");
  UdpPort::Options uring;
  uring.io_uring = true;
  const ExchangeResult r = RunExchange(*pair_, 0, UdpPortAt("198.18.0.1", uring), 1,
                                       UdpPortAt("198.18.0.2", uring), o);
  ExpectClean(r, o.count);
  EXPECT_THAT(r.sender_description, ::testing::HasSubstr("udp io_uring"));
  EXPECT_THAT(r.receiver_description, ::testing::HasSubstr("udp io_uring"));
}

TEST_F(UdpPortTest, Ipv6) {
  // Resolve the neighbour first: the kernel queues only a few datagrams while ND runs.
  ASSERT_EQ(pair_->Ping(0, "fd00::2"), absl::OkStatus());
  ExchangeOptions o;
  o.count = 2000;
  o.dst = *IpAddress::Parse("fd00::2");
  const ExchangeResult r =
      RunExchange(*pair_, 0, UdpPortAt("fd00::1"), 1, UdpPortAt("fd00::2"), o);
  ExpectClean(r, o.count);
}

TEST_F(UdpPortTest, EvictsLeastRecentlyUsedSourcePortSockets) {
  ExchangeOptions o;
  o.count = 2000;
  o.dst = *IpAddress::Parse("198.18.0.2");
  o.src_port = [](uint32_t seq) { return static_cast<uint16_t>(50000 + seq % 13); };
  UdpPort::Options small;
  small.max_source_ports = 4;
  const ExchangeResult r =
      RunExchange(*pair_, 0, UdpPortAt("198.18.0.1", small), 1, UdpPortAt("198.18.0.2"), o);
  ExpectClean(r, o.count);
}

TEST_F(UdpPortTest, BindErrorsNameTheFix) {
  pair_->RunIn(0, [] {
    auto port = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.2")});
    ASSERT_FALSE(port.ok());
    EXPECT_THAT(port.status().message(), ::testing::HasSubstr("no interface of this network"));
    auto first = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.1")});
    ASSERT_TRUE(first.ok());
    auto second = UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.1")});
    ASSERT_FALSE(second.ok()) << "two ports must not share (and split) one UDP port";
    EXPECT_THAT(second.status().message(), ::testing::HasSubstr("another socket owns"));
  });
}

}  // namespace
}  // namespace metaroce::io
