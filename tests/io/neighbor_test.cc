// lib/io/neighbor and lib/io/interface_info in two network namespaces joined by a veth pair
// (suite 'privileged'): route and neighbour lookups over rtnetlink, the "not resolved yet" error
// and its fix, interface facts.
#include "lib/io/neighbor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lib/io/interface_info.h"
#include "tests/io/netns_fixture.h"

namespace metaroce::io {
namespace {

using ::metaroce::io::testing::VethNamespacePair;
using ::testing::HasSubstr;

TEST(Neighbor, RouteThenNeighbourAfterTrafficResolvedIt) {
  auto pair = VethNamespacePair::Create({.queues = 2});
  ASSERT_TRUE(pair.ok()) << pair.status();
  MacAddress peer_mac;
  (*pair)->RunIn(1, [&] {
    absl::StatusOr<InterfaceInfo> info = ReadInterfaceInfo((*pair)->ifname(1));
    ASSERT_TRUE(info.ok()) << info.status();
    peer_mac = info->mac;
  });
  (*pair)->RunIn(0, [&] {
    absl::StatusOr<InterfaceInfo> info = ReadInterfaceInfo((*pair)->ifname(0));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->mtu, 1500u);
    EXPECT_EQ(info->rx_queue_count, 2u);
    ASSERT_EQ(info->ipv4.size(), 1u);
    EXPECT_EQ(info->ipv4[0].address.ToString(), "198.18.0.1");
    EXPECT_EQ(info->ipv4[0].prefix_length, 30);
    ASSERT_FALSE(info->ipv6.empty());
    EXPECT_FALSE(info->mac.is_zero());

    const IpAddress peer = *IpAddress::Parse("198.18.0.2");
    absl::StatusOr<NextHop> hop = LookUpRoute(peer);
    ASSERT_TRUE(hop.ok()) << hop.status();
    EXPECT_TRUE(hop->on_link);
    EXPECT_EQ(hop->gateway, peer);
    EXPECT_EQ(hop->ifindex, info->index);
    EXPECT_EQ(hop->preferred_source.ToString(), "198.18.0.1");

    absl::StatusOr<MacAddress> before = LookUpNeighbor(peer, info->index);
    ASSERT_FALSE(before.ok());
    EXPECT_EQ(before.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(before.status().message(), HasSubstr("ping -c1 198.18.0.2"));

    absl::Status ping = (*pair)->Ping(0, "198.18.0.2");
    ASSERT_TRUE(ping.ok()) << ping;
    absl::StatusOr<MacAddress> after = LookUpNeighbor(peer, info->index);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(*after, peer_mac);

    NeighborTable table({.ifindex = info->index});
    absl::StatusOr<MacAddress> cached = table.Resolve(peer);
    ASSERT_TRUE(cached.ok()) << cached.status();
    EXPECT_EQ(*cached, peer_mac);

    // IPv6 too (neighbour discovery through a ping).
    absl::Status ping6 = (*pair)->Ping(0, "fd00::2");
    ASSERT_TRUE(ping6.ok()) << ping6;
    absl::StatusOr<MacAddress> v6 = table.Resolve(*IpAddress::Parse("fd00::2"));
    ASSERT_TRUE(v6.ok()) << v6.status();
    EXPECT_EQ(*v6, peer_mac);
  });
}

TEST(Neighbor, GatewayRoutesAndMissingRoutes) {
  auto pair = VethNamespacePair::Create();
  ASSERT_TRUE(pair.ok()) << pair.status();
  ASSERT_TRUE((*pair)
                  ->Exec(0, {"ip", "route", "add", "198.19.0.0/24", "via", "198.18.0.2"})
                  .ok());
  (*pair)->RunIn(0, [&] {
    absl::StatusOr<NextHop> hop = LookUpRoute(*IpAddress::Parse("198.19.0.9"));
    ASSERT_TRUE(hop.ok()) << hop.status();
    EXPECT_FALSE(hop->on_link);
    EXPECT_EQ(hop->gateway.ToString(), "198.18.0.2");

    absl::StatusOr<NextHop> none = LookUpRoute(*IpAddress::Parse("203.0.113.1"));
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(none.status().message(), HasSubstr("no route"));

    NeighborTable other_interface({.ifindex = 1});  // lo
    absl::StatusOr<MacAddress> wrong = other_interface.Resolve(*IpAddress::Parse("198.18.0.2"));
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  });
}

}  // namespace
}  // namespace metaroce::io
