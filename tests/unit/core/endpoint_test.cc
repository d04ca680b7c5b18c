// Endpoint: the front door for raw datagrams (parse, count malformed by reason, demultiplex by
// dest_conn), connection lifetime, and timers across connections.
#include "lib/core/endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/recording_sink.h"

namespace metaroce::core {
namespace {

using ::metaroce::testing::RecordingSink;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr uint64_t kRxToken = 0x0123456789abcdefull;

ConnectionConfig Config(uint32_t local_id) {
  ConnectionConfig c;
  c.local_conn_id = local_id;
  c.remote_conn_id = 100 + local_id;
  c.rx_token = kRxToken;
  c.tx_token = 0xfeed;
  c.path_count = 2;
  c.mtu = 1024;
  return c;
}

std::vector<std::byte> Serialize(const wire::Packet& p) {
  std::vector<std::byte> out(wire::kMaxHeadersSize);
  out.resize(wire::SerializeHeaders(p, out));
  out.insert(out.end(), p.payload.begin(), p.payload.end());
  return out;
}

class EndpointTest : public ::testing::Test {
 protected:
  EndpointTest() : ep_(sink_), region_(4096, std::byte{0}) {
    mr_ = *ep_.memory().Register(region_.data(), region_.size(),
                                 access::kLocalWrite | access::kRemoteWrite);
    payload_.assign(100, std::byte{0x5a});
  }

  // A valid one-packet Write of 100 bytes to connection `conn` (it would be placed and ACKed).
  wire::Packet WritePacket(uint32_t conn = 1) const {
    wire::Packet p;
    p.opcode = wire::Opcode::kWrite;
    p.flags = wire::flags::kAckRequest;
    p.dest_conn = conn;
    p.token = kRxToken;
    p.data.msg_len = 100;
    p.data.rkey = mr_.rkey;
    p.data.remote_addr = mr_.addr;
    p.payload = payload_;
    return p;
  }
  wire::Packet AckPacket() const {
    wire::Packet p;
    p.opcode = wire::Opcode::kAck;
    p.dest_conn = 1;
    p.token = kRxToken;
    return p;
  }
  bool RegionUntouched() const {
    return std::all_of(region_.begin(), region_.end(), [](std::byte b) { return b == std::byte{0}; });
  }

