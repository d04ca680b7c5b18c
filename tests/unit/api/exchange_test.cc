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
  p.offer = 104857;
  p.private_data = {std::byte{1}, std::byte{2}, std::byte{3}};
  return p;
}

std::string Hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out.push_back(kDigits[static_cast<uint8_t>(b) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(b) & 0xf]);
  }
  return out;
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
  EXPECT_EQ(p.offer, q.offer);
  EXPECT_EQ(p.private_data, q.private_data);
}

TEST(Exchange_RoundTrip, RejectAndCloseCarryCodeAndReason) {
  for (ExchangeKind kind : {ExchangeKind::kReject, ExchangeKind::kClose}) {
    ExchangeMessage m;
    m.kind = kind;
    m.code = SetupCode::kIncompatible;
    m.reason = "MTUs differ";
    auto d = DecodeExchange(EncodeExchange(m));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->kind, kind);
    EXPECT_EQ(d->code, SetupCode::kIncompatible);
    EXPECT_EQ(d->reason, "MTUs differ");
  }
  // A reason longer than 1,024 bytes is cut there.
  ExchangeMessage m;
  m.kind = ExchangeKind::kReject;
  m.reason = std::string(2000, 'x');
  EXPECT_EQ(DecodeExchange(EncodeExchange(m))->reason.size(), kMaxReasonBytes);
}

// setup.md §7: a REJECT is read whatever its version (its layout is the same in every version);
// any other message of another version is not.
TEST(Exchange_Version, ARejectOfAnotherVersionIsReadOthersAreNot) {
  ExchangeMessage m;
  m.kind = ExchangeKind::kReject;
  m.code = SetupCode::kUnsupportedVersion;
  auto bytes = EncodeExchange(m);
  bytes[5] = std::byte{2};  // version 2
  auto d = DecodeExchange(bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->version, 2);
  EXPECT_EQ(d->code, SetupCode::kUnsupportedVersion);
  bytes = EncodeExchange(Request());
  bytes[5] = std::byte{2};
  EXPECT_EQ(DecodeExchange(bytes).status().code(), absl::StatusCode::kFailedPrecondition);
  // A code of a later revision is kept as it came.
  m.code = static_cast<SetupCode>(300);
  EXPECT_EQ(static_cast<uint16_t>(DecodeExchange(EncodeExchange(m))->code), 300);
  EXPECT_EQ(SetupCodeName(static_cast<SetupCode>(300)), "unknown");
}

// setup.md §4: reserved bytes are sent as 0 and ignored on receipt.
TEST(Exchange_Decode, IgnoresReservedBytes) {
  auto bytes = EncodeExchange(Request());
  bytes[7] = std::byte{0xff};   // header
  bytes[27] = std::byte{0xff};  // parameters
  auto d = DecodeExchange(bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->params.conn_id, 7u);
}

