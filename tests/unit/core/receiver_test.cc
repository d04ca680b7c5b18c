// Receiver (the responder half of Connection): per-path PSN windows and the ACK policy, checks
// before memory is touched, placement policies and NAKs. Driven through Connection::OnPacket with
// hand-built data packets; assertions read the ACKs the connection emits, one line per packet.
// ReceiverPath is tested directly.
#include "lib/core/receiver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/core/connection.h"
#include "tests/support/recording_sink.h"

namespace metaroce::core {
namespace {

using ::metaroce::testing::RecordedPacket;
using ::metaroce::testing::RecordingSink;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr uint32_t kMtu = 1024;
constexpr uint64_t kRxToken = 0xa1a2a3a4a5a6a7a8ull;
constexpr uint64_t kTxToken = 0xb1b2b3b4b5b6b7b8ull;
constexpr size_t kRegionBytes = 16 * 1024;
constexpr size_t kGuardBytes = 256;

Instant At(Duration d) { return Instant{} + d; }

// ---------------------------------------------------------------------------------------------
// ReceiverPath

TEST(ReceiverPath_MarkReceived, InOrderAdvancesOverEveryContiguousArrival) {
  ReceiverPath p;
  p.MarkReceived(2);
  p.MarkReceived(3);
  p.MarkReceived(5);
  EXPECT_EQ(p.cum_psn, 0u);
  EXPECT_TRUE(p.bitmap.Test(1) && p.bitmap.Test(2) && p.bitmap.Test(4));
  p.MarkReceived(1);
  EXPECT_EQ(p.cum_psn, 0u);
  p.MarkReceived(0);
  EXPECT_EQ(p.cum_psn, 4u);  // 0..3 arrived
  EXPECT_TRUE(p.bitmap.Test(0));  // PSN 5 = cum + 1 + 0
  EXPECT_EQ(p.bitmap.HighestPlusOne(), 1u);
  p.MarkReceived(4);
  EXPECT_EQ(p.cum_psn, 6u);
  EXPECT_TRUE(p.bitmap.Empty());
}

TEST(ReceiverPath_MarkReceived, FillingTheWholeWindowMovesOverIt) {
  ReceiverPath p;
  for (uint32_t psn = 1; psn <= wire::kSackBits; ++psn) p.MarkReceived(psn);
  EXPECT_EQ(p.bitmap.HighestPlusOne(), wire::kSackBits);
  p.MarkReceived(0);
  EXPECT_EQ(p.cum_psn, wire::kSackBits + 1);
  EXPECT_TRUE(p.bitmap.Empty());
}

TEST(ReceiverPath_MarkReceived, EdgeOfTheWindowIsBit255) {
  ReceiverPath p;
  p.MarkReceived(256);
  EXPECT_TRUE(p.bitmap.Test(255));
  EXPECT_EQ(p.bitmap.HighestPlusOne(), 256u);
}

TEST(ReceiverPath_AdvanceTo, SkipsAbandonedPsnsAndKeepsLaterArrivals) {
  ReceiverPath p;
  p.MarkReceived(7);
  p.MarkReceived(9);
  p.AdvanceTo(5);
  EXPECT_EQ(p.cum_psn, 5u);
  EXPECT_TRUE(p.bitmap.Test(1));  // 7
  EXPECT_TRUE(p.bitmap.Test(3));  // 9
  p.AdvanceTo(7);  // 7 already arrived: the cumulative point moves over it
  EXPECT_EQ(p.cum_psn, 8u);
  EXPECT_TRUE(p.bitmap.Test(0));  // 9
  p.AdvanceTo(8);
  EXPECT_EQ(p.cum_psn, 8u);
  p.AdvanceTo(3);  // behind: no change
  EXPECT_EQ(p.cum_psn, 8u);
  p.AdvanceTo(1000);  // far ahead: the whole bitmap is abandoned
  EXPECT_EQ(p.cum_psn, 1000u);
  EXPECT_TRUE(p.bitmap.Empty());
}

TEST(ReceiverPath_AdvanceTo, WrapsAroundTwoToThe32) {
  ReceiverPath p;
  p.cum_psn = 0xfffffff0u;
  p.MarkReceived(0xfffffff2u);
  p.MarkReceived(0x00000001u);  // 17 ahead, across the wrap
  EXPECT_TRUE(p.bitmap.Test(1));
  EXPECT_TRUE(p.bitmap.Test(16));
  p.AdvanceTo(0xfffffffeu);
  EXPECT_EQ(p.cum_psn, 0xfffffffeu);
  EXPECT_TRUE(p.bitmap.Test(2));  // PSN 1
  p.MarkReceived(0xfffffffeu);
  p.MarkReceived(0xffffffffu);
  p.MarkReceived(0u);
  EXPECT_EQ(p.cum_psn, 2u);  // 0xfffffffe, 0xffffffff, 0, 1
  EXPECT_TRUE(p.bitmap.Empty());
  p.AdvanceTo(0xfffffff0u);  // behind across the wrap: no change
  EXPECT_EQ(p.cum_psn, 2u);
}

// ---------------------------------------------------------------------------------------------
// Receiver, through a Connection acting as responder.

ConnectionConfig ResponderConfig() {
  ConnectionConfig c;
  c.local_conn_id = 1;
  c.remote_conn_id = 2;
  c.rx_token = kRxToken;
  c.tx_token = kTxToken;
  c.path_count = 4;
  c.mtu = kMtu;
  c.ack_every = 2;
  c.delayed_ack = 4 * kUs;
  c.rnr_delay = 20 * kUs;
  return c;
}

// One line per emitted packet; ACKs list the PSNs their SACK bitmap reports.
std::string Line(const RecordedPacket& r) {
  std::string s = testing::Describe(r.packet);
  if (r.packet.opcode == wire::Opcode::kAck && !r.packet.ack.sack.Empty()) {
    s += " sack";
    for (uint32_t k = 0; k < wire::kSackBits; ++k) {
      if (r.packet.ack.sack.Test(k)) s += " " + std::to_string(r.packet.ack.cum_psn + 1 + k);
    }
  }
  return s;
}

// A responder connection with one registered region surrounded by guard bytes that no packet
// may touch, and a source pattern to carry in data packets.
struct Responder {
  explicit Responder(ConnectionConfig c = ResponderConfig(), ReceiveBudget* budget = nullptr)
      : storage(kRegionBytes + 2 * kGuardBytes, std::byte{0}),
        src(kRegionBytes),
        conn(c, memory, sink, nullptr, budget) {
    region = *memory.Register(storage.data() + kGuardBytes, kRegionBytes,
                              access::kLocalWrite | access::kRemoteWrite);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 7 + 1) & 0xff);
  }