  RecordingSink sink_;
  Endpoint ep_;
  std::vector<std::byte> region_;
  MemoryRegion mr_;
  std::vector<std::byte> payload_;
};

using Endpoint_CreateConnection = EndpointTest;
using Endpoint_DestroyConnection = EndpointTest;
using Endpoint_OnDatagram = EndpointTest;

TEST_F(Endpoint_CreateConnection, RefusesInvalidConfigAndDuplicateId) {
  ConnectionConfig bad = Config(1);
  bad.path_count = 0;
  EXPECT_EQ(ep_.CreateConnection(bad).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  const absl::Status dup = ep_.CreateConnection(Config(1)).status();
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(dup.message()), ::testing::HasSubstr("connection id 1"));
  EXPECT_EQ(ep_.connections().size(), 1u);
}

TEST_F(Endpoint_CreateConnection, FindsConnectionsByLocalIdInIdOrder) {
  Connection* c7 = *ep_.CreateConnection(Config(7));
  Connection* c3 = *ep_.CreateConnection(Config(3));
  EXPECT_EQ(ep_.Find(7), c7);
  EXPECT_EQ(ep_.Find(3), c3);
  EXPECT_EQ(ep_.Find(5), nullptr);
  std::vector<uint32_t> ids;
  for (const auto& [id, conn] : ep_.connections()) ids.push_back(id);
  EXPECT_THAT(ids, ElementsAre(3, 7));
}

TEST_F(Endpoint_DestroyConnection, AnIdUsedAgainFindsTheNewConnection) {
  Connection* first = *ep_.CreateConnection(Config(1));
  EXPECT_EQ(ep_.Find(1), first);  // Find remembers it
  ASSERT_TRUE(ep_.DestroyConnection(1).ok());
  EXPECT_EQ(ep_.Find(1), nullptr);
  Connection* second = *ep_.CreateConnection(Config(1));
  Connection* other = *ep_.CreateConnection(Config(2));
  EXPECT_EQ(ep_.Find(2), other);
  EXPECT_EQ(ep_.Find(1), second);
  EXPECT_EQ(ep_.Find(1), second);
}

TEST_F(Endpoint_DestroyConnection, RemovesItAndLaterDatagramsAreUnknown) {
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  EXPECT_TRUE(ep_.DestroyConnection(1).ok());
  EXPECT_EQ(ep_.Find(1), nullptr);
  EXPECT_EQ(ep_.DestroyConnection(1).code(), absl::StatusCode::kNotFound);
  ep_.OnDatagram(Instant{}, Serialize(WritePacket()), RxMeta{});
  EXPECT_EQ(ep_.counters().unknown_connection, 1u);
  EXPECT_THAT(sink_.packets(), IsEmpty());
  // The id may be used again.
  EXPECT_TRUE(ep_.CreateConnection(Config(1)).ok());
}

TEST_F(Endpoint_OnDatagram, ValidDatagramReachesItsConnection) {
  Connection* c1 = *ep_.CreateConnection(Config(1));
  Connection* c2 = *ep_.CreateConnection(Config(2));
  ep_.OnDatagram(Instant{}, Serialize(WritePacket(2)), RxMeta{.src_port = 50001});
  EXPECT_EQ(c1->counters().rcvd_pkts, 0u);
  EXPECT_EQ(c2->counters().rcvd_pkts, 1u);
  ASSERT_EQ(sink_.packets().size(), 1u);
  EXPECT_EQ(sink_.packets()[0].meta.conn_id, 2u);
  EXPECT_EQ(sink_.packets()[0].packet.dest_conn, 102u);
  EXPECT_EQ(sink_.packets()[0].meta.src_port, 50001);
  EXPECT_EQ(sink_.packets()[0].meta.dst_port, wire::kDefaultUdpPort);
  EXPECT_EQ(ep_.counters().rx_datagrams, 1u);
  EXPECT_EQ(ep_.counters().malformed, 0u);
  EXPECT_FALSE(RegionUntouched());
}

TEST_F(Endpoint_OnDatagram, PlacementCheckSeesEveryPlacedByteWhereItLanded) {
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  std::vector<std::pair<uint32_t, std::vector<std::byte>>> seen;
  ep_.set_placement_check([&](Connection& c, uint32_t msg_seq, uint32_t offset,
                              std::span<const std::byte> placed) {
    EXPECT_EQ(c.local_id(), 1u);
    EXPECT_EQ(msg_seq, 0u);
    EXPECT_EQ(placed.data(), region_.data());  // remote_addr = the region's start
    seen.emplace_back(offset, std::vector<std::byte>(placed.begin(), placed.end()));
  });
  ep_.OnDatagram(Instant{}, Serialize(WritePacket()), RxMeta{});
  ep_.OnDatagram(Instant{}, Serialize(WritePacket()), RxMeta{});  // a duplicate: not placed again
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, 0u);
  EXPECT_EQ(seen[0].second, payload_);
}

TEST_F(Endpoint_OnDatagram, MalformedAreCountedByReasonAndNeverReachAConnection) {
  Connection* conn = *ep_.CreateConnection(Config(1));
  struct Case {
    wire::ParseError reason;
    std::vector<std::byte> bytes;
  };
  std::vector<Case> cases;
  {
    std::vector<std::byte> b = Serialize(WritePacket());
    b.resize(10);  // shorter than the base header
    cases.push_back({wire::ParseError::kTruncated, b});
  }
  {
    std::vector<std::byte> b = Serialize(WritePacket());
    b[0] = std::byte{2};
    cases.push_back({wire::ParseError::kBadVersion, b});
  }
  {
    std::vector<std::byte> b = Serialize(WritePacket());
    b[1] = std::byte{0x7f};
    cases.push_back({wire::ParseError::kBadOpcode, b});
  }
  {
    std::vector<std::byte> b = Serialize(WritePacket());
    b.resize(b.size() - 50);  // payload_len says 100, 50 arrived
    cases.push_back({wire::ParseError::kLengthMismatch, b});
  }
  {
    wire::Packet p = WritePacket();
    p.data.msg_len = 99;  // offset 0 + 100 bytes > msg_len
    cases.push_back({wire::ParseError::kBadRange, Serialize(p)});
  }
  {
    std::vector<std::byte> b = Serialize(AckPacket());
    b[sizeof(wire::BaseHeader) + offsetof(wire::AckHeader, syndrome)] = std::byte{6};
    cases.push_back({wire::ParseError::kBadSyndrome, b});
  }
  static_assert(static_cast<size_t>(wire::ParseError::kCount) == 7);

  for (const Case& c : cases) ep_.OnDatagram(Instant{}, c.bytes, RxMeta{});

  const EndpointCounters& k = ep_.counters();
  EXPECT_EQ(k.rx_datagrams, cases.size());
  EXPECT_EQ(k.malformed, cases.size());
  EXPECT_EQ(k.unknown_connection, 0u);
  for (const Case& c : cases) {
    EXPECT_EQ(k.malformed_by_reason[static_cast<size_t>(c.reason)], 1u)
        << wire::ParseErrorName(c.reason);
  }
  EXPECT_EQ(k.malformed_by_reason[static_cast<size_t>(wire::ParseError::kNone)], 0u);
  // Nothing reached the connection: no state, no answer, no memory written.
  EXPECT_EQ(conn->counters().rcvd_pkts, 0u);
  EXPECT_EQ(conn->counters().acks_rcvd, 0u);
  EXPECT_EQ(conn->counters().acks_sent, 0u);
  EXPECT_EQ(conn->counters().bad_token, 0u);
  EXPECT_THAT(sink_.packets(), IsEmpty());
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(Endpoint_OnDatagram, UnknownDestinationIsCounted) {
  Connection* conn = *ep_.CreateConnection(Config(1));
  ep_.OnDatagram(Instant{}, Serialize(WritePacket(9)), RxMeta{});
  EXPECT_EQ(ep_.counters().unknown_connection, 1u);
  EXPECT_EQ(ep_.counters().malformed, 0u);
  EXPECT_EQ(conn->counters().rcvd_pkts, 0u);
  EXPECT_THAT(sink_.packets(), IsEmpty());
  EXPECT_TRUE(RegionUntouched());
}

TEST_F(Endpoint_OnDatagram, ConnectionChecksTokenThenPathBeforeAnyState) {
  Connection* conn = *ep_.CreateConnection(Config(1));
  wire::Packet wrong_token = WritePacket();
  wrong_token.token = kRxToken ^ 1;
  wire::Packet wrong_path = WritePacket();
  wrong_path.path_id = 2;  // path_count is 2
  ep_.OnDatagram(Instant{}, Serialize(wrong_token), RxMeta{});
  ep_.OnDatagram(Instant{}, Serialize(wrong_path), RxMeta{});
  EXPECT_EQ(conn->counters().bad_token, 1u);
  EXPECT_EQ(conn->counters().bad_path, 1u);
  EXPECT_EQ(conn->counters().rcvd_pkts, 0u);
  EXPECT_THAT(sink_.packets(), IsEmpty());
  EXPECT_TRUE(RegionUntouched());
}

class EndpointTimerTest : public EndpointTest {
 protected:
  // Posts a one-packet Write on connection `id` at `now`; its PTO becomes the deadline.
  void PostWrite(uint32_t id, Instant now) {
    SendWorkRequest wr;
    wr.opcode = WrOpcode::kWrite;
    wr.local = {mr_.addr, 64, mr_.lkey};
    wr.remote_addr = 0x1000;
    wr.rkey = 1;
    ASSERT_TRUE(ep_.Find(id)->PostSend(now, wr).ok());
  }
  // The ACK of connection `id`'s first packet (PSN 0 of path 0).
  void AckFirstPacket(uint32_t id, Instant now) {
    wire::Packet p = AckPacket();
    p.dest_conn = id;
    p.ack.cum_psn = 1;
    p.ack.ack_psn = 0;
    ep_.OnDatagram(now, Serialize(p), RxMeta{});
  }
  std::vector<uint32_t> TakeReadyIds() {
    std::vector<Connection*> ready;
    ep_.TakeReady(&ready);
    std::vector<uint32_t> ids;
    for (Connection* c : ready) ids.push_back(c->local_id());
    return ids;
  }
};

using Endpoint_NextDeadline = EndpointTimerTest;
using Endpoint_OnTimer = EndpointTimerTest;
using Endpoint_TakeReady = EndpointTimerTest;

TEST_F(Endpoint_NextDeadline, IsTheMinimumOverConnections) {
  EXPECT_EQ(ep_.NextDeadline(), kNever);
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(2)).ok());
  EXPECT_EQ(ep_.NextDeadline(), kNever);  // idle connections have no timer
  PostWrite(2, Instant{} + 10 * kUs);
  const Instant d2 = ep_.Find(2)->NextDeadline();
  ASSERT_NE(d2, kNever);
  EXPECT_EQ(ep_.NextDeadline(), d2);
  PostWrite(1, Instant{} + 30 * kUs);
  const Instant d1 = ep_.Find(1)->NextDeadline();
  EXPECT_GT(d1, d2);
  EXPECT_EQ(ep_.NextDeadline(), d2);
}

