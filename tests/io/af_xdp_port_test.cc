// lib/io/af_xdp_port with lib/io/xdp_steering between two network namespaces joined by a veth
// pair (suite 'privileged'): UDP port -> AF_XDP and AF_XDP -> UDP port, 10k packets each, byte
// for byte, UDP checksums verified both ways (the kernel checks ours); CE; ping unaffected;
// errors that name their fix; a short AF_XDP <-> AF_XDP throughput figure; jumbo frames over
// multi-buffer sockets; the copy-mode transmit budget.
#include "lib/io/af_xdp_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/io/interface_info.h"
#include "lib/io/udp_port.h"
#include "lib/io/xdp_steering.h"
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
using ::testing::HasSubstr;

PortFactory UdpPortAt(std::string ip, uint32_t buffer_bytes = 4096) {
  return [ip, buffer_bytes]() -> absl::StatusOr<OpenedPort> {
    absl::StatusOr<std::unique_ptr<UdpPort>> port =
        UdpPort::Open({.local_ip = *IpAddress::Parse(ip), .buffer_bytes = buffer_bytes});
    if (!port.ok()) return port.status();
    return OpenedPort{std::move(*port), nullptr};
  };
}

// The steering program on `ifname`, then an AfXdpPort on queue 0 registered in its XSKMAP.
PortFactory AfXdpPortOn(std::string ifname, AfXdpPort::Options base = {}) {
  return [ifname, base]() -> absl::StatusOr<OpenedPort> {
    absl::StatusOr<std::unique_ptr<XdpSteering>> steering =
        XdpSteering::Load({.ifname = ifname, .port = 4792, .frags = base.multi_buffer});
    if (!steering.ok()) return steering.status();
    AfXdpPort::Options o = base;
    o.ifname = ifname;
    o.verify_udp_checksum = true;  // the fixture turned tx checksum offload off
    absl::StatusOr<std::unique_ptr<AfXdpPort>> port = AfXdpPort::Open(o);
    if (!port.ok()) return port.status();
    if (absl::Status s = (*steering)->RegisterSocket((*port)->queue_id(), (*port)->xsk_fd());
        !s.ok()) {
      return s;
    }
    // Destroyed after the port (members of OpenedPort are destroyed in reverse order).
    return OpenedPort{std::move(*port), std::shared_ptr<XdpSteering>(std::move(*steering))};
  };
}

class AfXdpPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<VethNamespacePair>> pair = VethNamespacePair::Create();
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(*pair);
    // Neighbour entries both ways, so AfXdpPort's resolver finds the peer's MAC.
    absl::Status ping = pair_->Ping(0, "198.18.0.2");
    ASSERT_TRUE(ping.ok()) << ping;
  }
  std::unique_ptr<VethNamespacePair> pair_;
};

TEST_F(AfXdpPortTest, UdpToAfXdpAndBackTenThousandEachWay) {
  {
    ExchangeOptions o;
    o.count = 10000;
    o.dst = *IpAddress::Parse("198.18.0.1");
    o.after_receiver_ready = [] {
      EXPECT_EQ(::metaroce::io::testing::SendWithTos("198.18.0.1", 4792, 0x03, 50), 50);
    };
    const ExchangeResult r = RunExchange(*pair_, 1, UdpPortAt("198.18.0.2"), 0,
                                         AfXdpPortOn(pair_->ifname(0)), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.receiver_error, "");
    EXPECT_EQ(r.received, o.count);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.duplicates, 0u);
    EXPECT_EQ(r.ce, 50u);
    EXPECT_THAT(r.receiver_description, HasSubstr("copy-mode"));
    EXPECT_EQ(r.receiver_stats.rx_dropped, 0u) << "every steered frame parsed, checksums valid";
    std::printf("udp -> af_xdp: %lu packets in %.3f s; receiver: %s\n",
                static_cast<unsigned long>(r.received), r.seconds,
                r.receiver_description.c_str());
  }
  {
    ExchangeOptions o;
    o.count = 10000;
    o.dst = *IpAddress::Parse("198.18.0.2");
    const ExchangeResult r = RunExchange(*pair_, 0, AfXdpPortOn(pair_->ifname(0)), 1,
                                         UdpPortAt("198.18.0.2"), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.receiver_error, "");
    EXPECT_EQ(r.sent, o.count);
    EXPECT_EQ(r.received, o.count) << "the kernel drops datagrams whose checksums are wrong";
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.ce, 0u);
    EXPECT_EQ(r.sender_stats.tx_unroutable, 0u);
    std::printf("af_xdp -> udp: %lu packets in %.3f s\n", static_cast<unsigned long>(r.received),
                r.seconds);
  }
}