  // Packet `offset` of a message of `msg_len` bytes, payload from src[offset..]. Writes target
  // region + addr_base + offset.
  wire::Packet Data(wire::Opcode op, uint16_t path, uint32_t psn, uint32_t msg_seq,
                    uint32_t offset, uint32_t msg_len, uint16_t flags = 0,
                    uint64_t addr_base = 0) const {
    wire::Packet p;
    p.opcode = op;
    p.flags = flags;
    p.dest_conn = 1;
    p.path_id = path;
    p.psn = psn;
    p.token = kRxToken;
    p.data.msg_seq = msg_seq;
    p.data.msg_len = msg_len;
    p.data.offset = offset;
    if (wire::IsWrite(op)) {
      p.data.rkey = region.rkey;
      p.data.remote_addr = region.addr + addr_base + offset;
    }
    p.payload = std::span<const std::byte>(src).subspan(offset,
                                                        std::min(kMtu, msg_len - offset));
    return p;
  }
  wire::Packet Write(uint16_t path, uint32_t psn, uint32_t msg_seq, uint32_t offset,
                     uint32_t msg_len, uint16_t flags = 0, uint64_t addr_base = 0) const {
    return Data(wire::Opcode::kWrite, path, psn, msg_seq, offset, msg_len, flags, addr_base);
  }
  // A filler as the requester sends it: no payload, msg_len = offset.
  wire::Packet Filler(uint16_t path, uint32_t psn, uint32_t msg_seq = 0) const {
    wire::Packet p;
    p.opcode = wire::Opcode::kWrite;
    p.flags = wire::flags::kFiller;
    p.dest_conn = 1;
    p.path_id = path;
    p.psn = psn;
    p.token = kRxToken;
    p.data.msg_seq = msg_seq;
    return p;
  }
  wire::Packet Probe(uint16_t path, uint32_t psn) const {
    wire::Packet p;
    p.opcode = wire::Opcode::kProbe;
    p.dest_conn = 1;
    p.path_id = path;
    p.psn = psn;
    p.token = kRxToken;
    return p;
  }

  void Feed(Instant now, const wire::Packet& p, bool ce = false) {
    conn.OnPacket(now, p, RxMeta{.src_port = static_cast<uint16_t>(50000 + p.path_id),
                                 .dst_port = wire::kDefaultUdpPort,
                                 .ce = ce});
  }
  std::vector<std::string> Log() {
    std::vector<std::string> out;
    for (const RecordedPacket& r : sink.packets()) out.push_back(Line(r));
    sink.Clear();
    return out;
  }
  std::vector<Completion> Completions() {
    std::vector<Completion> out(16);
    out.resize(conn.PollCompletions(out));
    return out;
  }
  std::span<std::byte> Dst() { return {storage.data() + kGuardBytes, kRegionBytes}; }
  bool Untouched() const {
    return std::all_of(storage.begin(), storage.end(), [](std::byte b) { return b == std::byte{0}; });
  }
  bool Placed(uint64_t addr_base, uint32_t offset, uint32_t len) {
    return std::equal(src.begin() + offset, src.begin() + offset + len,
                      Dst().begin() + addr_base + offset);
  }