TEST_F(Endpoint_OnTimer, RunsOnlyConnectionsThatAreDue) {
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(2)).ok());
  PostWrite(1, Instant{});
  PostWrite(2, Instant{} + 10 * kUs);
  sink_.Clear();
  const Instant d1 = ep_.Find(1)->NextDeadline();
  const Instant d2 = ep_.Find(2)->NextDeadline();
  ASSERT_LT(d1, d2);

  ep_.OnTimer(d1 + Duration(-1));
  EXPECT_THAT(sink_.packets(), IsEmpty());
  ep_.OnTimer(d1);  // connection 1's tail-loss probe; connection 2 is not due
  ASSERT_EQ(sink_.packets().size(), 1u);
  EXPECT_EQ(sink_.packets()[0].meta.conn_id, 1u);
  EXPECT_TRUE(sink_.packets()[0].packet.flags & wire::flags::kRetransmit);
  EXPECT_EQ(ep_.Find(2)->counters().retransmits, 0u);
  EXPECT_EQ(ep_.Find(2)->NextDeadline(), d2);
  sink_.Clear();
  ep_.OnTimer(d2);
  ASSERT_EQ(sink_.packets().size(), 1u);
  EXPECT_EQ(sink_.packets()[0].meta.conn_id, 2u);
}