// Jumbo frames (MTU 9000): the frags steering program and XDP_USE_SG sockets, frames chained
// over 4096-byte UMEM frames both ways; every payload byte checked, and the kernel checks the
// UDP checksums of what the AF_XDP port sends.
TEST(AfXdpPort_MultiBuffer, JumboFramesBothWaysAndBetweenPorts) {
  absl::StatusOr<std::unique_ptr<VethNamespacePair>> made =
      VethNamespacePair::Create({.mtu = 9000});
  ASSERT_TRUE(made.ok()) << made.status();
  VethNamespacePair& pair = **made;
  ASSERT_EQ(pair.Ping(0, "198.18.0.2"), absl::OkStatus());
  AfXdpPort::Options mb;
  mb.frame_size = 4096;
  mb.multi_buffer = true;
  mb.max_frame_bytes = 9000 + 14 + 4;
  constexpr uint16_t kSpread = 8900;  // UDP payloads of 24..8923 bytes: 1 to 3 UMEM frames
  {
    ExchangeOptions o;
    o.count = 3000;
    o.payload_spread = kSpread;
    o.dst = *IpAddress::Parse("198.18.0.1");
    const ExchangeResult r = RunExchange(pair, 1, UdpPortAt("198.18.0.2", 9000), 0,
                                         AfXdpPortOn(pair.ifname(0), mb), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.receiver_error, "");
    EXPECT_EQ(r.received, o.count);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.receiver_stats.rx_dropped, 0u);
    EXPECT_THAT(r.receiver_description, HasSubstr("multi-buffer"));
  }
  {
    ExchangeOptions o;
    o.count = 3000;
    o.payload_spread = kSpread;
    o.dst = *IpAddress::Parse("198.18.0.2");
    const ExchangeResult r = RunExchange(pair, 0, AfXdpPortOn(pair.ifname(0), mb), 1,
                                         UdpPortAt("198.18.0.2", 9000), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.receiver_error, "");
    EXPECT_EQ(r.received, o.count) << "the kernel drops datagrams whose checksums are wrong";
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.sender_stats.tx_unroutable, 0u);
  }
  {
    ExchangeOptions o;
    o.count = 20000;
    o.window = 512;
    o.payload_spread = kSpread;
    o.dst = *IpAddress::Parse("198.18.0.2");
    const ExchangeResult r = RunExchange(pair, 0, AfXdpPortOn(pair.ifname(0), mb), 1,
                                         AfXdpPortOn(pair.ifname(1), mb), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.receiver_error, "");
    EXPECT_EQ(r.received, o.count);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_EQ(r.duplicates, 0u);
    EXPECT_EQ(r.receiver_stats.rx_dropped, 0u);
    std::printf("af_xdp -> af_xdp multi-buffer (payload 24..8923 B): %lu packets in %.3f s\n",
                static_cast<unsigned long>(r.received), r.seconds);
  }
}

TEST(AfXdpPort_MultiBuffer, OptionsAreChecked) {
  AfXdpPort::Options o;
  o.ifname = "lo";
  o.frame_size = 4096;
  o.multi_buffer = true;
  o.max_frame_bytes = 4096 * 19;
  absl::StatusOr<std::unique_ptr<AfXdpPort>> p = AfXdpPort::Open(o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("max_frame_bytes"));
  o.max_frame_bytes = 9018;
  o.frame_count = 4;  // two transmit frames for a frame that needs three
  p = AfXdpPort::Open(o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("frame_count"));
}

// Copy mode sends inside sendto(), a budget of descriptors a call: the TX ring's size by
// default where the kernel takes XDP_MAX_TX_SKB_BUDGET (6.17+), its 32 otherwise, and a budget
// it refuses is said in the description. Whatever the budget, every packet goes.
TEST_F(AfXdpPortTest, TxBudgetTakenOrItsRefusalSaid) {
  struct Case {
    uint32_t budget;
    std::string expect;  // in the sender's description
  };
  for (const Case& c : {Case{0, " tx_budget "}, Case{64, " tx_budget "},
                        Case{8, " tx_budget 32 (XDP_MAX_TX_SKB_BUDGET 8: "}}) {
    SCOPED_TRACE(c.budget);
    ExchangeOptions o;
    o.count = 5000;
    o.window = 1024;
    o.dst = *IpAddress::Parse("198.18.0.2");
    AfXdpPort::Options base;
    base.tx_budget = c.budget;
    const ExchangeResult r = RunExchange(*pair_, 0, AfXdpPortOn(pair_->ifname(0), base), 1,
                                         UdpPortAt("198.18.0.2"), o);
    EXPECT_EQ(r.sender_error, "");
    EXPECT_EQ(r.received, o.count);
    EXPECT_EQ(r.corrupt, 0u);
    EXPECT_THAT(r.sender_description, HasSubstr(c.expect));
    const std::string wanted =
        absl::StrCat(" tx_budget ", c.budget == 0 ? 2048 : c.budget, " ");
    const bool taken = absl::StrContains(r.sender_description, wanted);
    const bool refused = absl::StrContains(r.sender_description, " tx_budget 32 (XDP_MAX_TX");
    EXPECT_TRUE(taken != refused) << r.sender_description;
    if (c.budget == 8) {
      EXPECT_TRUE(refused) << "below the kernel's 32";
    }
    std::printf("tx_budget %u: %s\n", c.budget, r.sender_description.c_str());
  }
}