  RecordingSink sink;
  MemoryTable memory;
  std::vector<std::byte> storage;
  std::vector<std::byte> src;
  MemoryRegion region;
  Connection conn;
};

TEST(Receiver_AckPolicy, OneAckPerAckEveryInOrderPackets) {
  Responder r;
  const uint32_t len = 4 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, len));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.Feed(At(1 * kUs), r.Write(0, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 2 ack_psn 1"));
  r.Feed(At(2 * kUs), r.Write(0, 2, 0, 2048, len));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.Feed(At(3 * kUs), r.Write(0, 3, 0, 3072, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 4 ack_psn 3"));
  EXPECT_EQ(r.conn.NextDeadline(), kNever);  // everything acknowledged: no delayed ACK pending
  EXPECT_TRUE(r.Placed(0, 0, len));
  EXPECT_EQ(r.conn.counters().messages_received, 1u);
}

TEST(Receiver_AckPolicy, AckCarriesThePathsLatestSourcePortToTheMetaRocePort) {
  Responder r;
  r.Feed(At(0 * kUs), r.Write(3, 0, 0, 0, 100, wire::flags::kAckRequest));
  ASSERT_EQ(r.sink.packets().size(), 1u);
  const RecordedPacket& ack = r.sink.packets()[0];
  EXPECT_EQ(ack.meta.src_port, 50003);  // the path's port travels back as the source
  EXPECT_EQ(ack.meta.dst_port, wire::kDefaultUdpPort);
  EXPECT_EQ(ack.meta.path_id, 3);
  EXPECT_EQ(ack.packet.dest_conn, 2u);
  EXPECT_EQ(ack.packet.token, kTxToken);
  EXPECT_EQ(ack.packet.ack.syndrome, wire::Syndrome::kAck);
  EXPECT_EQ(ack.packet.ack.msg_seq, 0u);
}

TEST(Receiver_AckPolicy, OutOfOrderAcksAtOnceWithTheSackBits) {
  Responder r;
  const uint32_t len = 8 * kMtu;
  r.Feed(At(0 * kUs), r.Write(1, 0, 0, 0, len));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.Feed(At(1 * kUs), r.Write(1, 2, 0, 2048, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 1 ack_psn 2 sack 2"));
  r.Feed(At(2 * kUs), r.Write(1, 4, 0, 4096, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 1 ack_psn 4 sack 2 4"));
  r.Feed(At(3 * kUs), r.Write(1, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 3 ack_psn 1 sack 4"));
  EXPECT_EQ(r.conn.NextDeadline(), kNever);
}

// paths-and-recovery.md §3.3 rule 1: ACK at once if the packet does not directly follow the
// highest PSN received (it opened a gap or filled one).
TEST(Receiver_AckPolicy, FillingTheLastGapAcksAtOnce) {
  Responder r;
  const uint32_t len = 4 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 1 sack 1"));
  r.Feed(At(1 * kUs), r.Write(0, 0, 0, 0, len));  // fills the gap; the bitmap is now empty
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 2 ack_psn 0"));
}

// §3.3: once an ACK reported a gap, packets extending the run above it count toward ack_every
// like in-order ones; filling the gap is ACKed at once.
TEST(Receiver_AckPolicy, PacketsAboveAReportedGapAreCoalesced) {
  ConnectionConfig c = ResponderConfig();
  c.ack_every = 3;
  Responder r(c);
  const uint32_t len = 8 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 1 sack 1"));  // opens the gap
  r.Feed(At(1 * kUs), r.Write(0, 2, 0, 2048, len));
  r.Feed(At(1 * kUs), r.Write(0, 3, 0, 3072, len));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.Feed(At(2 * kUs), r.Write(0, 4, 0, 4096, len));  // the third since the last ACK
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 4 sack 1 2 3 4"));
  r.Feed(At(3 * kUs), r.Write(0, 6, 0, 6144, len));  // skips PSN 5: a new gap
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 6 sack 1 2 3 4 6"));
  r.Feed(At(4 * kUs), r.Write(0, 0, 0, 0, len));     // fills the first gap
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 5 ack_psn 0 sack 6"));
}

TEST(Receiver_AckPolicy, AckRequestAcksAtOnce) {
  Responder r;
  r.Feed(At(0 * kUs), r.Write(2, 0, 0, 0, 2048, wire::flags::kAckRequest));
  EXPECT_THAT(r.Log(), ElementsAre("path 2 ACK cum 1 ack_psn 0"));
  // The ACK reset the count: the next in-order packet alone does not reach ack_every.
  r.Feed(At(1 * kUs), r.Write(2, 1, 0, 1024, 2048));
  EXPECT_THAT(r.Log(), IsEmpty());
}

TEST(Receiver_AckPolicy, DelayedAckAfterDelayedAckFromTheFirstUnacknowledgedPacket) {
  ConnectionConfig c = ResponderConfig();
  c.ack_every = 4;
  Responder r(c);
  const uint32_t len = 4 * kMtu;
  r.Feed(At(10 * kUs), r.Write(0, 0, 0, 0, len));
  r.Feed(At(12 * kUs), r.Write(0, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_EQ(r.conn.NextDeadline(), At(14 * kUs));  // 10 us + delayed_ack
  r.conn.OnTimer(At(14 * kUs) + Duration(-1));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.conn.OnTimer(At(14 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 2 ack_psn 1 DELAYED"));
  EXPECT_EQ(r.conn.NextDeadline(), kNever);
  // Only the path with pending packets answers.
  r.Feed(At(20 * kUs), r.Write(3, 0, 1, 0, 100, 0, 8192));
  r.conn.OnTimer(At(24 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 3 ACK cum 1 ack_psn 0 DELAYED"));
}

TEST(Receiver_AckPolicy, EarliestDelayedAckOfSeveralPathsIsTheDeadline) {
  ConnectionConfig c = ResponderConfig();
  c.ack_every = 4;
  Responder r(c);
  const uint32_t len = 4 * kMtu;
  r.Feed(At(10 * kUs), r.Write(0, 0, 0, 0, len));
  r.Feed(At(11 * kUs), r.Write(1, 0, 0, 1024, len));
  r.Feed(At(12 * kUs), r.Write(2, 0, 0, 2048, len));
  EXPECT_EQ(r.conn.NextDeadline(), At(14 * kUs));  // path 0's
  // Path 0 answers early (ACK_REQ): path 1's deadline is the next.
  r.Feed(At(13 * kUs), r.Write(0, 1, 0, 3072, len, wire::flags::kAckRequest));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 2 ack_psn 1"));
  EXPECT_EQ(r.conn.NextDeadline(), At(15 * kUs));
  r.conn.OnTimer(At(15 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 1 ack_psn 0 DELAYED"));
  EXPECT_EQ(r.conn.NextDeadline(), At(16 * kUs));
  // A caller's clock that steps back still gets its earliest deadline.
  r.Feed(At(5 * kUs), r.Write(3, 0, 1, 0, 100, 0, 8192));
  EXPECT_EQ(r.conn.NextDeadline(), At(9 * kUs));
  r.conn.OnTimer(At(16 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 2 ACK cum 1 ack_psn 0 DELAYED",
                                   "path 3 ACK cum 1 ack_psn 0 DELAYED"));
  EXPECT_EQ(r.conn.NextDeadline(), kNever);
}

TEST(Receiver_Duplicate, AcksAtOnceCountsAndDoesNotRewrite) {
  Responder r;
  const uint32_t len = 4 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, len));
  r.Feed(At(0 * kUs), r.Write(0, 2, 0, 2048, len));
  r.Log();
  ASSERT_TRUE(r.Placed(0, 0, 1024));
  // Overwrite what was placed: a duplicate must not put the old bytes back.
  std::fill(r.Dst().begin(), r.Dst().begin() + 3072, std::byte{0xee});
  r.Feed(At(1 * kUs), r.Write(0, 0, 0, 0, len));     // below cum_psn
  r.Feed(At(2 * kUs), r.Write(0, 2, 0, 2048, len));  // already in the SACK bitmap
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 1 ack_psn 0 sack 2",
                                   "path 0 ACK cum 1 ack_psn 2 sack 2"));
  EXPECT_EQ(r.conn.counters().duplicate_request, 2u);
  EXPECT_EQ(r.conn.counters().rcvd_pkts, 2u);
  EXPECT_TRUE(std::all_of(r.Dst().begin(), r.Dst().begin() + 3072,
                          [](std::byte b) { return b == std::byte{0xee}; }));
}

TEST(Receiver_Window, PsnBeyond256IsDroppedSilentlyAndCounted) {
  Responder r;
  r.Feed(At(0 * kUs), r.Filler(0, 257));
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_EQ(r.conn.counters().out_of_window, 1u);
  r.Feed(At(0 * kUs), r.Write(0, 300, 0, 0, 100));
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_EQ(r.conn.counters().out_of_window, 2u);
  EXPECT_TRUE(r.Untouched());
  // cum_psn + 256 is the last PSN inside the window.
  r.Feed(At(0 * kUs), r.Filler(0, 256));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 256 sack 256"));
}

TEST(Receiver_Ecn, CeCountIsEchoedCumulativelyPerPath) {
  Responder r;
  const uint32_t len = 8 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, len), /*ce=*/true);
  r.Feed(At(0 * kUs), r.Write(0, 1, 0, 1024, len), /*ce=*/false);
  r.Feed(At(0 * kUs), r.Write(1, 0, 0, 2048, len), /*ce=*/true);
  r.Feed(At(0 * kUs), r.Write(0, 2, 0, 3072, len), /*ce=*/true);
  r.Feed(At(0 * kUs), r.Write(0, 3, 0, 4096, len), /*ce=*/true);
  std::vector<std::pair<uint16_t, uint32_t>> echoed;
  for (const RecordedPacket& p : r.sink.packets()) {
    echoed.emplace_back(p.packet.path_id, p.packet.ack.ce_count);
  }
  EXPECT_THAT(echoed, ElementsAre(std::pair<uint16_t, uint32_t>{0, 1},
                                  std::pair<uint16_t, uint32_t>{0, 3}));
  r.sink.Clear();
  r.conn.OnTimer(At(10 * kUs));  // path 1's delayed ACK
  ASSERT_EQ(r.sink.packets().size(), 1u);
  EXPECT_EQ(r.sink.packets()[0].packet.ack.ce_count, 1u);
}

TEST(Receiver_WindowHint, IsTheHostBudgetSharedByTheConnectionsPaths) {
  ReceiveBudget budget(ReceiveBudgetConfig{.budget_bytes = 100'000});
  Responder r(ResponderConfig(), &budget);  // 4 paths, counted from set-up
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, 100, wire::flags::kAckRequest));
  r.Feed(At(0 * kUs), r.Probe(1, 0));
  r.Feed(At(0 * kUs), r.Data(wire::Opcode::kSend, 2, 0, 1, 0, 10));  // RNR NAK
  ASSERT_EQ(r.sink.packets().size(), 3u);
  for (const RecordedPacket& p : r.sink.packets()) EXPECT_EQ(p.packet.ack.window_hint, 25'000u);
  r.sink.Clear();
  // A second connection of the same host, set up and not sending yet, halves every share.
  Responder other(ResponderConfig(), &budget);
  r.Feed(At(1 * kUs), r.Write(0, 1, 0, 100, 200, wire::flags::kAckRequest));
  ASSERT_EQ(r.sink.packets().size(), 1u);
  EXPECT_EQ(r.sink.packets()[0].packet.ack.window_hint, 12'500u);

  Responder no_budget;
  no_budget.Feed(At(0 * kUs), no_budget.Write(0, 0, 0, 0, 100, wire::flags::kAckRequest));
  ASSERT_EQ(no_budget.sink.packets().size(), 1u);
  EXPECT_EQ(no_budget.sink.packets()[0].packet.ack.window_hint, 0u);
}

// congestion.md §6.2: a connection's first window, its share of the budget when its first packet
// came, was granted by the offer: the pull pacer takes no slot for it, and does for what follows.
TEST(Receiver_Pacer, AConnectionsFirstWindowTakesNoSlot) {
  ReceiveBudgetConfig config{.budget_bytes = 1'100};
  config.pull.rate_gbps = 100;
  ReceiveBudget budget(config);
  Responder r(ResponderConfig(), &budget);  // the host's only connection: the whole budget
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, 1200));  // 1,024 bytes: within the first window
  EXPECT_EQ(budget.pacer().counters().unsolicited_bytes, 0u);
  r.Feed(At(1 * kUs), r.Write(1, 0, 0, 1024, 1200));  // 176 bytes: beyond it
  const uint64_t charged = budget.pacer().counters().unsolicited_bytes;
  EXPECT_EQ(charged, wire::kDataHeadersSize + 176 + config.pull.wire_overhead_bytes);
  r.Feed(At(2 * kUs), r.Write(2, 0, 1, 0, 100, wire::flags::kPulled));  // pulled: no slot
  EXPECT_EQ(budget.pacer().counters().unsolicited_bytes, charged);
}

TEST(Receiver_Probe, AdvancesCumAndRepliesWithTheProbePsn) {
  Responder r;
  r.Feed(At(0 * kUs), r.Filler(1, 5));
  r.Feed(At(0 * kUs), r.Filler(1, 6));
  r.Log();
  // The requester abandoned PSNs 0..4 on this path; 5 and 6 already arrived.
  wire::Packet probe = r.Probe(1, 5);
  r.conn.OnPacket(At(1 * kUs), probe, RxMeta{.src_port = 61234});
  ASSERT_EQ(r.sink.packets().size(), 1u);
  EXPECT_EQ(r.sink.packets()[0].meta.src_port, 61234);  // the PROBE's (new) source port
  EXPECT_EQ(r.sink.packets()[0].meta.dst_port, wire::kDefaultUdpPort);
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 7 ack_psn 5 PROBE_REPLY"));
  // A late copy of an abandoned PSN is now a duplicate.
  r.Feed(At(2 * kUs), r.Write(1, 3, 0, 0, 100));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 7 ack_psn 3"));
  EXPECT_EQ(r.conn.counters().duplicate_request, 1u);
  EXPECT_TRUE(r.Untouched());
  // A probe behind cum_psn is answered without moving it.
  r.Feed(At(3 * kUs), r.Probe(1, 2));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 ACK cum 7 ack_psn 2 PROBE_REPLY"));
}

TEST(Receiver_Filler, RecordsThePsnAndWritesNothing) {
  Responder r;
  r.Feed(At(0 * kUs), r.Filler(0, 0));
  r.Feed(At(0 * kUs), r.Filler(0, 1));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 2 ack_psn 1"));
  EXPECT_TRUE(r.Untouched());
  EXPECT_EQ(r.conn.counters().rcvd_pkts, 0u);
  EXPECT_EQ(r.conn.counters().duplicate_request, 0u);
  EXPECT_EQ(r.conn.counters().messages_received, 0u);
}

TEST(Receiver_Rnr, SendWithoutAPostedReceiveIsNakedAndNotAcknowledged) {
  Responder r;
  r.Feed(At(0 * kUs), r.Data(wire::Opcode::kSend, 0, 0, 0, 0, 100));
  r.Feed(At(0 * kUs), r.Data(wire::Opcode::kSend, 0, 2, 1, 0, 100));
  ASSERT_EQ(r.sink.packets().size(), 2u);
  const wire::Packet nak = r.sink.packets()[1].packet;
  EXPECT_EQ(nak.ack.rnr_delay_us, 20);
  EXPECT_EQ(nak.ack.msg_seq, 1u);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 RNR_NAK cum 0 ack_psn 0", "path 0 RNR_NAK cum 0 ack_psn 2"));
  EXPECT_EQ(r.conn.counters().rnr_naks_sent, 2u);
  // With the receives posted, the retries are accepted.
  RecvWorkRequest recv{77, {r.region.addr, 100, r.region.lkey}};
  ASSERT_TRUE(r.conn.PostRecv(At(1 * kUs), recv).ok());
  recv.wr_id = 78;
  recv.local.addr += 1000;
  ASSERT_TRUE(r.conn.PostRecv(At(1 * kUs), recv).ok());
  r.Feed(At(30 * kUs), r.Data(wire::Opcode::kSend, 0, 0, 0, 0, 100, wire::flags::kAckRequest));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 1 ack_psn 0"));
  const std::vector<Completion> c = r.Completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 77u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 100u);
  EXPECT_TRUE(r.Placed(0, 0, 100));
}

TEST(Receiver_RemoteAccess, BadKeyOutOfBoundsOrNoRemoteWriteIsNakedAndMemoryUntouched) {
  Responder r;
  // A second region without REMOTE_WRITE, inside the guarded storage too.
  std::vector<std::byte> ro(4096, std::byte{0});
  const MemoryRegion ro_mr = *r.memory.Register(ro.data(), ro.size(), access::kLocalWrite);

  wire::Packet bad_key = r.Write(0, 0, 0, 0, 100);
  bad_key.data.rkey ^= 0x5555;
  wire::Packet past_end = r.Write(0, 1, 1, 0, 100);
  past_end.data.remote_addr = r.region.addr + kRegionBytes - 50;
  wire::Packet before_start = r.Write(0, 2, 2, 0, 100);
  before_start.data.remote_addr = r.region.addr - 50;
  wire::Packet no_access = r.Write(0, 3, 3, 0, 100);
  no_access.data.rkey = ro_mr.rkey;
  no_access.data.remote_addr = ro_mr.addr;
  for (const wire::Packet& p : {bad_key, past_end, before_start, no_access}) r.Feed(At(0 * kUs), p);

  std::vector<uint32_t> msg_seqs;
  for (const RecordedPacket& p : r.sink.packets()) msg_seqs.push_back(p.packet.ack.msg_seq);
  EXPECT_THAT(msg_seqs, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 REM_ACCESS_NAK cum 0 ack_psn 0",
                                   "path 0 REM_ACCESS_NAK cum 0 ack_psn 1",
                                   "path 0 REM_ACCESS_NAK cum 0 ack_psn 2",
                                   "path 0 REM_ACCESS_NAK cum 0 ack_psn 3"));
  EXPECT_EQ(r.conn.counters().access_naks_sent, 4u);
  EXPECT_EQ(r.conn.counters().rcvd_pkts, 0u);
  EXPECT_TRUE(r.Untouched());  // region and both guards
  EXPECT_TRUE(std::all_of(ro.begin(), ro.end(), [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(r.conn.state(), Connection::State::kReady);  // a refusal is not a responder error
}

// messages-and-memory.md §3.2 step 3: a REM_ACCESS refusal records the message failed, and step 2
// refuses every later packet of a failed message with the recorded NAK, even one whose own range
// would be valid.
TEST(Receiver_RemoteAccess, LaterPacketsOfARefusedMessageAreRefusedToo) {
  Responder r;
  const uint32_t len = 2 * kMtu;
  // The message starts 1024 bytes before the region: packet 0 is outside, packet 1 inside.
  wire::Packet p0 = r.Write(0, 0, 0, 0, len);
  wire::Packet p1 = r.Write(0, 1, 0, 1024, len);
  p0.data.remote_addr = r.region.addr - 1024;
  p1.data.remote_addr = r.region.addr;
  r.Feed(At(0 * kUs), p0);
  r.Feed(At(0 * kUs), p1);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 REM_ACCESS_NAK cum 0 ack_psn 0",
                                   "path 0 REM_ACCESS_NAK cum 0 ack_psn 1"));
  EXPECT_TRUE(r.Untouched());
}

TEST(Receiver_InvalidRequest, MalformedMessageShapesAreNaked) {
  Responder r;
  wire::Packet beyond_send_window = r.Write(0, 0, 1024, 0, 100);  // max_send_queue is 1024
  wire::Packet misaligned = r.Write(0, 1, 1, 0, 2048);
  misaligned.data.offset = 100;
  misaligned.data.remote_addr += 100;
  wire::Packet short_payload = r.Write(0, 2, 2, 0, 2048);
  short_payload.payload = short_payload.payload.first(100);  // must be one full MTU
  for (const wire::Packet& p : {beyond_send_window, misaligned, short_payload}) {
    r.Feed(At(0 * kUs), p);
  }
  EXPECT_THAT(r.Log(), ElementsAre("path 0 INV_REQ_NAK cum 0 ack_psn 0",
                                   "path 0 INV_REQ_NAK cum 0 ack_psn 1",
                                   "path 0 INV_REQ_NAK cum 0 ack_psn 2"));
  EXPECT_TRUE(r.Untouched());
}

// [M1] The send window is the requester's: its max_send_queue, which the set-up told the
// responder (peer_max_send_queue), not the responder's own.
TEST(Receiver_InvalidRequest, TheSendWindowIsThePeers) {
  ConnectionConfig c = ResponderConfig();
  c.max_send_queue = 4;
  c.peer_max_send_queue = 16;
  Responder r(c);
  r.Feed(At(0 * kUs), r.Write(0, 0, 10, 0, 100));  // msg_seq 10: inside the peer's 16
  r.Feed(At(0 * kUs), r.Write(0, 1, 16, 0, 100));  // msg_seq 16: beyond it
  // PSN 0 accepted (its ACK delayed: cum 1 in the NAK), PSN 1 refused.
  EXPECT_THAT(r.Log(), ElementsAre("path 0 INV_REQ_NAK cum 1 ack_psn 1"));
}

TEST(Receiver_InvalidRequest, PacketsOfOneMessageMustAgree) {
  Responder r;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, 2 * kMtu));
  r.Log();
  wire::Packet other_len = r.Write(0, 1, 0, 1024, 3 * kMtu);
  wire::Packet other_opcode = r.Data(wire::Opcode::kSend, 0, 2, 0, 1024, 2 * kMtu);
  r.Feed(At(0 * kUs), other_len);
  r.Feed(At(0 * kUs), other_opcode);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 INV_REQ_NAK cum 1 ack_psn 1",
                                   "path 0 INV_REQ_NAK cum 1 ack_psn 2"));
  // Only the first packet was placed.
  EXPECT_TRUE(r.Placed(0, 0, 1024));
  EXPECT_TRUE(std::all_of(r.Dst().begin() + 1024, r.Dst().end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST(Receiver_Placement, LateDuplicateOfACompletedWriteDoesNotOverwriteNewerData) {
  Responder r;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, 100, wire::flags::kAckRequest));
  ASSERT_EQ(r.conn.counters().messages_received, 1u);
  // The application reuses the buffer (a later message, here written locally).
  std::fill(r.Dst().begin(), r.Dst().begin() + 100, std::byte{0x42});
  // A copy of the same data unit arrives on another path under a new PSN (rerouted copy).
  r.Feed(At(5 * kUs), r.Write(2, 0, 0, 0, 100, wire::flags::kAckRequest | wire::flags::kRetransmit));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 1 ack_psn 0", "path 2 ACK cum 1 ack_psn 0"));
  EXPECT_TRUE(std::all_of(r.Dst().begin(), r.Dst().begin() + 100,
                          [](std::byte b) { return b == std::byte{0x42}; }));
  EXPECT_EQ(r.conn.counters().messages_received, 1u);
  EXPECT_EQ(r.conn.counters().duplicate_request, 1u);
}

TEST(Receiver_GoBackN, OneSequenceErrorNakPerGapAndInOrderOnly) {
  ConnectionConfig c = ResponderConfig();
  c.path_count = 1;
  c.profile = TransportProfile::GoBackN();
  Responder r(c);
  const uint32_t len = 6 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, len, wire::flags::kAckRequest));
  r.Feed(At(0 * kUs), r.Write(0, 2, 0, 2048, len));
  r.Feed(At(0 * kUs), r.Write(0, 3, 0, 3072, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 1 ack_psn 0", "path 0 SEQ_ERR_NAK cum 1 ack_psn 2"));
  EXPECT_EQ(r.conn.counters().seq_err_naks_sent, 1u);
  EXPECT_TRUE(std::all_of(r.Dst().begin() + 1024, r.Dst().end(),
                          [](std::byte b) { return b == std::byte{0}; }));  // nothing past the gap
  // The resend from the gap is taken in order.
  r.Feed(At(1 * kUs), r.Write(0, 1, 0, 1024, len));
  r.Feed(At(1 * kUs), r.Write(0, 2, 0, 2048, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 3 ack_psn 2"));
  // A new gap gets a new NAK; go-back-N ACKs carry no SACK bits.
  r.Feed(At(2 * kUs), r.Write(0, 4, 0, 4096, len));
  ASSERT_EQ(r.sink.packets().size(), 1u);
  EXPECT_TRUE(r.sink.packets()[0].packet.ack.sack.Empty());
  EXPECT_THAT(r.Log(), ElementsAre("path 0 SEQ_ERR_NAK cum 3 ack_psn 4"));
  EXPECT_EQ(r.conn.counters().seq_err_naks_sent, 2u);
  EXPECT_TRUE(r.Placed(0, 0, 3 * kMtu));
}

TEST(Receiver_ReorderBuffer, HoldsOutOfOrderPlacesWhenTheGapFillsDropsWhenFull) {
  ConnectionConfig c = ResponderConfig();
  c.profile = TransportProfile::ReorderBuffer(2 * kMtu);
  Responder r(c);
  const uint32_t len = 4 * kMtu;
  r.Feed(At(0 * kUs), r.Write(0, 1, 0, 1024, len));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 0 ack_psn 1 sack 1"));  // held and accepted
  r.Feed(At(0 * kUs), r.Write(0, 2, 0, 2048, len));
  EXPECT_THAT(r.Log(), IsEmpty());  // above the gap already reported: coalesced ([R10])
  EXPECT_TRUE(r.Untouched());  // nothing placed before the placement point
  r.Feed(At(0 * kUs), r.Write(0, 3, 0, 3072, len));  // the buffer is full: dropped
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_EQ(r.conn.counters().reorder_drops, 1u);
  // The placement point (ACK_REQ: this test is not about the ACK policy): drains the buffer.
  r.Feed(At(0 * kUs), r.Write(0, 0, 0, 0, len, wire::flags::kAckRequest));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 3 ack_psn 0"));
  EXPECT_TRUE(r.Placed(0, 0, 3 * kMtu));
  EXPECT_TRUE(std::all_of(r.Dst().begin() + 3072, r.Dst().end(),
                          [](std::byte b) { return b == std::byte{0}; }));
  // The dropped PSN was never acknowledged, so its retransmission is new and completes the message.
  r.Feed(At(1 * kUs), r.Write(0, 3, 0, 3072, len, wire::flags::kAckRequest | wire::flags::kRetransmit));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 ACK cum 4 ack_psn 3"));
  EXPECT_TRUE(r.Placed(0, 0, len));
  EXPECT_EQ(r.conn.counters().messages_received, 1u);
}

// [M3] one receive, one message. A peer names receive 0 in two messages; the second arrives
// while the first waits in the reorder buffer. Before the rule, both were accepted: the first
// completed the receive, then the second was drained, completed and indexed a receive that was no
// longer posted (found by the connection fuzzer: a hostile peer could crash the responder).
TEST(Receiver_ReorderBuffer, AReceiveClaimedByOneMessageIsRefusedToAnother) {
  ConnectionConfig c = ResponderConfig();
  c.profile = TransportProfile::ReorderBuffer(8 * kMtu);
  Responder r(c);
  RecvWorkRequest recv{77, {r.region.addr, 4 * kMtu, r.region.lkey}};
  ASSERT_TRUE(r.conn.PostRecv(At(0 * kUs), recv).ok());
  wire::Packet a1 = r.Data(wire::Opcode::kSend, 0, 1, 0, kMtu, 2 * kMtu);  // message 0, 2nd half
  r.Feed(At(0 * kUs), a1);  // out of order: held, receive 0 claimed by message 0
  wire::Packet b = r.Data(wire::Opcode::kSend, 1, 0, 1, 0, 100, wire::flags::kAckRequest);
  r.Feed(At(0 * kUs), b);  // message 1 names receive 0 too
  std::vector<std::string> log = r.Log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1], "path 1 INV_REQ_NAK cum 0 ack_psn 0");
  // Message 0 completes the receive once; nothing of message 1 is placed or completed.
  r.Feed(At(1 * kUs), r.Data(wire::Opcode::kSend, 0, 0, 0, 0, 2 * kMtu, wire::flags::kAckRequest));
  const std::vector<Completion> done = r.Completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 77u);
  EXPECT_EQ(done[0].byte_len, 2 * kMtu);
  EXPECT_TRUE(r.Placed(0, 0, 2 * kMtu));
  EXPECT_EQ(r.conn.counters().messages_received, 1u);
  // Its retransmission is refused again and completes nothing.
  r.Feed(At(2 * kUs), r.Data(wire::Opcode::kSend, 1, 0, 1, 0, 100,
                             wire::flags::kAckRequest | wire::flags::kRetransmit));
  EXPECT_TRUE(r.Completions().empty());
}

}  // namespace
}  // namespace metaroce::core