// The endpoint never walks its connections: it follows each one's deadline as the connection
// announces it, including changes made by calls straight on the connection (PostSend).
TEST_F(Endpoint_NextDeadline, FollowsEachConnectionAsItsDeadlineMovesAndGoes) {
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(2)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(3)).ok());
  PostWrite(1, Instant{});
  PostWrite(2, Instant{} + 10 * kUs);
  const Instant d1 = ep_.Find(1)->NextDeadline();
  const Instant d2 = ep_.Find(2)->NextDeadline();
  ASSERT_LT(d1, d2);
  EXPECT_EQ(ep_.NextDeadline(), d1);
  AckFirstPacket(1, Instant{} + 5 * kUs);  // connection 1 has nothing left: no timer
  EXPECT_EQ(ep_.Find(1)->NextDeadline(), kNever);
  EXPECT_EQ(ep_.NextDeadline(), d2);
  ASSERT_TRUE(ep_.DestroyConnection(2).ok());
  EXPECT_EQ(ep_.NextDeadline(), kNever);
  PostWrite(3, Instant{} + 20 * kUs);
  EXPECT_EQ(ep_.NextDeadline(), ep_.Find(3)->NextDeadline());
  EXPECT_NE(ep_.NextDeadline(), kNever);
}

// Many connections, one due: only it runs; the others keep their deadlines.
TEST_F(Endpoint_OnTimer, AmongThousandsRunsTheDueOneAndKeepsTheRest) {
  for (uint32_t id = 1; id <= 2000; ++id) {
    ASSERT_TRUE(ep_.CreateConnection(Config(id)).ok());
    PostWrite(id, Instant{} + id * kUs);
  }
  sink_.Clear();
  const Instant d7 = ep_.Find(7)->NextDeadline();
  ep_.OnTimer(d7);
  ASSERT_EQ(sink_.packets().size(), 7u);  // connections 1..7: one tail-loss probe each
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(sink_.packets()[i].meta.conn_id, i + 1);
  EXPECT_GT(ep_.NextDeadline(), d7);
  EXPECT_EQ(ep_.NextDeadline(), ep_.Find(8)->NextDeadline());
}

