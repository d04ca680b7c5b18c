// ExchangeSocket (lib/api/exchange_socket.h): which addresses a listener answers on, and the
// framing of its messages, over the loopback interface (no root needed).
#include "lib/api/exchange_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace metaroce::api {
namespace {

// True when this host can bind ::1 (a loopback with IPv6); the IPv6 cases skip otherwise.
bool HostHasIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Connects to host at the listener's port, accepts, and carries one message each way: the
// listener really answers on that address.
void ExpectReachable(ExchangeSocket& listener, const std::string& host) {
  SCOPED_TRACE(host);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<ExchangeSocket> client =
      ExchangeSocket::Connect(host, listener.local_port(), deadline);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<ExchangeSocket> server = listener.Accept(deadline);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<std::byte> ping = {std::byte{1}, std::byte{2}, std::byte{3}};
  ASSERT_TRUE(client->SendMessage(ping, deadline).ok());
  absl::StatusOr<std::vector<std::byte>> got = server->ReceiveMessage(deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, ping);
  ASSERT_TRUE(server->SendMessage(ping, deadline).ok());
  got = client->ReceiveMessage(deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, ping);
}

TEST(ExchangeSocket_Listen, EmptyAddressIsDualStack) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "no ::1 on this host";
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_NE(listener->local_port(), 0);
  ExpectReachable(*listener, "::1");
  ExpectReachable(*listener, "127.0.0.1");
}

TEST(ExchangeSocket_Listen, DoubleColonIsDualStack) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "no ::1 on this host";
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("::", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ExpectReachable(*listener, "127.0.0.1");
  ExpectReachable(*listener, "::1");
}

TEST(ExchangeSocket_Listen, Ipv4WildcardIsIpv4Only) {
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("0.0.0.0", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ExpectReachable(*listener, "127.0.0.1");
  if (!HostHasIpv6Loopback()) return;
  absl::StatusOr<ExchangeSocket> client = ExchangeSocket::Connect(
      "::1", listener->local_port(), absl::Now() + absl::Seconds(10));
  EXPECT_FALSE(client.ok()) << "0.0.0.0 is every IPv4 address, not ::1";
}

TEST(ExchangeSocket_Listen, SpecificIpv6Address) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "no ::1 on this host";
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("::1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ExpectReachable(*listener, "::1");
}

TEST(ExchangeSocket_Listen, RefusesANameWithTheFix) {
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("localhost", 0);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(listener.status().message().find("numeric"), absl::string_view::npos)
      << listener.status();
}

TEST(ExchangeSocket_Listen, PortInUseIsNamed) {
  absl::StatusOr<ExchangeSocket> first = ExchangeSocket::Listen("", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<ExchangeSocket> second = ExchangeSocket::Listen("", first->local_port());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("another listener"), absl::string_view::npos)
      << second.status();
}

TEST(ExchangeSocket_Accept, PeerNameOfAnIpv4ClientOnADualStackListener) {
  absl::StatusOr<ExchangeSocket> listener = ExchangeSocket::Listen("", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<ExchangeSocket> client =
      ExchangeSocket::Connect("127.0.0.1", listener->local_port(), deadline);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<ExchangeSocket> server = listener->Accept(deadline);
  ASSERT_TRUE(server.ok()) << server.status();
  // Named as the IPv4 host it is, not ::ffff:127.0.0.1 (the daemon records peers by it).
  EXPECT_EQ(server->peer_name().rfind("127.0.0.1:", 0), 0u) << server->peer_name();
}

}  // namespace
}  // namespace metaroce::api