// What the port opened, in fields (daemon.show and mrperf act on them, not on the words of its
// description): veth refuses zero-copy, and need_wakeup and multi-buffer are as asked.
TEST_F(AfXdpPortTest, FeaturesAreWhatItOpened) {
  for (const bool wakeup : {true, false}) {
    SCOPED_TRACE(wakeup);
    pair_->RunIn(0, [&] {
      AfXdpPort::Options o;
      o.need_wakeup = wakeup;
      o.multi_buffer = !wakeup;
      o.max_frame_bytes = 1500 + 18;
      o.busy_poll = true;
      absl::StatusOr<OpenedPort> opened = AfXdpPortOn(pair_->ifname(0), o)();
      ASSERT_TRUE(opened.ok()) << opened.status();
      const auto& port = static_cast<const AfXdpPort&>(*opened->port);
      const PortFeatures f = port.features();
      const std::string d = port.description();
      EXPECT_TRUE(f.af_xdp);
      EXPECT_FALSE(f.zero_copy) << d;
      EXPECT_EQ(f.zero_copy, port.zero_copy());
      EXPECT_EQ(f.need_wakeup, wakeup);
      EXPECT_EQ(f.multi_buffer, !wakeup);
      EXPECT_EQ(f.busy_poll, !absl::StrContains(d, "busy_poll unsupported")) << d;
      EXPECT_TRUE(absl::StrContains(d, " busy_poll")) << d;
    });
  }
  pair_->RunIn(0, [&] {
    absl::StatusOr<std::unique_ptr<UdpPort>> udp =
        UdpPort::Open({.local_ip = *IpAddress::Parse("198.18.0.1")});
    ASSERT_TRUE(udp.ok()) << udp.status();
    EXPECT_FALSE((*udp)->features().af_xdp);
  });
}

TEST_F(AfXdpPortTest, PingStillWorksWithThePortOpen) {
  pair_->RunIn(0, [&] {
    absl::StatusOr<OpenedPort> opened = AfXdpPortOn(pair_->ifname(0))();
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ(pair_->Ping(1, "198.18.0.1", 3), absl::OkStatus());
    EXPECT_EQ(pair_->Ping(0, "198.18.0.2", 3), absl::OkStatus());
    EXPECT_EQ(pair_->Ping(1, "fd00::1", 3), absl::OkStatus());
    RxPacket rx[8];
    EXPECT_EQ(opened->port->Receive(rx), 0u) << "ICMP is the kernel's";
  });
}

TEST_F(AfXdpPortTest, AfXdpToAfXdpThroughput) {
  ExchangeOptions o;
  o.count = 200000;
  o.window = 1024;
  o.timeout = std::chrono::seconds(15);
  o.dst = *IpAddress::Parse("198.18.0.2");
  const ExchangeResult r = RunExchange(*pair_, 0, AfXdpPortOn(pair_->ifname(0)), 1,
                                       AfXdpPortOn(pair_->ifname(1)), o);
  EXPECT_EQ(r.sender_error, "");
  EXPECT_EQ(r.receiver_error, "");
  EXPECT_EQ(r.corrupt, 0u);
  EXPECT_GT(r.received, o.count / 2);
  std::printf(
      "af_xdp -> af_xdp (copy mode, veth, payload 24..1399 B, window %u): %lu packets in "
      "%.3f s = %.0f pps; sender ring full %lu, receiver fill-ring-empty %lu rx-ring-full %lu\n",
      o.window, static_cast<unsigned long>(r.received), r.seconds, r.received / r.seconds,
      static_cast<unsigned long>(r.sender_stats.tx_ring_full),
      static_cast<unsigned long>(r.receiver_stats.fill_ring_empty),
      static_cast<unsigned long>(r.receiver_stats.rx_ring_full));
}