TEST_F(Endpoint_TakeReady, ListsConnectionsWithOutputOnceAndAgainWhenOutputIsLeftBehind) {
  ASSERT_TRUE(ep_.CreateConnection(Config(1)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(2)).ok());
  ASSERT_TRUE(ep_.CreateConnection(Config(3)).ok());
  EXPECT_TRUE(TakeReadyIds().empty());
  for (uint32_t id : {2u, 1u}) {
    PostWrite(id, Instant{});
    AckFirstPacket(id, Instant{} + 5 * kUs);  // a signaled Write completes
  }
  EXPECT_EQ(TakeReadyIds(), (std::vector<uint32_t>{2, 1}));  // in order of announcement
  EXPECT_TRUE(TakeReadyIds().empty());                        // announced once
  // Connection 1 polled dry; connection 2 taken and not polled: neither is listed again.
  Completion c[4];
  EXPECT_EQ(ep_.Find(1)->PollCompletions(c), 1u);
  EXPECT_TRUE(TakeReadyIds().empty());
  // New output on 1 is announced; 2 gets a second completion and is polled one at a time.
  PostWrite(1, Instant{} + 10 * kUs);
  wire::Packet ack = AckPacket();
  ack.ack.cum_psn = 1;  // path 1's PSN 0
  ack.path_id = 1;
  ep_.OnDatagram(Instant{} + 15 * kUs, Serialize(ack), RxMeta{});
  PostWrite(2, Instant{} + 10 * kUs);
  ack.dest_conn = 2;
  ep_.OnDatagram(Instant{} + 15 * kUs, Serialize(ack), RxMeta{});
  EXPECT_EQ(TakeReadyIds(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(ep_.Find(2)->PollCompletions(std::span<Completion>(c, 1)), 1u);
  EXPECT_EQ(TakeReadyIds(), (std::vector<uint32_t>{2}));  // one left behind
  // A destroyed connection is never listed.
  EXPECT_EQ(ep_.Find(2)->PollCompletions(std::span<Completion>(c, 1)), 1u);
  PostWrite(3, Instant{});
  AckFirstPacket(3, Instant{} + 5 * kUs);
  ASSERT_TRUE(ep_.DestroyConnection(3).ok());
  EXPECT_TRUE(TakeReadyIds().empty());
}

}  // namespace
}  // namespace metaroce::core