// The worked examples of docs/spec/setup.md §9, byte for byte.
TEST(Exchange_Examples, MatchTheSpecification) {
  ExchangeMessage request;
  request.kind = ExchangeKind::kRequest;
  ConnectionParameters& a = request.params;
  a.conn_id = 0x101;
  a.token = 0x8f14e45fceea167aull;
  a.path_count = 4;
  a.initial_ports = {49664, 49665, 49666, 49667};
  a.plane_addresses = {io::IpAddress::V4(0xc6120001), io::IpAddress::V4(0xc6130001)};
  a.mtu = 4096;
  a.max_send_queue = 1024;
  a.max_recv_queue = 1024;
  a.udp_port = 4792;
  a.offer = 0;
  EXPECT_EQ(Hex(EncodeExchange(request)),
            "4d5243580001010000000101" "8f14e45fceea167a" "0004" "02" "000000" "00" "00"
            "00000000" "00001000" "00000400" "00000400" "12b8" "0000" "00000000"
            "c200c201c202c203"
            "04" "c6120001000000000000000000000000"
            "04" "c6130001000000000000000000000000");
  ExchangeMessage reply = request;
  reply.kind = ExchangeKind::kReply;
  ConnectionParameters& b = reply.params;
  b.conn_id = 0x202;
  b.token = 0x45c48cce2e2d7fbdull;
  b.initial_ports = {51200, 51201, 51202, 51203};
  b.plane_addresses = {io::IpAddress::V4(0xc6120002), io::IpAddress::V4(0xc6130002)};
  b.offer = 262144;
  b.private_data = {std::byte{'h'}, std::byte{'i'}};
  EXPECT_EQ(Hex(EncodeExchange(reply)),
            "4d5243580001020000000202" "45c48cce2e2d7fbd" "0004" "02" "000000" "00" "00"
            "00000000" "00001000" "00000400" "00000400" "12b8" "0002" "00040000"
            "c800c801c802c803"
            "04" "c6120002000000000000000000000000"
            "04" "c6130002000000000000000000000000"
            "6869");
  ExchangeMessage confirm;
  confirm.kind = ExchangeKind::kConfirm;
  EXPECT_EQ(Hex(EncodeExchange(confirm)), "4d52435800010300");
  ExchangeMessage keepalive;
  keepalive.kind = ExchangeKind::kKeepalive;
  EXPECT_EQ(Hex(EncodeExchange(keepalive)), "4d52435800010600");
  ExchangeMessage reject;
  reject.kind = ExchangeKind::kReject;
  reject.code = SetupCode::kIncompatible;
  reject.reason = "MTUs differ";
  EXPECT_EQ(Hex(EncodeExchange(reject)),
            "4d52435800010400" "0004" "000b" "4d54557320646966666572");
  ExchangeMessage close;
  close.kind = ExchangeKind::kClose;
  close.code = SetupCode::kNone;
  EXPECT_EQ(Hex(EncodeExchange(close)), "4d52435800010500" "0000" "0000");
  // Both directions of the example: each side's packets carry the other's id and token.
  auto ra = DecodeExchange(EncodeExchange(request));
  auto rb = DecodeExchange(EncodeExchange(reply));
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_TRUE(CheckCompatible(ra->params, rb->params).ok());
  const core::ConnectionConfig client = MakeConnectionConfig(ra->params, rb->params, {});
  EXPECT_EQ(client.remote_conn_id, 0x202u);
  EXPECT_EQ(client.tx_token, 0x45c48cce2e2d7fbdull);
  EXPECT_EQ(client.initial_window_hint_bytes, 262144u);
  const core::ConnectionConfig server = MakeConnectionConfig(rb->params, ra->params, {});
  EXPECT_EQ(server.tx_token, 0x8f14e45fceea167aull);
  EXPECT_EQ(server.initial_window_hint_bytes, 0u);
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
  EXPECT_THAT(std::string(with([](auto& p) { p.initial_ports[2] = 50000; }).message()),
              HasSubstr("same source port"));
  // One plane is IPv4: its datagrams carry at most 65,507 bytes of UDP payload.
  EXPECT_THAT(std::string(with([](auto& p) { p.mtu = 65452; }).message()), HasSubstr("IPv4"));
  EXPECT_TRUE(DecodeExchange(EncodeExchange([] {
                ExchangeMessage m = Request();
                m.params.mtu = 65451;
                return m;
              }()))
                  .ok());
  EXPECT_THAT(std::string(with([](auto& p) { p.plane_addresses[0] = io::IpAddress{}; }).message()),
              HasSubstr("unspecified"));
  EXPECT_THAT(std::string(with([](auto& p) {
                            p.profile = core::TransportProfile::GoBackN();
                            p.profile.spray = core::SprayPolicy::kAllPaths;
                          }).message()),
              HasSubstr("none of the three"));
  EXPECT_THAT(std::string(with([](auto& p) {
                            p.profile = core::TransportProfile::ReorderBuffer(0);
                          }).message()),
              HasSubstr("reorder buffer"));
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
  // [M1] as responder, the peer's send window; the peer's offer starts our window.
  b.max_send_queue = 64;
  b.offer = 5000;
  c = MakeConnectionConfig(a, b, core::ConnectionConfig{});
  EXPECT_EQ(c.max_send_queue, 128u);
  EXPECT_EQ(c.peer_max_send_queue, 64u);
  EXPECT_EQ(c.initial_window_hint_bytes, 5000u);
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

}  // namespace
}  // namespace metaroce::api