TEST_F(AfXdpPortTest, NextHopIsAskedOncePerRunOfPacketsToOneDestination) {
  // The port remembers the last destination's next hop for kResolveEvery packets (a lookup per
  // packet was ~1 % of a sender's CPU); another destination, or a failed answer, asks again.
  pair_->RunIn(0, [&] {
    int calls = 0;
    bool fail = false;
    AfXdpPort::Options base;
    base.resolve_next_hop = [&](const IpAddress&) -> absl::StatusOr<MacAddress> {
      ++calls;
      if (fail) return absl::UnavailableError("no neighbour (test)");
      return *MacAddress::Parse("02:00:00:00:00:02");
    };
    absl::StatusOr<OpenedPort> opened = AfXdpPortOn(pair_->ifname(0), base)();
    ASSERT_TRUE(opened.ok()) << opened.status();
    PacketPort& port = *opened->port;
    const std::vector<std::byte> payload(64);
    TxPacket tx;
    tx.src_port = 49152;
    tx.dst_port = 4792;
    tx.payload = payload;
    const auto send = [&](const char* dst, int n) {
      tx.dst = *IpAddress::Parse(dst);
      for (int i = 0; i < n; ++i) {
        if (!port.Send(tx)) {
          port.Flush();
          ASSERT_TRUE(port.Send(tx)) << "packet " << i;
        }
        if (i % 32 == 31) port.Flush();
      }
      port.Flush();
    };
    send("198.18.0.2", 600);
    EXPECT_EQ(calls, 3) << "packets 1, 257 and 513 ask";
    send("198.18.0.3", 1);
    EXPECT_EQ(calls, 4) << "another destination asks";
    send("198.18.0.2", 1);
    EXPECT_EQ(calls, 5) << "only the last destination is remembered";
    fail = true;
    const uint64_t unroutable = port.stats().tx_unroutable;
    send("198.18.0.4", 2);
    EXPECT_EQ(calls, 7) << "a failed answer is not remembered";
    EXPECT_EQ(port.stats().tx_unroutable, unroutable + 2);
  });
}

TEST_F(AfXdpPortTest, ErrorsNameTheFix) {
  pair_->RunIn(0, [&] {
    auto missing = AfXdpPort::Open({.ifname = "nosuchif0"});
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(missing.status().message(), HasSubstr("ip link"));

    auto no_queue = AfXdpPort::Open({.ifname = pair_->ifname(0), .queue_id = 5});
    ASSERT_FALSE(no_queue.ok());
    EXPECT_THAT(no_queue.status().message(), HasSubstr("does not exist"));

    auto zero_copy =
        AfXdpPort::Open({.ifname = pair_->ifname(0), .zero_copy = AfXdpPort::ZeroCopy::kOn});
    ASSERT_FALSE(zero_copy.ok());
    EXPECT_THAT(zero_copy.status().message(), HasSubstr("zero-copy"));

    auto first = AfXdpPort::Open({.ifname = pair_->ifname(0)});
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_THAT((*first)->description(), HasSubstr("zero-copy refused"));
    AfXdpPort::Options o{.ifname = pair_->ifname(0)};
    o.busy_retry_budget = std::chrono::milliseconds(100);
    auto second = AfXdpPort::Open(o);
    ASSERT_FALSE(second.ok());
    EXPECT_THAT(second.status().message(), HasSubstr("busy"));
    first->reset();
    // Rebinding right after a close may meet EBUSY for ~50 ms: Open() retries through it.
    auto again = AfXdpPort::Open({.ifname = pair_->ifname(0)});
    EXPECT_TRUE(again.ok()) << again.status();
  });
}

TEST_F(AfXdpPortTest, UnresolvedNeighbourIsALossNotAStall) {
  ASSERT_EQ(pair_->Exec(0, {"ip", "neigh", "flush", "dev", pair_->ifname(0)}), absl::OkStatus());
  pair_->RunIn(0, [&] {
    auto port = AfXdpPort::Open({.ifname = pair_->ifname(0)});
    ASSERT_TRUE(port.ok()) << port.status();
    const std::vector<std::byte> data = ::metaroce::io::testing::TestPayload(1);
    TxPacket tx{.dst = *IpAddress::Parse("198.18.0.2"), .src_port = 49152, .dst_port = 4792,
                .payload = data};
    EXPECT_TRUE((*port)->Send(tx)) << "dropped, not refused: refusal would stall the sender";
    EXPECT_EQ((*port)->stats().tx_unroutable, 1u);
    EXPECT_EQ((*port)->stats().tx_packets, 0u);
    // Traffic through the kernel resolves it; the port retries after its negative cache time.
    ASSERT_EQ(pair_->Ping(0, "198.18.0.2"), absl::OkStatus());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_TRUE((*port)->Send(tx));
    EXPECT_EQ((*port)->stats().tx_packets, 1u);
  });
}

TEST(AfXdpPort_Memlock, RaiseMemlockLimit) {
  absl::StatusOr<uint64_t> limit = AfXdpPort::RaiseMemlockLimit();
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_GT(*limit, 0u);
}

}  // namespace
}  // namespace metaroce::io
