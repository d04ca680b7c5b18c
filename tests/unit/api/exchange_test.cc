#include "lib/api/exchange.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metaroce::api {
namespace {

using ::testing::HasSubstr;

ConnectionParameters Sample() {
  ConnectionParameters p;
  p.conn_id = 7;
  p.token = 0x0123456789abcdefull;
  p.path_count = 3;
  p.initial_ports = {50000, 50001, 50002};
  p.plane_addresses = {io::IpAddress::V4(0xc6120001), *io::IpAddress::Parse("fd00::1")};
  p.mtu = 4096;
  p.max_send_queue = 128;
  p.max_recv_queue = 256;
  p.udp_port = 4792;
  p.private_data = {std::byte{1}, std::byte{2}, std::byte{3}};
  return p;
}

ExchangeMessage Request() {
  ExchangeMessage m;
  m.kind = ExchangeKind::kRequest;
  m.params = Sample();
  return m;
}

TEST(Exchange_RoundTrip, RequestKeepsEveryField) {
  auto bytes = EncodeExchange(Request());
  auto m = DecodeExchange(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const ConnectionParameters& p = m->params;
  const ConnectionParameters q = Sample();
  EXPECT_EQ(m->kind, ExchangeKind::kRequest);
  EXPECT_EQ(p.conn_id, q.conn_id);
  EXPECT_EQ(p.token, q.token);
  EXPECT_EQ(p.path_count, q.path_count);
  EXPECT_EQ(p.initial_ports, q.initial_ports);
  EXPECT_EQ(p.plane_addresses, q.plane_addresses);
  EXPECT_EQ(p.mtu, q.mtu);
  EXPECT_EQ(p.max_send_queue, q.max_send_queue);
  EXPECT_EQ(p.max_recv_queue, q.max_recv_queue);
  EXPECT_EQ(p.udp_port, q.udp_port);
  EXPECT_EQ(p.private_data, q.private_data);
}

TEST(Exchange_RoundTrip, RejectCarriesReason) {
  ExchangeMessage m;
  m.kind = ExchangeKind::kReject;
  m.reason = "MTUs differ";
  auto d = DecodeExchange(EncodeExchange(m));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->reason, "MTUs differ");
}

TEST(Exchange_Decode, EveryTruncationIsRefused) {
  auto bytes = EncodeExchange(Request());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto d = DecodeExchange(std::span<const std::byte>(bytes.data(), n));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  bytes.push_back(std::byte{0});
  EXPECT_THAT(std::string(DecodeExchange(bytes).status().message()), HasSubstr("length"));
}

TEST(Exchange_Decode, RefusesBadFieldsWithReason) {
  auto with = [](auto mutate) {
    ExchangeMessage m = Request();
    mutate(m.params);
    return DecodeExchange(EncodeExchange(m)).status();
  };
  EXPECT_THAT(std::string(with([](auto& p) { p.token = 0; }).message()), HasSubstr("token"));
  EXPECT_THAT(std::string(with([](auto& p) { p.conn_id = 0; }).message()), HasSubstr("id 0"));
  EXPECT_THAT(std::string(with([](auto& p) { p.mtu = 10; }).message()), HasSubstr("mtu"));
  EXPECT_THAT(std::string(with([](auto& p) { p.initial_ports[1] = 4792; }).message()),
              HasSubstr("source port"));
  auto bytes = EncodeExchange(Request());
  bytes[0] = std::byte{'X'};
  EXPECT_THAT(std::string(DecodeExchange(bytes).status().message()), HasSubstr("magic"));
  bytes = EncodeExchange(Request());
  bytes[5] = std::byte{9};  // version 9
  EXPECT_EQ(DecodeExchange(bytes).status().code(), absl::StatusCode::kFailedPrecondition);
  bytes = EncodeExchange(Request());
  bytes[6] = std::byte{77};  // kind
  EXPECT_THAT(std::string(DecodeExchange(bytes).status().message()), HasSubstr("kind"));
}

TEST(Exchange_Compatible, NamesTheFirstDifference) {
  ConnectionParameters a = Sample(), b = Sample();
  EXPECT_TRUE(CheckCompatible(a, b).ok());
  b.mtu = 1024;
  EXPECT_THAT(std::string(CheckCompatible(a, b).message()), HasSubstr("MTUs differ"));
  b = Sample();
  b.path_count = 4;
  EXPECT_THAT(std::string(CheckCompatible(a, b).message()), HasSubstr("path counts"));
  b = Sample();
  b.profile = core::TransportProfile::GoBackN();
  EXPECT_THAT(std::string(CheckCompatible(a, b).message()), HasSubstr("transport profiles"));
  b = Sample();
  b.plane_addresses[1] = io::IpAddress::V4(1);
  EXPECT_THAT(std::string(CheckCompatible(a, b).message()), HasSubstr("plane 1"));
}

TEST(Exchange_Config, CrossesIdsAndTokens) {
  ConnectionParameters a = Sample(), b = Sample();
  b.conn_id = 9;
  b.token = 0x55;
  core::ConnectionConfig c = MakeConnectionConfig(a, b, core::ConnectionConfig{});
  EXPECT_EQ(c.local_conn_id, 7u);
  EXPECT_EQ(c.remote_conn_id, 9u);
  EXPECT_EQ(c.rx_token, a.token);
  EXPECT_EQ(c.tx_token, 0x55u);
  EXPECT_EQ(c.plane_count, 2);
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

}  // namespace
}  // namespace metaroce::api
