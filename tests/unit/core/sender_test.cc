// Sender (the requester half of Connection): spraying, segmentation, windows, loss recovery, path
// health and rotation, RNR, retry limit and completions. Driven through Connection with a
// RecordingSink and hand-built ACKs on a mock clock; assertions read a log of what was sent (one
// line per packet, testing::Describe) and when.
#include "lib/core/sender.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "lib/core/connection.h"
#include "tests/support/recording_sink.h"

// This test binary's operator new counts the allocations made while g_count_allocations is set
// (Sender_Memory below).
namespace {
thread_local bool g_count_allocations = false;
thread_local size_t g_allocations = 0;
}  // namespace

void* operator new(size_t n) {
  if (g_count_allocations) ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// Out of line: inlined, GCC would see free() of what `new` returned (-Wmismatched-new-delete).
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace metaroce::core {
namespace {

using ::metaroce::testing::RecordedPacket;
using ::metaroce::testing::RecordingSink;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;
using ::testing::StartsWith;

constexpr Duration kUs = std::chrono::microseconds(1);
constexpr uint32_t kMtu = 1024;
constexpr uint64_t kRxToken = 0xa1a2a3a4a5a6a7a8ull;
constexpr uint64_t kTxToken = 0xb1b2b3b4b5b6b7b8ull;
constexpr uint64_t kRemoteAddr = 0x7f0000100000ull;
constexpr uint32_t kRkey = 0x5a5a0100;

Instant At(Duration d) { return Instant{} + d; }

// Timers: a PTO of max(min_probe_timeout, ...) = 50 us before any RTT sample, whichever way the
// estimator treats rttvar before its first sample (initial_rtt 10 us).
ConnectionConfig RequesterConfig(uint16_t paths) {
  ConnectionConfig c;
  c.local_conn_id = 1;
  c.remote_conn_id = 2;
  c.rx_token = kRxToken;
  c.tx_token = kTxToken;
  c.path_count = paths;
  c.mtu = kMtu;
  c.initial_rtt = 10 * kUs;
  c.min_probe_timeout = 50 * kUs;
  // These tests time the ordinary probe timeout [R5]; Sender_TailProbe turns [R5d] back on.
  c.tail_probes = false;
  // ... and count expiries to failure from 3 (the default is 4).
  c.fail_after_timeouts = c.fail_after_overtaken = 3;
  return c;
}

std::string EventLine(const PathEvent& e) {
  const std::string at = " @" + std::to_string(e.at.ns / 1000) + "us";
  if (e.kind == PathEvent::Kind::kPortRotated) {
    return "path " + std::to_string(e.path_id) + " rotated " +
           std::string(PathEventReasonName(e.reason)) + at;
  }
  return "path " + std::to_string(e.path_id) + " " + std::string(PathStateName(e.from)) + "->" +
         std::string(PathStateName(e.to)) + " " + std::string(PathEventReasonName(e.reason)) + at;
}

struct Requester {
  explicit Requester(const ConnectionConfig& c) : src(512 * 1024), conn(c, memory, sink) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 13 + 5) & 0xff);
    mr = *memory.Register(src.data(), src.size(), access::kLocalWrite);
  }

  SendWorkRequest Wr(uint64_t wr_id, WrOpcode op, uint32_t offset, uint32_t len,
                     uint32_t flags = send_flags::kSignaled) const {
    SendWorkRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.flags = flags;
    wr.local = {mr.addr + offset, len, mr.lkey};
    if (op == WrOpcode::kWrite || op == WrOpcode::kWriteWithImm) {
      wr.remote_addr = kRemoteAddr + offset;
      wr.rkey = kRkey;
    }
    return wr;
  }
  void Post(Instant now, const SendWorkRequest& wr) { ASSERT_TRUE(conn.PostSend(now, wr).ok()); }
  void PostWrite(Instant now, uint64_t wr_id, uint32_t len, uint32_t flags = send_flags::kSignaled) {
    Post(now, Wr(wr_id, WrOpcode::kWrite, 0, len, flags));
  }

  // An ACK for `path`: every PSN below `cum` and those in `sack` arrived.
  static wire::Packet Ack(uint16_t path, uint32_t cum, uint32_t ack_psn,
                          std::initializer_list<uint32_t> sack = {}, uint16_t flags = 0) {
    wire::Packet p;
    p.opcode = wire::Opcode::kAck;
    p.flags = flags;
    p.dest_conn = 1;
    p.path_id = path;
    p.token = kRxToken;
    p.ack.cum_psn = cum;
    p.ack.ack_psn = ack_psn;
    for (uint32_t psn : sack) p.ack.sack.Set(psn - cum - 1);
    return p;
  }
  static wire::Packet Nak(uint16_t path, uint32_t cum, uint32_t psn, wire::Syndrome s,
                          uint32_t msg_seq, uint16_t rnr_delay_us = 0) {
    wire::Packet p = Ack(path, cum, psn);
    p.ack.syndrome = s;
    p.ack.msg_seq = msg_seq;
    p.ack.rnr_delay_us = rnr_delay_us;
    return p;
  }
  void Feed(Instant now, const wire::Packet& p) {
    conn.OnPacket(now, p, RxMeta{.src_port = wire::kDefaultUdpPort});
  }
  // Runs every timer due up to and including `until`, in order.
  void RunTimersUntil(Instant until) {
    for (Instant t = conn.NextDeadline(); t <= until; t = conn.NextDeadline()) conn.OnTimer(t);
  }

  std::vector<std::string> Log() {
    std::vector<std::string> out;
    for (const RecordedPacket& r : sink.packets()) out.push_back(testing::Describe(r.packet));
    sink.Clear();
    return out;
  }
  std::vector<uint64_t> CompletedIds(std::vector<WcStatus>* statuses = nullptr) {
    std::vector<Completion> c(64);
    c.resize(conn.PollCompletions(c));
    std::vector<uint64_t> ids;
    for (const Completion& x : c) {
      ids.push_back(x.wr_id);
      if (statuses != nullptr) statuses->push_back(x.status);
    }
    return ids;
  }
  std::vector<PathEvent> RawEvents() {
    std::vector<PathEvent> e(64);
    e.resize(conn.PollEvents(e));
    return e;
  }
  std::vector<std::string> Events() {
    std::vector<std::string> out;
    for (const PathEvent& e : RawEvents()) out.push_back(EventLine(e));
    return out;
  }

  RecordingSink sink;
  MemoryTable memory;
  std::vector<std::byte> src;
  MemoryRegion mr;
  Connection conn;
};

// ---------------------------------------------------------------------------------------------
// Spraying and segmentation

TEST(Sender_Spray, RoundRobinOverPathsWithPerPathPsnsFromZero) {
  Requester r(RequesterConfig(4));
  r.PostWrite(At(0 * kUs), 1, 6 * kMtu);
  EXPECT_THAT(r.sink.packets()[1].meta.src_port, 49153);
  EXPECT_THAT(r.sink.packets()[1].meta.dst_port, wire::kDefaultUdpPort);
  const wire::Packet& p = r.sink.packets()[5].packet;
  EXPECT_EQ(p.dest_conn, 2u);
  EXPECT_EQ(p.token, kTxToken);
  EXPECT_EQ(p.data.msg_len, 6 * kMtu);
  EXPECT_EQ(p.data.rkey, kRkey);
  EXPECT_EQ(p.data.remote_addr, kRemoteAddr + 5 * kMtu);
  EXPECT_TRUE(std::equal(p.payload.begin(), p.payload.end(), r.src.begin() + 5 * kMtu));
  // [R3] the last four packets, fewer than the four paths after each of them, ask for an ACK:
  // each may be its path's last for now.
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024",
                                   "path 1 WRITE psn 0 msg 0 off 1024 len 1024",
                                   "path 2 WRITE psn 0 msg 0 off 2048 len 1024 ACK_REQ",
                                   "path 3 WRITE psn 0 msg 0 off 3072 len 1024 ACK_REQ",
                                   "path 0 WRITE psn 1 msg 0 off 4096 len 1024 ACK_REQ",
                                   "path 1 WRITE psn 1 msg 0 off 5120 len 1024 ACK_REQ"));
  // The next message continues after the path used last.
  r.PostWrite(At(1 * kUs), 2, 100);
  EXPECT_THAT(r.Log(), ElementsAre("path 2 WRITE psn 1 msg 1 off 0 len 100 ACK_REQ"));
}

// congestion.md §3: a packet goes to the path with the fewest bytes in flight (ties in round-robin
// order): a path whose packets wait behind a queue holds its bytes longer and gets fewer new ones.
TEST(Sender_Spray, FewestBytesInFlightFirst) {
  Requester r(RequesterConfig(3));
  r.PostWrite(At(0 * kUs), 1, 3 * kMtu);  // psn 0 on each path
  r.Feed(At(10 * kUs), Requester::Ack(2, 1, 0));
  r.Log();
  // Path 2 is empty: it takes the first packet; then round-robin after it, over equal paths.
  r.PostWrite(At(11 * kUs), 2, 3 * kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 2 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ",
                                   "path 0 WRITE psn 1 msg 1 off 1024 len 1024 ACK_REQ",
                                   "path 1 WRITE psn 1 msg 1 off 2048 len 1024 ACK_REQ"));
  // Paths 0 and 1 now hold two packets each, path 2 one: a half packet goes there.
  r.PostWrite(At(12 * kUs), 3, kMtu / 2);
  EXPECT_THAT(r.Log(), ElementsAre("path 2 WRITE psn 2 msg 2 off 0 len 512 ACK_REQ"));
}

TEST(Sender_Segmentation, LastPacketShorterAndZeroLengthIsOneEmptyPacket) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 2500);
  r.PostWrite(At(0 * kUs), 2, 0);
  ASSERT_THAT(r.sink.packets(), SizeIs(4));
  EXPECT_EQ(r.sink.packets()[2].packet.data.msg_len, 2500u);
  EXPECT_EQ(r.sink.packets()[2].packet.data.remote_addr, kRemoteAddr + 2048);
  EXPECT_EQ(r.sink.packets()[3].packet.data.msg_len, 0u);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024",
                                   "path 0 WRITE psn 1 msg 0 off 1024 len 1024",
                                   "path 0 WRITE psn 2 msg 0 off 2048 len 452 ACK_REQ",
                                   "path 0 WRITE psn 3 msg 1 off 0 len 0 ACK_REQ"));
}

TEST(Sender_Segmentation, RecvSeqCountsOnlyRequestsThatConsumeAReceive) {
  Requester r(RequesterConfig(1));
  SendWorkRequest send_imm = r.Wr(3, WrOpcode::kSendWithImm, 0, 10);
  send_imm.imm = 0xabcd;
  SendWorkRequest write_imm = r.Wr(4, WrOpcode::kWriteWithImm, 0, 10);
  write_imm.imm = 0x1234;
  r.Post(At(0 * kUs), r.Wr(1, WrOpcode::kSend, 0, 10));
  r.Post(At(0 * kUs), r.Wr(2, WrOpcode::kWrite, 0, 10));
  r.Post(At(0 * kUs), send_imm);
  r.Post(At(0 * kUs), write_imm);
  std::vector<std::tuple<std::string, uint32_t, uint32_t>> got;
  for (const RecordedPacket& p : r.sink.packets()) {
    got.emplace_back(wire::OpcodeName(p.packet.opcode), p.packet.data.recv_seq, p.packet.data.imm);
  }
  EXPECT_THAT(got, ElementsAre(std::make_tuple("SEND", 0u, 0u), std::make_tuple("WRITE", 0u, 0u),
                               std::make_tuple("SEND_IMM", 1u, 0xabcdu),
                               std::make_tuple("WRITE_IMM", 2u, 0x1234u)));
  EXPECT_EQ(r.sink.packets()[0].packet.data.rkey, 0u);  // Sends carry no remote address
  EXPECT_EQ(r.sink.packets()[0].packet.data.remote_addr, 0u);
}

// ---------------------------------------------------------------------------------------------
// Windows

TEST(Sender_Cwnd, LimitsBytesInFlightPerPath) {
  ConnectionConfig c = RequesterConfig(2);
  c.min_cwnd_bytes = 4 * kMtu;
  c.initial_window_bytes = 8 * kMtu;  // the connection's: 4 packets on each of its 2 paths
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 16 * kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024",
                                   "path 1 WRITE psn 0 msg 0 off 1024 len 1024",
                                   "path 0 WRITE psn 1 msg 0 off 2048 len 1024",
                                   "path 1 WRITE psn 1 msg 0 off 3072 len 1024",
                                   "path 0 WRITE psn 2 msg 0 off 4096 len 1024",
                                   "path 1 WRITE psn 2 msg 0 off 5120 len 1024",
                                   "path 0 WRITE psn 3 msg 0 off 6144 len 1024 ACK_REQ",
                                   "path 1 WRITE psn 3 msg 0 off 7168 len 1024 ACK_REQ"));
  for (uint16_t p : {0, 1}) {
    EXPECT_EQ(r.conn.path_stats(p).inflight_bytes, 4096u);
    EXPECT_EQ(r.conn.path_stats(p).cwnd_bytes, 4096u);
  }
  // Two packets acknowledged: in slow start cwnd grows by the 2048 bytes to 6144; with 2048
  // still in flight, four more fit, the last one filling the window. PSN 3 asked for an ACK
  // that has not come yet, so PSN 7 does not ask again ([R3]).
  r.Feed(At(10 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r.conn.path_stats(0).cwnd_bytes, 6144u);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 4 msg 0 off 8192 len 1024",
                                   "path 0 WRITE psn 5 msg 0 off 9216 len 1024",
                                   "path 0 WRITE psn 6 msg 0 off 10240 len 1024",
                                   "path 0 WRITE psn 7 msg 0 off 11264 len 1024"));
  EXPECT_EQ(r.conn.path_stats(0).inflight_bytes, 6144u);
  EXPECT_EQ(r.conn.path_stats(1).inflight_bytes, 4096u);
  // The ACK for PSN 3 answers that request: the next fill asks again.
  r.Feed(At(11 * kUs), Requester::Ack(0, 4, 3));
  EXPECT_EQ(r.conn.path_stats(0).cwnd_bytes, 8192u);
  // (The message's last two packets, fewer than the two paths after each: [R3]'s tail rule.)
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 8 msg 0 off 12288 len 1024",
                                   "path 0 WRITE psn 9 msg 0 off 13312 len 1024",
                                   "path 0 WRITE psn 10 msg 0 off 14336 len 1024 ACK_REQ",
                                   "path 0 WRITE psn 11 msg 0 off 15360 len 1024 ACK_REQ"));
}

TEST(Sender_Pacing, AWindowBelowOnePacketIsARate) {
  // congestion.md §1: a window of half a packet sends one packet per two RTTs, whatever the ACKs
  // say in between, the first at the connection's phase within that interval.
  ConnectionConfig c = RequesterConfig(1);
  c.min_cwnd_bytes = c.initial_window_bytes = c.max_cwnd_bytes = 512;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 8 * kMtu);
  std::vector<int64_t> sent_us;
  uint32_t next_psn = 0;
  for (int64_t us = 0; us <= 200; ++us) {
    const Instant now = At(us * kUs);
    if (r.conn.NextDeadline() <= now) r.conn.OnTimer(now);
    for (const std::string& line : r.Log()) {
      EXPECT_THAT(line, StartsWith("path 0 WRITE psn " + std::to_string(next_psn) + " "));
      sent_us.push_back(us);
      ++next_psn;
    }
    // Every packet is acknowledged 5 us after it left.
    if (!sent_us.empty() && sent_us.back() + 5 == us) {
      r.Feed(now, Requester::Ack(0, next_psn, next_psn - 1));
    }
  }
  // Before any RTT sample the interval is initial_rtt x 1024 / 512 = 20 us; with samples of
  // 5 us it is 10 us, reached by halving at most once per packet.
  ASSERT_GE(sent_us.size(), 8u);
  EXPECT_LT(sent_us[0], 20);
  for (size_t i = 1; i < sent_us.size(); ++i) {
    EXPECT_GE(sent_us[i] - sent_us[i - 1], 10) << "packet " << i;
    EXPECT_LE(sent_us[i] - sent_us[i - 1], 20) << "packet " << i;
  }
  EXPECT_LE(sent_us.back() - sent_us[1], 10 * static_cast<int64_t>(sent_us.size() - 2) + 10);
}

TEST(Sender_WindowHint, AShareOfPacketsCapsTheConnectionNotEachPath) {
  // congestion.md §1: a hint of 2.5 packets per path lets the connection have 10 packets in
  // flight over its 4 paths, spread as their windows allow (a per-path cap would allow 8).
  ConnectionConfig c = RequesterConfig(4);
  c.initial_window_bytes = 32 * kMtu;  // cwnd 8 packets per path
  c.initial_window_hint_bytes = 10 * kMtu;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 16 * kMtu);
  EXPECT_THAT(r.Log(), SizeIs(10));
  uint32_t inflight = 0, most = 0;
  for (uint16_t p = 0; p < 4; ++p) {
    inflight += r.conn.path_stats(p).inflight_bytes;
    most = std::max(most, r.conn.path_stats(p).inflight_bytes);
  }
  EXPECT_EQ(inflight, 10 * kMtu);
  EXPECT_EQ(most, 3 * kMtu);
  // Two packets acknowledged on path 0, with the same share: two more go.
  wire::Packet ack = Requester::Ack(0, 2, 1);
  ack.ack.window_hint = 10 * kMtu / 4;
  r.Feed(At(5 * kUs), ack);
  EXPECT_THAT(r.Log(), SizeIs(2));
}

TEST(Sender_WindowHint, AnOfferAboveTheInitialWindowIsTheFirstWindow) {
  // congestion.md §1: the responder granted its offer for the first RTT; below the initial
  // window the offer caps it as a hint instead.
  ConnectionConfig c = RequesterConfig(4);
  c.initial_window_bytes = 8 * kMtu;           // 2 packets per path
  c.min_cwnd_bytes = kMtu;
  c.initial_window_hint_bytes = 4 * 6 * kMtu;  // the offer: 6 packets per path
  Requester offered(c);
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(offered.conn.path_stats(p).cwnd_bytes, 6 * kMtu);
  offered.PostWrite(At(0 * kUs), 1, 32 * kMtu);
  EXPECT_THAT(offered.Log(), SizeIs(24));
  c.initial_window_hint_bytes = 4 * kMtu;  // the offer: 1 packet per path
  Requester small(c);
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(small.conn.path_stats(p).cwnd_bytes, 2 * kMtu);
  small.PostWrite(At(0 * kUs), 1, 32 * kMtu);
  EXPECT_THAT(small.Log(), SizeIs(4));
}

TEST(Sender_WindowHint, TheLatestHintOnAnyPathIsEveryPathsShare) {
  // congestion.md §5: the responder's share reaches every path with the first ACK of any, and a
  // path's window is min(cwnd, hint) down to below one packet.
  ConnectionConfig c = RequesterConfig(4);
  c.initial_window_hint_bytes = 4 * 8 * kMtu;  // the set-up offer: 8 packets per path
  Requester r(c);
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(r.conn.path_stats(p).window_hint_bytes, 8 * kMtu);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r.Log();
  wire::Packet ack = Requester::Ack(0, 1, 0);
  ack.ack.window_hint = 300;
  r.Feed(At(5 * kUs), ack);
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(r.conn.path_stats(p).window_hint_bytes, 300u);
  // An ACK that fails the checks (it acknowledges PSNs never sent) says nothing, its hint either.
  wire::Packet bogus = Requester::Ack(1, 100, 99);
  bogus.ack.window_hint = 99'999;
  r.Feed(At(5 * kUs), bogus);
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(r.conn.path_stats(p).window_hint_bytes, 300u);
  // Path 0 is empty and its window is below one packet: no burst after the ACK, one packet when
  // its pacing allows, which is later (a timer), and then no more until it is acknowledged.
  r.PostWrite(At(5 * kUs), 2, 4 * kMtu);
  EXPECT_THAT(r.Log(), ::testing::IsEmpty());
  const Instant due = r.conn.NextDeadline();
  ASSERT_GT(due, At(5 * kUs));
  r.conn.OnTimer(due);
  EXPECT_THAT(r.Log(), ElementsAre(StartsWith("path 0 WRITE psn 1 msg 1 off 0 ")));
  // The next timer is the tail-loss probes of paths 1-3 (message 0): no new data of message 1.
  r.conn.OnTimer(r.conn.NextDeadline());
  EXPECT_THAT(r.Log(), ::testing::Each(::testing::Not(::testing::HasSubstr(" msg 1 "))));
}

ConnectionConfig ManySmallPackets() {
  ConnectionConfig c = RequesterConfig(1);
  c.mtu = 64;
  c.min_cwnd_bytes = 64;
  c.initial_window_bytes = 1u << 20;
  return c;
}

TEST(Sender_PsnWindow, AtMost256PsnsOutstandingPerPath) {
  Requester r(ManySmallPackets());
  r.PostWrite(At(0 * kUs), 1, 300 * 64);
  EXPECT_THAT(r.sink.packets(), SizeIs(256));
  EXPECT_THAT(testing::Describe(r.sink.packets().back().packet), StartsWith("path 0 WRITE psn 255 "));
  r.sink.Clear();
  r.Feed(At(10 * kUs), Requester::Ack(0, 10, 9));
  const std::vector<std::string> log = r.Log();
  ASSERT_THAT(log, SizeIs(10));
  EXPECT_EQ(log.front(), "path 0 WRITE psn 256 msg 0 off 16384 len 64");
  EXPECT_THAT(log.back(), StartsWith("path 0 WRITE psn 265 msg 0 off 16960 len 64"));
}

// paths-and-recovery.md §2.2: ACK_REQ MUST be set on a packet after which the path cannot send
// another one, including when next_psn - snd_una reaches 256.
TEST(Sender_AckRequest, SetWhenThePsnWindowFills) {
  Requester r(ManySmallPackets());
  r.PostWrite(At(0 * kUs), 1, 300 * 64);
  ASSERT_THAT(r.sink.packets(), SizeIs(256));
  EXPECT_TRUE(r.sink.packets()[255].packet.flags & wire::flags::kAckRequest);
  for (int i = 0; i < 255; ++i) {
    EXPECT_FALSE(r.sink.packets()[i].packet.flags & wire::flags::kAckRequest) << i;
  }
}

TEST(Sender_WindowHint, CapsAPathsWindow) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 32 * kMtu);
  ASSERT_THAT(r.Log(), SizeIs(32));
  wire::Packet ack = Requester::Ack(0, 32, 31);
  ack.ack.window_hint = 4096;
  r.Feed(At(10 * kUs), ack);
  EXPECT_EQ(r.conn.path_stats(0).window_hint_bytes, 4096u);
  r.PostWrite(At(11 * kUs), 2, 16 * kMtu);
  EXPECT_THAT(r.Log(), SizeIs(4));
  EXPECT_EQ(r.conn.path_stats(0).inflight_bytes, 4096u);
  // A hint of 0 lifts the cap.
  wire::Packet no_hint = Requester::Ack(0, 34, 33);
  r.Feed(At(20 * kUs), no_hint);
  EXPECT_EQ(r.conn.path_stats(0).window_hint_bytes, 0u);
  EXPECT_THAT(r.Log(), SizeIs(12));
}

TEST(Sender_Ecn, EchoedMarksReduceTheWindow) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 8 * kMtu);
  r.Feed(At(10 * kUs), Requester::Ack(0, 4, 3));
  const uint32_t before = r.conn.path_stats(0).cwnd_bytes;
  EXPECT_GT(before, 64u * 1024);  // unmarked: the window grew
  wire::Packet marked = Requester::Ack(0, 8, 7);
  marked.ack.ce_count = 4;  // all four newly acknowledged packets were marked
  r.Feed(At(30 * kUs), marked);
  const PathStats s = r.conn.path_stats(0);
  EXPECT_EQ(s.ce_marks, 4u);
  EXPECT_DOUBLE_EQ(s.ecn_fraction, 1.0 / 16);
  EXPECT_EQ(s.cwnd_bytes, static_cast<uint32_t>(before * (1 - 1.0 / 32)));
}

// congestion.md §2: Δce = ce_count − last, where last starts at 0 (the responder's count starts
// at 0): marks echoed in the first ACK of a path count.
TEST(Sender_Ecn, MarksInTheFirstAckCount) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  wire::Packet ack = Requester::Ack(0, 4, 3);
  ack.ack.ce_count = 3;
  r.Feed(At(10 * kUs), ack);
  EXPECT_EQ(r.conn.path_stats(0).ce_marks, 3u);
  EXPECT_GT(r.conn.path_stats(0).ecn_fraction, 0.0);
}

// congestion.md §2: "a new ACK contributes Δce = ce_count − last if that signed 32-bit difference
// is positive (reordered ACKs contribute 0)", and the highest ce_count is kept.
TEST(Sender_Ecn, ReorderedAckContributesNoMarks) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 8 * kMtu);
  wire::Packet a0 = Requester::Ack(0, 2, 1);
  wire::Packet a3 = Requester::Ack(0, 4, 3);
  a3.ack.ce_count = 3;
  wire::Packet a5 = Requester::Ack(0, 6, 5);
  a5.ack.ce_count = 5;
  wire::Packet a6 = Requester::Ack(0, 8, 7);
  a6.ack.ce_count = 6;
  r.Feed(At(10 * kUs), a0);
  r.Feed(At(11 * kUs), a5);
  r.Feed(At(12 * kUs), a3);  // overtaken by a5 on the way back
  EXPECT_EQ(r.conn.path_stats(0).ce_marks, 5u);
  r.Feed(At(13 * kUs), a6);
  EXPECT_EQ(r.conn.path_stats(0).ce_marks, 6u);
}

// ---------------------------------------------------------------------------------------------
// Loss recovery

TEST(Sender_Gap, RetransmitsExactlyTheMissingPsnOnItsPathOnce) {
  Requester r(RequesterConfig(2));
  r.PostWrite(At(0 * kUs), 1, 8 * kMtu);
  r.sink.Clear();
  r.Feed(At(10 * kUs), Requester::Ack(1, 1, 2, {2}));  // PSN 1 of path 1 is missing
  EXPECT_THAT(r.Log(), ElementsAre("path 1 WRITE psn 1 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  r.Feed(At(11 * kUs), Requester::Ack(1, 1, 3, {2, 3}));  // same gap, older news
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_EQ(r.conn.counters().gap_retransmits, 1u);
  EXPECT_EQ(r.conn.path_stats(1).retransmits, 1u);
  EXPECT_EQ(r.conn.path_stats(0).retransmits, 0u);
  r.Feed(At(20 * kUs), Requester::Ack(1, 4, 1));
  r.Feed(At(20 * kUs), Requester::Ack(0, 4, 3));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
  EXPECT_THAT(r.Log(), IsEmpty());
}

// [R4] A retransmission is a transmission like any other: when a packet sent after it is
// delivered and it is not, it was lost too, and the PSN is sent a third time. Each
// transmission is judged once, in the order it was made (the PSN cursor for first
// transmissions, the retransmission list for the others), so an ACK costs the losses it
// reveals, not a walk of the window.
TEST(Sender_Gap, ALostRetransmissionIsDetectedByTheDeliveriesAfterIt) {
  Requester r(RequesterConfig(1));
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);  // psn 0-3 (orders 1-4)
  r.sink.Clear();
  r.Feed(At(10 * kUs), Requester::Ack(0, 0, 2, {1, 2}));  // psn 0 missing: resent (order 5)
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024 ACK_REQ RETX"));
  r.PostWrite(At(11 * kUs), 2, 2 * kMtu);  // psn 4-5 (orders 6-7)
  r.sink.Clear();
  r.Feed(At(12 * kUs), Requester::Ack(0, 0, 3, {1, 2, 3}));  // nothing sent after order 5 yet
  EXPECT_THAT(r.Log(), IsEmpty());
  r.Feed(At(20 * kUs), Requester::Ack(0, 0, 4, {1, 2, 3, 4}));  // order 6 arrived, 5 did not
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024 ACK_REQ RETX"));
  r.Feed(At(21 * kUs), Requester::Ack(0, 0, 5, {1, 2, 3, 4, 5}));  // order 7: the third copy
  EXPECT_THAT(r.Log(), IsEmpty());                                  // (order 8) is not late
  EXPECT_EQ(r.conn.counters().gap_retransmits, 2u);
  r.Feed(At(30 * kUs), Requester::Ack(0, 6, 0));
  EXPECT_THAT(r.CompletedIds(), UnorderedElementsAre(1, 2));
}

TEST(Sender_Pto, TailLossProbeAtTheComputedTimeWithDoublingBackoff) {
  ConnectionConfig c = RequesterConfig(1);
  c.fail_after_timeouts = 10;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r.sink.Clear();
  // RTT sample 20 us: srtt 20, rttvar 10, PTO = 20 + 4 * 10 = 60 us from this ACK.
  r.Feed(At(20 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r.conn.NextDeadline(), At(80 * kUs));
  r.conn.OnTimer(At(80 * kUs) + Duration(-1));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.conn.OnTimer(At(80 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kSuspect);
  EXPECT_EQ(r.conn.NextDeadline(), At(200 * kUs));  // 2 x 60 us
  r.conn.OnTimer(At(200 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.NextDeadline(), At(440 * kUs));  // 4 x 60 us
  EXPECT_EQ(r.conn.counters().timeout_retransmits, 2u);
  EXPECT_EQ(r.conn.path_stats(0).timeouts, 2u);
  // Progress: back to Active, nothing outstanding, no timer.
  r.Feed(At(450 * kUs), Requester::Ack(0, 4, 3));
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kActive);
  EXPECT_EQ(r.conn.NextDeadline(), kNever);
  EXPECT_THAT(r.Events(), ElementsAre("path 0 active->suspect timeout @80us",
                                      "path 0 suspect->active progress @450us"));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
}

// [R5] A path's probe timeout is never shorter than twice the connection's peak RTT: path 0's own
// estimator says 10 us, but path 1 just took 60 us, and a packet may meet that queue too.
TEST(Sender_Pto, IsAtLeastTwiceTheConnectionsPeakRtt) {
  Requester r(RequesterConfig(2));
  r.PostWrite(At(0 * kUs), 1, 2 * kMtu);          // psn 0 on each path
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));  // path 0: 10 us
  r.Feed(At(60 * kUs), Requester::Ack(1, 1, 0));  // path 1: 60 us, the peak
  r.Log();
  r.PostWrite(At(61 * kUs), 2, kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ"));
  // max(50 us floor, 60 + 4 x 5 us (latest + path 0's rttvar), 2 x 60 us) after 61 us.
  EXPECT_EQ(r.conn.NextDeadline(), At(181 * kUs));
}

// [R5d] Once nothing more waits, each path probes its tail: first when its newest packet is
// overdue (an RTT after it was sent, plus a quarter of the minimum RTT, and an ACK delay unless it
// asked for an ACK), then two
// RTTs and an ACK delay after each probe, up to three probes: a guess, not evidence against it.
TEST(Sender_TailProbe, ProbesThePathsNewestPacketOnceOverdueWithoutSuspectingIt) {
  ConnectionConfig c = RequesterConfig(1);
  c.tail_probes = true;
  c.fail_after_timeouts = 10;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r.sink.Clear();
  // RTT sample 20 us (min 20): psn 3, sent at 0 with ACK_REQ (answered at once: no delayed ACK
  // to wait out), is overdue at 20 + 5 = 25 us, before the ordinary deadline (20 + 60 us).
  r.Feed(At(20 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r.conn.NextDeadline(), At(25 * kUs));
  r.conn.OnTimer(At(25 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kActive);
  EXPECT_EQ(r.conn.path_stats(0).timeouts, 0u);
  EXPECT_EQ(r.conn.counters().tail_probes, 1u);
  EXPECT_EQ(r.conn.counters().timeout_retransmits, 0u);
  // A probe is lost like any packet: two more, 2 x 20 + 4 us apart.
  EXPECT_EQ(r.conn.NextDeadline(), At(69 * kUs));
  r.conn.OnTimer(At(69 * kUs));
  EXPECT_EQ(r.conn.NextDeadline(), At(113 * kUs));
  r.conn.OnTimer(At(113 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX",
                                   "path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.counters().tail_probes, 3u);
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kActive);
  // Then the ordinary deadline, 60 us after the last probe, which does count.
  EXPECT_EQ(r.conn.NextDeadline(), At(173 * kUs));
  r.conn.OnTimer(At(173 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kSuspect);
  EXPECT_EQ(r.conn.counters().timeout_retransmits, 1u);
  // Progress shows psn 2 lost (resent at once, [R4]), and the path may probe its tail again:
  // the resent psn 2 (ACK_REQ) is overdue 25 us after it went.
  r.Feed(At(180 * kUs), Requester::Ack(0, 2, 3, {3}));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 2 msg 0 off 2048 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kActive);
  EXPECT_EQ(r.conn.NextDeadline(), At(205 * kUs));
  EXPECT_EQ(r.conn.counters().tail_probes, 3u);
}

// A connection its responder clocks (a share below one packet: paced) has sent everything: its
// newest packet is overdue like any other (an RTT after it went, plus a quarter of the minimum
// RTT; no ACK delay, as it asked for an ACK), the RTT being at least the connection's peak.
TEST(Sender_TailProbe, AClockedConnectionsNewestPacketIsOverdueAfterAnRtt) {
  ConnectionConfig c = RequesterConfig(1);
  c.tail_probes = true;
  c.initial_window_hint_bytes = 300;  // below a packet: paced
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 2 * kMtu);
  const Instant first = r.conn.NextDeadline();  // the pace's phase
  r.conn.OnTimer(first);
  EXPECT_THAT(r.Log(), ElementsAre(HasSubstr("psn 0")));
  wire::Packet ack = Requester::Ack(0, 1, 0);
  ack.ack.window_hint = 300;
  r.Feed(first + 20 * kUs, ack);  // RTT 20 us
  const Instant paced = r.conn.NextDeadline();  // the pace allows psn 1, the last
  r.conn.OnTimer(paced);
  EXPECT_THAT(r.Log(), ElementsAre(HasSubstr("psn 1")));
  EXPECT_EQ(r.conn.NextDeadline(), paced + 25 * kUs);
}

// [R5d] RACK's rule across paths: once a packet sent after a path's newest one is delivered on a
// sibling, that newest packet is overdue after the sibling's RTT plus the margin between the two
// paths, not after the connection's latest RTT sample (here a queue's, 40 us, on path 2).
TEST(Sender_TailProbe, ASiblingsLaterDeliveryBringsTheProbeForward) {
  ConnectionConfig c = RequesterConfig(3);
  c.tail_probes = true;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 3 * kMtu);  // psn 0 on each path
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  r.Feed(At(10 * kUs), Requester::Ack(1, 1, 0));
  r.Feed(At(40 * kUs), Requester::Ack(2, 1, 0));  // the latest sample: 40 us
  r.Log();
  r.PostWrite(At(50 * kUs), 2, kMtu);
  r.PostWrite(At(52 * kUs), 3, kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ",
                                   "path 1 WRITE psn 1 msg 2 off 0 len 1024 ACK_REQ"));
  // Path 0's psn 1 alone is overdue 40 us (the latest sample) + 2.5 us (a quarter of its
  // minimum RTT) after it went.
  EXPECT_EQ(r.conn.NextDeadline(), At(92500 * kUs / 1000));
  // Path 1's psn 1, sent 2 us later, arrives after 10 us: path 0's is overdue at 50 + 10 + 2.5.
  r.Feed(At(62 * kUs), Requester::Ack(1, 2, 1));
  EXPECT_EQ(r.conn.NextDeadline(), At(62500 * kUs / 1000));
  r.conn.OnTimer(At(62500 * kUs / 1000));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.counters().tail_probes, 1u);
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kActive);
}

TEST(Sender_TailProbe, NoneWhileDataWaitsToBeSent) {
  ConnectionConfig c = RequesterConfig(1);
  c.tail_probes = true;
  // Everything sent: the tail probe is due when the last packet (ACK_REQ) is overdue, the initial
  // RTT (10 us) and the margin before a sample (another 10 us) after it went.
  Requester all_sent(c);
  all_sent.PostWrite(At(0 * kUs), 1, 2 * kMtu);
  EXPECT_EQ(all_sent.conn.NextDeadline(), At(20 * kUs));
  // Two packets sent, six wait for the window: only the ordinary deadline (the 50 us floor).
  c.initial_window_bytes = 2 * kMtu;
  c.min_cwnd_bytes = kMtu;
  Requester waiting(c);
  waiting.PostWrite(At(0 * kUs), 1, 8 * kMtu);
  EXPECT_THAT(waiting.Log(), SizeIs(2));
  EXPECT_EQ(waiting.conn.NextDeadline(), At(50 * kUs));
}

// [paths-and-recovery §7.3] Every packet sent is acknowledged 10 us later, its ACK carrying a CE
// mark when `marked(path)`; returns the connection's path events.
std::vector<std::string> RunMarked(const std::function<bool(uint16_t)>& marked) {
  ConnectionConfig c = RequesterConfig(4);
  c.ecn_gain = 1;  // alpha = the latest window's marked fraction
  c.degraded_hold = 30 * kUs;
  c.initial_window_bytes = 16 * kMtu;  // 4 packets per path per round: 8 rounds of data
  c.max_cwnd_bytes = 4 * kMtu;
  Requester r(c);
  for (uint32_t i = 0; i < 8; ++i) r.PostWrite(At(0 * kUs), i + 1, 16 * kMtu);
  std::array<uint32_t, 4> ce{};
  for (int step = 1; step <= 40; ++step) {
    const std::vector<RecordedPacket> sent = r.sink.packets();
    r.sink.Clear();
    for (const RecordedPacket& x : sent) {
      if (!wire::IsData(x.packet.opcode)) continue;
      const uint16_t path = x.packet.path_id;
      wire::Packet a = Requester::Ack(path, x.packet.psn + 1, x.packet.psn);
      if (marked(path)) ++ce[path];
      a.ack.ce_count = ce[path];
      r.Feed(At(step * 10 * kUs), a);
    }
  }
  return r.Events();
}

TEST(Sender_Congestion, APathMarkedAloneRotatesAfterTheHold) {
  const std::vector<std::string> events = RunMarked([](uint16_t path) { return path == 2; });
  EXPECT_THAT(events, Contains(HasSubstr("path 2 rotated persistent_congestion")));
  EXPECT_THAT(events, Not(Contains(HasSubstr("path 0"))));
}

TEST(Sender_Congestion, PathsMarkedTogetherShareTheQueueAndNoneRotates) {
  // An incast's queue is the responder's link: every path is marked, and no port avoids it.
  EXPECT_THAT(RunMarked([](uint16_t) { return true; }), IsEmpty());
}

// Two paths; path 0 delivers, path 1 is black-holed from t=0. PTOs of path 1 expire at 50, 150
// and 350 us (50 us doubling); the third is fail_after_timeouts = 3.
std::unique_ptr<Requester> PathOneAboutToFail() {
  auto r = std::make_unique<Requester>(RequesterConfig(2));
  r->PostWrite(At(0 * kUs), 1, 4 * kMtu);
  EXPECT_THAT(r->Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024",
                                    "path 1 WRITE psn 0 msg 0 off 1024 len 1024",
                                    "path 0 WRITE psn 1 msg 0 off 2048 len 1024 ACK_REQ",
                                    "path 1 WRITE psn 1 msg 0 off 3072 len 1024 ACK_REQ"));
  r->Feed(At(10 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r->conn.NextDeadline(), At(50 * kUs));
  r->conn.OnTimer(At(50 * kUs));
  EXPECT_EQ(r->conn.NextDeadline(), At(150 * kUs));
  r->conn.OnTimer(At(150 * kUs));
  EXPECT_THAT(r->Log(), ElementsAre("path 1 WRITE psn 1 msg 0 off 3072 len 1024 ACK_REQ RETX",
                                    "path 1 WRITE psn 1 msg 0 off 3072 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r->conn.NextDeadline(), At(350 * kUs));
  return r;
}

// By default a path fails on its fourth expiry without progress: at 1 % loss each way a round
// trip fails 2 % of the time, and three in a row after a loss (one in 2,500 losses) failed a path
// in two runs of three of 1,000 connections between two hosts.
TEST(Sender_Health, ByDefaultThreeExpiriesDoNotFailAPath) {
  ConnectionConfig c = RequesterConfig(2);
  c.fail_after_timeouts = ConnectionConfig{}.fail_after_timeouts;
  c.fail_after_overtaken = ConnectionConfig{}.fail_after_overtaken;
  ASSERT_EQ(c.fail_after_timeouts, 4u);
  ASSERT_EQ(c.fail_after_overtaken, 4u);
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r.Feed(At(10 * kUs), Requester::Ack(0, 2, 1));  // path 0 delivers, path 1 is silent
  for (const int us : {50, 150, 350}) r.conn.OnTimer(At(us * kUs));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kSuspect);
  EXPECT_EQ(r.conn.NextDeadline(), At(750 * kUs));
  r.conn.OnTimer(At(750 * kUs));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kProbing);  // failed, rotated, probing
}

TEST(Sender_Health, FailedPathReroutesRotatesProbesAndComesBack) {
  std::unique_ptr<Requester> r = PathOneAboutToFail();
  r->conn.OnTimer(At(350 * kUs));
  // The data of path 1 goes out again on path 0 under new PSNs; path 1 probes on a new port.
  std::vector<std::tuple<uint16_t, uint32_t, uint32_t>> moved;
  std::vector<std::string> probes;
  for (const RecordedPacket& p : r->sink.packets()) {
    if (p.packet.opcode == wire::Opcode::kProbe) probes.push_back(testing::Describe(p.packet));
    if (wire::IsData(p.packet.opcode) && p.packet.path_id == 0) {
      moved.emplace_back(p.packet.path_id, p.packet.psn, p.packet.data.offset);
    }
  }
  r->sink.Clear();
  EXPECT_THAT(probes, ElementsAre("path 1 PROBE psn 2"));  // psn = snd_una = next_psn
  EXPECT_THAT(moved, ElementsAre(std::make_tuple(0, 2u, 1024u), std::make_tuple(0, 3u, 3072u)));
  EXPECT_EQ(r->conn.counters().rerouted_packets, 2u);

  std::vector<PathEvent> events = r->RawEvents();
  std::vector<std::string> lines;
  for (const PathEvent& e : events) lines.push_back(EventLine(e));
  EXPECT_THAT(lines, ElementsAre("path 1 active->suspect timeout @50us",
                                 "path 1 suspect->failed failed @350us",
                                 "path 1 rotated failed @350us",
                                 "path 1 failed->probing failed @350us"));
  ASSERT_THAT(events, SizeIs(4));
  EXPECT_EQ(events[2].old_port, 49153);
  EXPECT_NE(events[2].new_port, 49153);
  EXPECT_NE(events[2].new_port, 49152);
  PathStats s1 = r->conn.path_stats(1);
  EXPECT_EQ(s1.state, PathState::kProbing);
  EXPECT_EQ(s1.src_port, events[2].new_port);
  EXPECT_EQ(s1.inflight_bytes, 0u);
  EXPECT_EQ(s1.rotations, 1u);

  // The probe is answered: Active again, and new data uses the PSN the responder now expects.
  r->Feed(At(360 * kUs), Requester::Ack(1, 2, 2, {}, wire::flags::kProbeReply));
  EXPECT_THAT(r->Events(), ElementsAre("path 1 probing->active probe_reply @360us"));
  r->Feed(At(365 * kUs), Requester::Ack(0, 4, 3));
  EXPECT_THAT(r->CompletedIds(), ElementsAre(1));
  r->PostWrite(At(370 * kUs), 2, 2 * kMtu);
  EXPECT_THAT(r->Log(), ElementsAre("path 1 WRITE psn 2 msg 1 off 0 len 1024 ACK_REQ",
                                    "path 0 WRITE psn 4 msg 1 off 1024 len 1024 ACK_REQ"));
}

// [R5a] Two paths, a probe-timeout floor of 10 ms (a software host's), path 1 black-holed from
// t=0. Path 0's packet sent at 40 us is acknowledged while path 1's oldest packet (sent at 0) is
// overdue by more than the paths' difference in delay allows (0) plus the reorder allowance (its
// srtt before a sample, 10 us) and the ACK delay (4 us): its timeout is pulled forward to one
// ACK delay later. That expiry sends the tail-loss probe and [R5b] hedges path 1's two data
// units on path 0. From then on path 1's timer runs at its expected delay (10 + 10 + 4 us), and
// its expiries count while path 0 makes progress; the one that reaches fail_after_overtaken
// fails the path, long before the floor.
std::unique_ptr<Requester> PathOneOvertaken(uint32_t fail_after_overtaken = 3) {
  ConnectionConfig c = RequesterConfig(2);
  c.min_probe_timeout = std::chrono::milliseconds(10);
  c.fail_after_overtaken = fail_after_overtaken;
  auto r = std::make_unique<Requester>(c);
  r->PostWrite(At(0 * kUs), 1, 2 * kMtu);  // psn 0 on each path
  r->Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  EXPECT_EQ(r->conn.NextDeadline(), At(0 * kUs) + std::chrono::milliseconds(10));  // path 1's
  r->sink.Clear();
  r->PostWrite(At(40 * kUs), 2, kMtu);
  r->PostWrite(At(41 * kUs), 3, kMtu);
  EXPECT_THAT(r->Log(), ElementsAre("path 0 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ",
                                    "path 1 WRITE psn 1 msg 2 off 0 len 1024 ACK_REQ"));
  r->Feed(At(50 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r->conn.NextDeadline(), At(54 * kUs));
  r->RunTimersUntil(At(54 * kUs));
  EXPECT_THAT(r->Log(), ElementsAre("path 1 WRITE psn 1 msg 2 off 0 len 1024 ACK_REQ RETX",
                                    "path 0 WRITE psn 2 msg 0 off 1024 len 1024 ACK_REQ RETX",
                                    "path 0 WRITE psn 3 msg 2 off 0 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r->conn.path_stats(1).state, PathState::kSuspect);
  EXPECT_EQ(r->conn.counters().hedged_packets, 2u);
  return r;
}

// [R5b] An overtaken path whose latest ACK, within two of its RTTs, carried a CE mark is slow
// behind a queue, not lost: its expiry hedges nothing. The same path without the mark is hedged.
TEST(Sender_Health, AnOvertakenPathBehindAQueueIsNotHedged) {
  for (const bool marked : {true, false}) {
    SCOPED_TRACE(marked ? "marked" : "not marked");
    ConnectionConfig c = RequesterConfig(2);
    c.min_probe_timeout = std::chrono::milliseconds(10);
    Requester r(c);
    r.PostWrite(At(0 * kUs), 1, 4 * kMtu);          // psn 0 and 1 on each path
    r.Feed(At(10 * kUs), Requester::Ack(0, 2, 1));  // path 0: RTT 10 us
    r.Feed(At(38 * kUs), Requester::Ack(1, 1, 0));  // path 1: RTT 38 us, behind a queue
    wire::Packet last = Requester::Ack(1, 2, 1);
    last.ack.ce_count = marked ? 1 : 0;
    r.Feed(At(40 * kUs), last);
    r.sink.Clear();
    r.PostWrite(At(41 * kUs), 2, 2 * kMtu);  // psn 2 on each path
    r.PostWrite(At(90 * kUs), 3, 2 * kMtu);  // psn 3 on each path
    // Path 0's packet sent at 90 us arrives: path 1's sent at 41 us is overdue by more than the
    // paths' difference in delay (28 us), a quarter of its min RTT and the ACK delay.
    r.Feed(At(100 * kUs), Requester::Ack(0, 4, 3));
    EXPECT_EQ(r.conn.NextDeadline(), At(104 * kUs));
    r.Log();
    r.conn.OnTimer(At(104 * kUs));
    EXPECT_EQ(r.conn.counters().hedged_packets, marked ? 0u : 2u);
  }
}

TEST(Sender_Health, APathOvertakenBySiblingsTimesOutWithoutWaitingForTheFloor) {
  std::unique_ptr<Requester> r = PathOneOvertaken(/*fail_after_overtaken=*/3);
  // [R5b] the hedges arrive: every message is complete while path 1 is still Suspect.
  r->Feed(At(60 * kUs), Requester::Ack(0, 4, 3));
  EXPECT_THAT(r->CompletedIds(), ElementsAre(2, 1, 3));
  EXPECT_EQ(r->conn.NextDeadline(), At(78 * kUs));
  r->RunTimersUntil(At(78 * kUs));  // its data is home: the tail-loss probe is a FILLER [R8]
  EXPECT_THAT(r->Log(), ElementsAre("path 1 WRITE psn 1 msg 2 off 0 len 0 ACK_REQ RETX FILLER"));
  EXPECT_EQ(r->conn.NextDeadline(), At(102 * kUs));
  r->RunTimersUntil(At(102 * kUs));  // the third expiry fails the path (§6.1 step 3)
  EXPECT_THAT(r->Events(), ElementsAre("path 1 active->suspect timeout @54us",
                                       "path 1 suspect->failed failed @102us",
                                       "path 1 rotated failed @102us",
                                       "path 1 failed->probing failed @102us"));
  EXPECT_EQ(r->conn.counters().rerouted_packets, 0u);  // nothing was left to move
}

// [R5a] With fail_after_overtaken 2 (the default is 3), the second expiry of an overtaken path
// fails it; a blind timeout would need fail_after_timeouts (3).
TEST(Sender_Health, AnOvertakenPathCanFailAfterFewerExpiries) {
  std::unique_ptr<Requester> r = PathOneOvertaken(/*fail_after_overtaken=*/2);
  r->Feed(At(60 * kUs), Requester::Ack(0, 4, 3));
  r->RunTimersUntil(At(78 * kUs));
  EXPECT_THAT(r->Events(), ElementsAre("path 1 active->suspect timeout @54us",
                                       "path 1 suspect->failed failed @78us",
                                       "path 1 rotated failed @78us",
                                       "path 1 failed->probing failed @78us"));
}

// Four paths on two planes (even paths on plane 0), a probe-timeout floor of 10 ms. One message
// puts psn 0 on each path at t=0; only paths `live_a` and `live_b` acknowledge it, at 10 us.
std::unique_ptr<Requester> FourPathsOnTwoPlanes(uint16_t live_a, uint16_t live_b) {
  ConnectionConfig c = RequesterConfig(4);
  c.plane_count = 2;
  c.min_probe_timeout = std::chrono::milliseconds(10);
  auto r = std::make_unique<Requester>(c);
  r->PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r->Feed(At(10 * kUs), Requester::Ack(live_a, 1, 0));
  r->Feed(At(10 * kUs), Requester::Ack(live_b, 1, 0));
  return r;
}

// [R5a] Paths 1 and 2 die at once, one on each plane, and each plane still has a live path:
// each dead path fails at the overtaken pace, together, on its plane sibling's progress. Their
// data is hedged on that sibling [R5b].
TEST(Sender_Health, SeveralDeadPathsFailTogetherWhileTheirPlanesDeliver) {
  std::unique_ptr<Requester> rp = FourPathsOnTwoPlanes(0, 3);
  Requester& r = *rp;
  // Fewest bytes in flight first: offsets 0 and 1024 on the idle paths 0 and 3, then 2048 on
  // path 0 and 3072 on path 1 in round-robin order; path 2 gets none.
  r.Log();
  r.PostWrite(At(40 * kUs), 2, 4 * kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 1 msg 1 off 0 len 1024 ACK_REQ",
                                   "path 3 WRITE psn 1 msg 1 off 1024 len 1024 ACK_REQ",
                                   "path 0 WRITE psn 2 msg 1 off 2048 len 1024 ACK_REQ",
                                   "path 1 WRITE psn 1 msg 1 off 3072 len 1024 ACK_REQ"));
  r.Feed(At(50 * kUs), Requester::Ack(0, 2, 1));
  r.Feed(At(50 * kUs), Requester::Ack(3, 2, 1));
  r.RunTimersUntil(At(54 * kUs));
  std::set<std::string> hedges;
  for (const RecordedPacket& p : r.sink.packets()) {
    if (wire::IsData(p.packet.opcode) && (p.packet.path_id == 0 || p.packet.path_id == 3)) {
      hedges.insert(std::to_string(p.packet.path_id) + ":" + std::to_string(p.packet.data.msg_seq) +
                    "/" + std::to_string(p.packet.data.offset));
    }
  }
  r.sink.Clear();
  // Path 1 (plane 1) hedges on path 3, path 2 (plane 0) on path 0.
  EXPECT_THAT(hedges, ::testing::UnorderedElementsAre("3:0/1024", "3:1/3072", "0:0/2048"));
  // The hedges and fresh data arrive on both live paths between the dead paths' expiries.
  r.Feed(At(64 * kUs), Requester::Ack(0, 4, 3));
  r.Feed(At(64 * kUs), Requester::Ack(3, 4, 3));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1, 2));
  r.PostWrite(At(70 * kUs), 3, 2 * kMtu);  // to the Active paths 0 and 3
  r.RunTimersUntil(At(78 * kUs));
  r.Feed(At(80 * kUs), Requester::Ack(0, 5, 4));
  r.Feed(At(80 * kUs), Requester::Ack(3, 5, 4));
  r.RunTimersUntil(At(102 * kUs));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kProbing);
  EXPECT_EQ(r.conn.path_stats(2).state, PathState::kProbing);
  EXPECT_EQ(r.conn.path_stats(1).rotations, 1u);
  EXPECT_EQ(r.conn.path_stats(2).rotations, 1u);
  EXPECT_EQ(r.conn.path_stats(0).rotations + r.conn.path_stats(3).rotations, 0u);
}

// Plane 0 (paths 0 and 2) acknowledges a second message; plane 1 (paths 1 and 3) goes silent.
std::unique_ptr<Requester> PlaneOneFallsSilent() {
  std::unique_ptr<Requester> r = FourPathsOnTwoPlanes(0, 2);
  r->PostWrite(At(40 * kUs), 2, 2 * kMtu);  // psn 1 on paths 0 and 2
  r->Feed(At(50 * kUs), Requester::Ack(0, 2, 1));
  r->Feed(At(50 * kUs), Requester::Ack(2, 2, 1));
  return r;
}

// [R5a] Plane 1's paths (1 and 3) fall silent together while plane 0 keeps delivering: a plane
// stalled as a whole (on a software fabric its routers are descheduled together), not two
// failures. Both are overtaken and hedged, but their expiries do not count without progress on
// their own plane: after the first they fall back to the ordinary timer.
TEST(Sender_Health, APlaneSilentAsAWholeIsAStallNotSeveralFailures) {
  std::unique_ptr<Requester> rp = PlaneOneFallsSilent();
  Requester& r = *rp;
  r.RunTimersUntil(At(54 * kUs));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kSuspect);
  EXPECT_EQ(r.conn.path_stats(3).state, PathState::kSuspect);
  // Plane 0 keeps delivering (the hedges included) every 10 us.
  for (int t = 60; t <= 1000; t += 10) {
    r.RunTimersUntil(At(t * kUs));
    const uint32_t next0 = r.conn.path_stats(0).tx_packets, next2 = r.conn.path_stats(2).tx_packets;
    r.Feed(At(t * kUs), Requester::Ack(0, next0, next0 - 1));
    r.Feed(At(t * kUs), Requester::Ack(2, next2, next2 - 1));
  }
  EXPECT_EQ(r.conn.path_stats(1).rotations + r.conn.path_stats(3).rotations, 0u);
  EXPECT_EQ(r.conn.path_stats(1).timeouts, 1u);
  EXPECT_EQ(r.conn.path_stats(3).timeouts, 1u);
  EXPECT_GT(r.conn.NextDeadline(), At(10000 * kUs));
  // Plane 0 carried the hedged data home.
  EXPECT_THAT(r.CompletedIds(), ::testing::UnorderedElementsAre(1, 2));
}

// [R5a] ... but a plane that stays silent is not stalled: a spine dead under every path of a
// plane silences it as a whole. Its paths are left to the ordinary timer, which the other
// plane's ACKs must not keep re-arming: they fail after fail_after_timeouts ordinary expiries.
TEST(Sender_Health, APlaneSilentForGoodFailsOnTheOrdinaryTimer) {
  std::unique_ptr<Requester> rp = PlaneOneFallsSilent();
  Requester& r = *rp;
  // Plane 0 keeps delivering every 100 us; ordinary timer 10 ms, doubling: 10 + 20 (+ 40).
  for (int t = 60; t <= 100000; t += 100) {
    r.RunTimersUntil(At(t * kUs));
    if (t % 1000 == 60) r.PostWrite(At(t * kUs), 100 + t, kMtu);  // fresh evidence keeps coming
    const uint32_t next0 = r.conn.path_stats(0).tx_packets, next2 = r.conn.path_stats(2).tx_packets;
    r.Feed(At(t * kUs), Requester::Ack(0, next0, next0 - 1));
    r.Feed(At(t * kUs), Requester::Ack(2, next2, next2 - 1));
  }
  for (uint16_t dead : {1, 3}) {
    SCOPED_TRACE(dead);
    EXPECT_GE(r.conn.path_stats(dead).rotations, 1u);
    EXPECT_EQ(r.conn.path_stats(dead).timeouts, 3u);  // the first, overtaken; two ordinary
  }
  EXPECT_EQ(r.conn.path_stats(0).rotations + r.conn.path_stats(2).rotations, 0u);
  std::vector<std::string> failures;
  for (const PathEvent& e : r.RawEvents()) {
    if (e.reason == PathEventReason::kFailed && e.kind == PathEvent::Kind::kPortRotated) {
      failures.push_back(EventLine(e));
    }
  }
  EXPECT_EQ(failures.size(), 2u) << ::testing::PrintToString(r.Events());
}

// [R5] Every path falls silent at once (the peer, this host or the whole network stalls): the
// ordinary expiries send their tail-loss probes and back off, but after the first they are no
// evidence against any one path, so no path fails (a storm with nowhere to move the data).
// When the ACKs come back, everything resumes.
TEST(Sender_Health, AConnectionSilentAsAWholeFailsNoPath) {
  ConnectionConfig c = RequesterConfig(4);
  c.min_probe_timeout = std::chrono::milliseconds(1);
  c.no_progress_timeout = std::chrono::seconds(1);
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);  // psn 0 on each path
  for (uint16_t p = 0; p < 4; ++p) r.Feed(At(10 * kUs), Requester::Ack(p, 1, 0));
  r.PostWrite(At(20 * kUs), 2, 4 * kMtu);  // psn 1 on each path, then silence
  r.sink.Clear();
  r.RunTimersUntil(At(100000 * kUs));  // 1 + 2 + 4 + ... ms: six expiries each
  for (uint16_t p = 0; p < 4; ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(r.conn.path_stats(p).timeouts, 6u);
    EXPECT_EQ(r.conn.path_stats(p).rotations, 0u);
    EXPECT_EQ(r.conn.path_stats(p).state, PathState::kSuspect);
  }
  const std::vector<std::string> log = r.Log();
  EXPECT_THAT(log, Each(HasSubstr("RETX")));  // tail-loss probes only, one per expiry
  EXPECT_THAT(log, SizeIs(24));
  for (uint16_t p = 0; p < 4; ++p) r.Feed(At(100000 * kUs), Requester::Ack(p, 2, 1));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1, 2));
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(r.conn.path_stats(p).state, PathState::kActive);
}

// [R5c] ... but silence that lasts is not only a stall: every route of the connection may be
// dead at once (all its paths hashed onto one dead link), and no evidence will ever come. Once
// the connection has been silent for the recovery cap (no_progress_timeout / (2 x
// fail_after_timeouts) = 10 ms here), an unattributed expiry fails its path (reason silence),
// one path per cap; the failed path probes new ports without backing off far (the connection is
// stuck), and the first port that answers carries the moved data. (Issue 12: cluster property
// seeds 263, 601, 679, 771, where no_progress_timeout ended connections with a route alive.)
TEST(Sender_Health, AConnectionSilentForTheRecoveryCapFailsOnePathPerCap) {
  ConnectionConfig c = RequesterConfig(4);
  c.min_probe_timeout = std::chrono::milliseconds(1);
  c.no_progress_timeout = std::chrono::milliseconds(60);  // recovery cap 10 ms
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);  // psn 0 on each path
  for (uint16_t p = 0; p < 4; ++p) r.Feed(At(10 * kUs), Requester::Ack(p, 1, 0));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
  r.PostWrite(At(20 * kUs), 2, 4 * kMtu);  // psn 1 on each path, then silence
  r.Events();
  r.sink.Clear();
  r.RunTimersUntil(At(10000 * kUs));  // shorter than the cap: a stall, as before
  for (uint16_t p = 0; p < 4; ++p) EXPECT_EQ(r.conn.path_stats(p).state, PathState::kSuspect);

  // Expiries at 1, 3, 7, 15, 25, 35 ms after 20 us (the backoff meets the 10 ms cap): the first
  // past the cap fails one path, each later cap one more.
  r.RunTimersUntil(At(40000 * kUs));
  std::vector<std::string> failures;
  for (const PathEvent& e : r.RawEvents()) {
    if (e.kind == PathEvent::Kind::kStateChange && e.to == PathState::kFailed) {
      EXPECT_EQ(e.reason, PathEventReason::kSilence);
      failures.push_back(EventLine(e));
    }
  }
  EXPECT_THAT(failures, ElementsAre("path 0 suspect->failed silence @15020us",
                                    "path 1 suspect->failed silence @25020us",
                                    "path 2 suspect->failed silence @35020us"));
  EXPECT_EQ(r.conn.path_stats(3).state, PathState::kSuspect);
  // A stuck connection's probes back off to 4 PTOs at most: path 0 (PTO 1 ms after each
  // rotation) tried its first new port for 1 + 2 + 4 ms and each later one for 3 x 4 ms
  // (rotations at 15.02, 22.02 and 34.02 ms); backing off on, its third port would come at 78 ms.
  EXPECT_EQ(r.conn.path_stats(0).rotations, 3u);
  EXPECT_EQ(r.conn.path_stats(0).state, PathState::kProbing);
  EXPECT_EQ(r.conn.state(), Connection::State::kReady);

  // Path 1's new port answers: it is Active, and the data of the failed paths goes onto it.
  r.sink.Clear();
  r.Feed(At(40000 * kUs), Requester::Ack(1, 2, 2, {}, wire::flags::kProbeReply));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kActive);
  std::vector<std::string> moved;
  for (const RecordedPacket& p : r.sink.packets()) {
    if (p.packet.opcode == wire::Opcode::kWrite) {
      EXPECT_EQ(p.packet.path_id, 1);
      moved.push_back(testing::Describe(p.packet));
    }
  }
  EXPECT_THAT(moved, SizeIs(3));  // the data units of paths 0, 1 and 2
}

// [R5] step 2: two paths behind one dead route while every other path is idle. Each dead path
// has a sibling with packets outstanding (the other dead one), and nothing makes progress, which
// reads like a connection silent as a whole; but the idle paths were never asked. The silent
// paths' data goes to them as hedges, their ACKs are progress, and from then on the dead paths'
// expiries count: both fail and rotate, and the message completes long before the connection's
// no_progress_timeout (issue 11: property seeds 6320, 12648, ...).
TEST(Sender_Health, DeadPathsBesideIdleOnesHedgeTheirDataAndFail) {
  ConnectionConfig c = RequesterConfig(4);
  c.no_progress_timeout = std::chrono::milliseconds(100);
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);  // psn 0 on each path
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  r.Feed(At(10 * kUs), Requester::Ack(1, 1, 0));
  r.sink.Clear();
  // Paths 2 and 3 never answer; whatever goes to paths 0 and 1 is acknowledged at once.
  std::vector<uint32_t> next_cum = {1, 1};
  for (Instant t = r.conn.NextDeadline(); t <= At(20000 * kUs); t = r.conn.NextDeadline()) {
    r.conn.OnTimer(t);
    for (const RecordedPacket& p : r.sink.packets()) {
      if (p.packet.path_id < 2 && p.packet.opcode != wire::Opcode::kProbe) {
        r.Feed(t + 5 * kUs, Requester::Ack(p.packet.path_id, ++next_cum[p.packet.path_id],
                                           p.packet.psn));
      }
    }
    r.sink.Clear();
    if (r.conn.path_stats(2).rotations > 0 && r.conn.path_stats(3).rotations > 0) break;
  }
  std::vector<WcStatus> st;
  EXPECT_THAT(r.CompletedIds(&st), ElementsAre(1));
  EXPECT_THAT(st, ElementsAre(WcStatus::kSuccess));
  EXPECT_EQ(r.conn.counters().hedged_packets, 2u);  // psn 0 of paths 2 and 3, once each
  EXPECT_EQ(r.conn.path_stats(2).rotations, 1u);
  EXPECT_EQ(r.conn.path_stats(3).rotations, 1u);
  EXPECT_EQ(r.conn.path_stats(0).rotations + r.conn.path_stats(1).rotations, 0u);
  EXPECT_EQ(r.conn.state(), Connection::State::kReady);
}

// [R5] the deadline's cap: a host stall inflates a path's RTT estimate (one sample across a
// 900 ms stall: PTO = srtt + 4 rttvar = 2.7 s), and that path, its route then lost, alone holds
// data while its sibling is idle. Its expiries count, but uncapped the first would come after the
// connection's no_progress_timeout (2 s) had ended it beside a working path. Capped at
// no_progress_timeout / (2 fail_after_timeouts), it fails within a second and its data moves.
TEST(Sender_Pto, ALonePathsRecoveryFitsWithinTheNoProgressTimeout) {
  ConnectionConfig c = RequesterConfig(2);
  c.min_probe_timeout = std::chrono::milliseconds(1);
  c.no_progress_timeout = std::chrono::seconds(2);  // HostTuning's; fail_after_timeouts 3
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 2 * kMtu);  // psn 0 on each path
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  r.Feed(At(900000 * kUs), Requester::Ack(1, 1, 0));  // path 1's ACK, 900 ms late
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
  r.PostWrite(At(900000 * kUs), 2, 2 * kMtu);  // psn 1 on each path
  r.Feed(At(900010 * kUs), Requester::Ack(0, 2, 1));
  r.sink.Clear();
  // Path 1's route is gone; whatever goes to path 0 is acknowledged at once.
  uint32_t next_cum = 2;
  for (Instant t = r.conn.NextDeadline(); t <= At(3000000 * kUs); t = r.conn.NextDeadline()) {
    r.conn.OnTimer(t);
    for (const RecordedPacket& p : r.sink.packets()) {
      if (p.packet.path_id == 0) r.Feed(t + 5 * kUs, Requester::Ack(0, ++next_cum, p.packet.psn));
    }
    r.sink.Clear();
    if (r.conn.path_stats(1).rotations > 0) break;
  }
  std::vector<WcStatus> st;
  EXPECT_THAT(r.CompletedIds(&st), ElementsAre(2));
  EXPECT_THAT(st, ElementsAre(WcStatus::kSuccess));
  EXPECT_EQ(r.conn.path_stats(1).rotations, 1u);
  EXPECT_EQ(r.conn.state(), Connection::State::kReady);
}

// [R5a] While another path has packets outstanding and nothing at all makes progress (the peer
// or the network stalls as a whole; here path 0 holds the hedges), the overtaken path's short
// timer proves nothing: it falls back to the ordinary timer. New evidence from a sibling brings
// it back.
TEST(Sender_Health, AnOvertakenPathsShortTimerNeedsProgressElsewhere) {
  std::unique_ptr<Requester> r = PathOneOvertaken();
  r->PostWrite(At(60 * kUs), 4, kMtu);  // path 1 is Suspect: to path 0, which then waits too
  EXPECT_THAT(r->Log(), ElementsAre(StartsWith("path 0 WRITE psn 4")));
  r->RunTimersUntil(At(78 * kUs));
  EXPECT_THAT(r->Log(), IsEmpty());
  EXPECT_EQ(r->conn.path_stats(1).timeouts, 1u);
  EXPECT_GT(r->conn.NextDeadline(), At(1000 * kUs));
  r->Feed(At(90 * kUs), Requester::Ack(0, 5, 4));  // path 0's packets up to 60 us arrived
  EXPECT_EQ(r->conn.NextDeadline(), At(94 * kUs));
  r->RunTimersUntil(At(94 * kUs));
  EXPECT_THAT(r->Log(), ElementsAre("path 1 WRITE psn 1 msg 2 off 0 len 0 ACK_REQ RETX FILLER"));
  EXPECT_EQ(r->conn.path_stats(1).timeouts, 2u);
}

// [R5a] A stall (of either host, or of the ACKs) delays every path alike. Here every ACK arrives
// in one batch 5 ms late, path 0's first: path 1's ACK, later in the batch, comes within the ACK
// delay the rule waits for, so path 1 never times out.
TEST(Sender_Health, AStallThatDelaysEveryPathTriggersNothing) {
  ConnectionConfig c = RequesterConfig(2);
  c.min_probe_timeout = std::chrono::milliseconds(10);
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 2 * kMtu);
  r.PostWrite(At(40 * kUs), 2, 2 * kMtu);
  r.sink.Clear();
  r.Feed(At(5000 * kUs), Requester::Ack(0, 2, 1));
  EXPECT_EQ(r.conn.NextDeadline(), At(5004 * kUs));
  r.Feed(At(5001 * kUs), Requester::Ack(1, 2, 1));
  r.RunTimersUntil(At(6000 * kUs));
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_THAT(r.Events(), IsEmpty());
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1, 2));
}

// paths-and-recovery.md §6: on the expiry that reaches fail_after_timeouts the path fails; the
// tail-loss probe is only for the "otherwise" case.
TEST(Sender_Health, TheFailingExpirySendsNoTailProbeOnTheDeadPath) {
  std::unique_ptr<Requester> r = PathOneAboutToFail();
  r->conn.OnTimer(At(350 * kUs));
  for (const RecordedPacket& p : r->sink.packets()) {
    EXPECT_FALSE(wire::IsData(p.packet.opcode) && p.packet.path_id == 1)
        << testing::Describe(p.packet);
  }
}

// paths-and-recovery.md §2.3: "Data units moved to another path (§7.3) are new transmissions
// there (new PSN, subject to §2.1) and carry RETRANSMIT | ACK_REQ."
TEST(Sender_Reroute, MovedDataCarriesRetransmitAndAckRequest) {
  std::unique_ptr<Requester> r = PathOneAboutToFail();
  r->conn.OnTimer(At(350 * kUs));
  std::vector<std::string> moved;
  for (const RecordedPacket& p : r->sink.packets()) {
    if (wire::IsData(p.packet.opcode) && p.packet.path_id == 0) {
      moved.push_back(testing::Describe(p.packet));
    }
  }
  EXPECT_THAT(moved, ElementsAre("path 0 WRITE psn 2 msg 0 off 1024 len 1024 ACK_REQ RETX",
                                 "path 0 WRITE psn 3 msg 0 off 3072 len 1024 ACK_REQ RETX"));
}

// ---------------------------------------------------------------------------------------------
// Rotation

TEST(Sender_Rotation, HoldDownDefersASecondRotation) {
  ConnectionConfig c = RequesterConfig(2);
  c.rotation_holddown = 200 * kUs;
  Requester r(c);
  ASSERT_TRUE(r.conn.RequestRotation(At(0 * kUs), 1).ok());
  EXPECT_THAT(r.Log(), ElementsAre("path 1 PROBE psn 0"));
  r.Feed(At(5 * kUs), Requester::Ack(1, 0, 0, {}, wire::flags::kProbeReply));
  EXPECT_THAT(r.Events(), ElementsAre("path 1 rotated manual @0us",
                                      "path 1 active->probing manual @0us",
                                      "path 1 probing->active probe_reply @5us"));
  const uint16_t port = r.conn.path_stats(1).src_port;
  ASSERT_TRUE(r.conn.RequestRotation(At(100 * kUs), 1).ok());
  EXPECT_THAT(r.Log(), IsEmpty());
  EXPECT_THAT(r.Events(), IsEmpty());
  EXPECT_EQ(r.conn.path_stats(1).src_port, port);
  EXPECT_EQ(r.conn.NextDeadline(), At(200 * kUs));
  r.conn.OnTimer(At(200 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 PROBE psn 0"));
  EXPECT_THAT(r.Events(), ElementsAre("path 1 rotated manual @200us",
                                      "path 1 active->probing manual @200us"));
  EXPECT_NE(r.conn.path_stats(1).src_port, port);
}

// paths-and-recovery.md §8 rate limit: one token bucket per connection, full at start.
TEST(Sender_Rotation, RateLimitDefersRotationsBeyondTheBurstUntilATokenReturns) {
  ConnectionConfig c = RequesterConfig(4);
  c.rotation_burst = 2;
  c.rotation_rate = 1000;  // one token per millisecond
  Requester r(c);
  for (uint16_t p = 0; p < 4; ++p) ASSERT_TRUE(r.conn.RequestRotation(At(0 * kUs), p).ok());
  EXPECT_THAT(r.Log(), ElementsAre("path 0 PROBE psn 0", "path 1 PROBE psn 0"));
  EXPECT_EQ(r.conn.path_stats(2).rotations, 0u);
  EXPECT_EQ(r.conn.path_stats(3).rotations, 0u);
  // Paths 2 and 3 wait for the first whole token, at 1 ms; the first to go takes it, the other
  // waits for the next.
  r.conn.OnTimer(At(999 * kUs));
  uint64_t rotated = r.conn.path_stats(2).rotations + r.conn.path_stats(3).rotations;
  EXPECT_EQ(rotated, 0u);
  r.conn.OnTimer(At(1001 * kUs));
  rotated = r.conn.path_stats(2).rotations + r.conn.path_stats(3).rotations;
  EXPECT_EQ(rotated, 1u);
  r.conn.OnTimer(At(2002 * kUs));
  rotated = r.conn.path_stats(2).rotations + r.conn.path_stats(3).rotations;
  EXPECT_EQ(rotated, 2u);
  for (const PathEvent& e : r.RawEvents()) {
    if (e.kind == PathEvent::Kind::kPortRotated) {
      EXPECT_EQ(e.reason, PathEventReason::kManual);
    }
  }
}

TEST(Sender_Rotation, NewPortIsInRangeAndDiffersFromEveryPathsPort) {
  ConnectionConfig c = RequesterConfig(4);
  c.port_base = 50000;
  c.rotate_port_lo = 50000;
  c.rotate_port_hi = 50009;  // 10 ports for 4 paths: collisions are likely unless avoided
  c.rotation_rate = 1e6;     // not about the rate limit
  Requester r(c);
  for (int k = 0; k < 60; ++k) {
    const uint16_t path = static_cast<uint16_t>(k % 4);
    std::set<uint16_t> others;
    for (uint16_t i = 0; i < 4; ++i) {
      if (i != path) others.insert(r.conn.path_stats(i).src_port);
    }
    const uint16_t old = r.conn.path_stats(path).src_port;
    ASSERT_TRUE(r.conn.RequestRotation(At(k * 200 * kUs), path).ok());
    const std::vector<PathEvent> events = r.RawEvents();
    ASSERT_FALSE(events.empty());
    ASSERT_EQ(events[0].kind, PathEvent::Kind::kPortRotated);
    const uint16_t port = events[0].new_port;
    EXPECT_EQ(events[0].old_port, old);
    EXPECT_GE(port, 50000);
    EXPECT_LE(port, 50009);
    EXPECT_NE(port, old) << "rotation " << k;
    EXPECT_FALSE(others.contains(port)) << "rotation " << k << " took port " << port;
    EXPECT_EQ(r.conn.path_stats(path).src_port, port);
  }
}

// paths-and-recovery.md §8: the new port differs "from the current port, from the current ports of
// the other paths of the connection and from udp_port".
TEST(Sender_Rotation, NeverPicksTheDataPort) {
  ConnectionConfig c = RequesterConfig(2);
  c.rotate_port_lo = wire::kDefaultUdpPort - 2;
  c.rotate_port_hi = wire::kDefaultUdpPort + 7;
  c.rotation_rate = 1e6;  // not about the rate limit
  Requester r(c);
  int rotations = 0;
  for (int k = 0; k < 60; ++k) {
    ASSERT_TRUE(r.conn.RequestRotation(At(k * 200 * kUs), static_cast<uint16_t>(k % 2)).ok());
    for (const PathEvent& e : r.RawEvents()) {
      if (e.kind == PathEvent::Kind::kPortRotated) {
        EXPECT_NE(e.new_port, wire::kDefaultUdpPort) << "rotation " << k;
        ++rotations;
      }
    }
  }
  EXPECT_EQ(rotations, 60);  // every request rotated: the check above saw every pick
}

// paths-and-recovery.md §7.3: "When a path becomes Failed (and likewise when an Active or Suspect
// path is rotated), every data unit outstanding on it is moved", and §8: the PROBE carries
// psn = next_psn.
TEST(Sender_Rotation, RotatingABusyPathKeepsItsDataAndProbesFromSndUna) {
  // [R7] only failure abandons a PSN space; a rotated working path's packets are still on
  // their way and are acknowledged as usual, so nothing moves and the probe names snd_una.
  Requester r(RequesterConfig(2));
  r.PostWrite(At(0 * kUs), 1, 4 * kMtu);
  r.sink.Clear();
  ASSERT_TRUE(r.conn.RequestRotation(At(1 * kUs), 1).ok());
  EXPECT_THAT(r.Log(), ElementsAre("path 1 PROBE psn 0"));
  EXPECT_EQ(r.conn.counters().rerouted_packets, 0u);
  EXPECT_EQ(r.conn.path_stats(1).inflight_bytes, 2 * kMtu);
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kProbing);
  // The old copies are acknowledged on the path and the message completes.
  r.Feed(At(5 * kUs), Requester::Ack(0, 2, 1));
  r.Feed(At(5 * kUs), Requester::Ack(1, 2, 1));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
}

// [R7] / §5: a probe reply in the probe's own instant measures nothing (R = 0 is no sample):
// the path's estimator stays reset, instead of taking an RTT of 0 and with it a PTO at the floor.
TEST(Sender_Rotation, AProbeReplyInTheProbesInstantIsNoRttSample) {
  Requester r(RequesterConfig(2));
  ASSERT_TRUE(r.conn.RequestRotation(At(1 * kUs), 1).ok());
  EXPECT_THAT(r.Log(), ElementsAre("path 1 PROBE psn 0"));
  r.Feed(At(1 * kUs), Requester::Ack(1, 0, 0, {}, wire::flags::kProbeReply));
  EXPECT_EQ(r.conn.path_stats(1).state, PathState::kActive);
  EXPECT_EQ(r.conn.path_stats(1).srtt, 10 * kUs);  // initial_rtt: still no sample
  EXPECT_EQ(r.conn.path_stats(1).min_rtt, Duration(0));
}

// ---------------------------------------------------------------------------------------------
// RNR, retry limit, errors

TEST(Sender_Rnr, RetryWaitsForTheDelayAndDoesNotCountTowardMaxTransmissions) {
  ConnectionConfig c = RequesterConfig(1);
  c.max_transmissions = 1;  // any counted retransmission would fail the connection
  Requester r(c);
  r.Post(At(0 * kUs), r.Wr(1, WrOpcode::kSend, 0, 100));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 SEND psn 0 msg 0 off 0 len 100 ACK_REQ"));
  r.Feed(At(5 * kUs), Requester::Nak(0, 0, 0, wire::Syndrome::kRnrNak, 0, 30));
  EXPECT_EQ(r.conn.NextDeadline(), At(35 * kUs));
  r.RunTimersUntil(At(35 * kUs) + Duration(-1));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.RunTimersUntil(At(35 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 SEND psn 0 msg 0 off 0 len 100 ACK_REQ RETX"));
  // Still not ready: a second round; the PTO does not probe a PSN waiting for the responder.
  r.Feed(At(40 * kUs), Requester::Nak(0, 0, 0, wire::Syndrome::kRnrNak, 0, 30));
  r.RunTimersUntil(At(70 * kUs) + Duration(-1));
  EXPECT_THAT(r.Log(), IsEmpty());
  r.RunTimersUntil(At(70 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 SEND psn 0 msg 0 off 0 len 100 ACK_REQ RETX"));
  r.Feed(At(75 * kUs), Requester::Ack(0, 1, 0));
  std::vector<WcStatus> st;
  EXPECT_THAT(r.CompletedIds(&st), ElementsAre(1));
  EXPECT_THAT(st, ElementsAre(WcStatus::kSuccess));
  EXPECT_EQ(r.conn.state(), Connection::State::kReady);
  EXPECT_EQ(r.conn.counters().rcvd_rnr_err, 2u);
}

// [R5] step 1: an expiry that finds every outstanding PSN of the path waiting for an RNR delay
// does nothing, and is not the path's latest expiry: the progress made before it (path 1's ACK
// at 10 us) still makes the path's next expiry, at 100 us, count against it. Recorded as an
// expiry, it set that progress aside, and with path 1 outstanding that expiry read as a stall.
TEST(Sender_Rnr, AnExpiryWhileEverythingWaitsForTheResponderIsNoExpiry) {
  ConnectionConfig c = RequesterConfig(2);
  c.fail_after_timeouts = c.fail_after_overtaken = 1;
  Requester r(c);
  r.Post(At(0 * kUs), r.Wr(1, WrOpcode::kSend, 0, 100));
  r.PostWrite(At(0 * kUs), 2, 100);
  std::vector<RecordedPacket> sent = r.sink.packets();
  ASSERT_THAT(sent, SizeIs(2));
  const uint16_t send_path = sent[0].packet.path_id, write_path = sent[1].packet.path_id;
  ASSERT_NE(send_path, write_path);
  r.sink.Clear();
  r.Feed(At(5 * kUs), Requester::Nak(send_path, 0, 0, wire::Syndrome::kRnrNak, 0, 60));
  r.Feed(At(10 * kUs), Requester::Ack(write_path, 1, 0));  // progress
  r.RunTimersUntil(At(50 * kUs));  // the Send's path expires while its PSN waits (until 65 us)
  EXPECT_THAT(r.Log(), IsEmpty());
  r.PostWrite(At(55 * kUs), 3, 100);  // outstanding on the other path until after 100 us
  r.RunTimersUntil(At(65 * kUs));     // the RNR retry
  EXPECT_THAT(r.Log(), ElementsAre(HasSubstr("WRITE psn 1 msg 2"),
                                   HasSubstr("SEND psn 0 msg 0 off 0 len 100 ACK_REQ RETX")));
  r.RunTimersUntil(At(100 * kUs));
  EXPECT_EQ(r.conn.path_stats(send_path).state, PathState::kProbing);  // failed, rotated
  EXPECT_THAT(r.Events(), Contains(HasSubstr("->failed failed @100us")));
}

TEST(Sender_Retry, MaxTransmissionsExceededFailsTheMessageAndFlushesTheRest) {
  ConnectionConfig c = RequesterConfig(1);
  c.max_transmissions = 2;
  c.fail_after_timeouts = 10;
  c.min_cwnd_bytes = c.initial_window_bytes = kMtu;  // one message in flight at a time
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, kMtu);
  r.PostWrite(At(0 * kUs), 2, kMtu);
  r.PostWrite(At(0 * kUs), 3, kMtu, /*flags=*/0);  // unsignaled: its flush is still reported
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024 ACK_REQ"));
  r.conn.OnTimer(At(50 * kUs));
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024 ACK_REQ RETX"));
  EXPECT_EQ(r.conn.NextDeadline(), At(150 * kUs));
  r.conn.OnTimer(At(150 * kUs));  // a third transmission would exceed the limit
  EXPECT_THAT(r.Log(), IsEmpty());
  std::vector<WcStatus> st;
  EXPECT_THAT(r.CompletedIds(&st), ElementsAre(1, 2, 3));
  EXPECT_THAT(st, ElementsAre(WcStatus::kRetryExcErr, WcStatus::kWrFlushErr,
                              WcStatus::kWrFlushErr));
  EXPECT_EQ(r.conn.state(), Connection::State::kError);
  EXPECT_EQ(r.conn.error_status(), WcStatus::kRetryExcErr);
  EXPECT_EQ(r.conn.counters().retry_exceeded_err, 1u);
  EXPECT_EQ(r.conn.NextDeadline(), kNever);
  EXPECT_EQ(r.conn.PostSend(At(200 * kUs), r.Wr(4, WrOpcode::kWrite, 0, 10)).code(),
            absl::StatusCode::kFailedPrecondition);
  r.Feed(At(200 * kUs), Requester::Ack(0, 1, 0));  // dropped in the error state
  EXPECT_EQ(r.conn.counters().acks_rcvd, 0u);
}

TEST(Sender_Post, SendQueueFullIsRefusedUntilARequestCompletes) {
  ConnectionConfig c = RequesterConfig(1);
  c.max_send_queue = 2;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, 100);
  r.PostWrite(At(0 * kUs), 2, 100);
  const absl::Status full = r.conn.PostSend(At(0 * kUs), r.Wr(3, WrOpcode::kWrite, 0, 100));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), ::testing::HasSubstr("send queue full"));
  EXPECT_EQ(r.conn.outstanding_sends(), 2u);
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  EXPECT_TRUE(r.conn.PostSend(At(11 * kUs), r.Wr(3, WrOpcode::kWrite, 0, 100)).ok());
}

TEST(Sender_Post, MessageLargerThanTheLimitIsRefused) {
  ConnectionConfig c = RequesterConfig(1);
  c.max_message_bytes = 4096;
  Requester r(c);
  EXPECT_EQ(r.conn.PostSend(At(0 * kUs), r.Wr(1, WrOpcode::kWrite, 0, 4097)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.Log(), IsEmpty());
}

TEST(Sender_Fence, FencedRequestAndThoseBehindItWaitForEarlierCompletions) {
  Requester r(RequesterConfig(2));
  r.PostWrite(At(0 * kUs), 1, kMtu);
  r.PostWrite(At(0 * kUs), 2, kMtu, send_flags::kSignaled | send_flags::kFence);
  r.PostWrite(At(0 * kUs), 3, kMtu);
  EXPECT_THAT(r.Log(), ElementsAre("path 0 WRITE psn 0 msg 0 off 0 len 1024 ACK_REQ"));
  r.Feed(At(10 * kUs), Requester::Ack(0, 1, 0));
  EXPECT_THAT(r.Log(), ElementsAre("path 1 WRITE psn 0 msg 1 off 0 len 1024 ACK_REQ",
                                   "path 0 WRITE psn 1 msg 2 off 0 len 1024 ACK_REQ"));
}

TEST(Sender_Completion, UnorderedCompletesEachMessageWhenDone) {
  Requester r(RequesterConfig(2));
  r.PostWrite(At(0 * kUs), 1, kMtu);  // path 0
  r.PostWrite(At(0 * kUs), 2, kMtu);  // path 1
  r.Feed(At(10 * kUs), Requester::Ack(1, 1, 0));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(2));
  r.Feed(At(11 * kUs), Requester::Ack(0, 1, 0));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1));
}

TEST(Sender_Completion, OrderedHoldsACompletionUntilEarlierOnesAreDone) {
  ConnectionConfig c = RequesterConfig(2);
  c.ordered_completion = true;
  Requester r(c);
  r.PostWrite(At(0 * kUs), 1, kMtu);
  r.PostWrite(At(0 * kUs), 2, kMtu);
  r.Feed(At(10 * kUs), Requester::Ack(1, 1, 0));
  EXPECT_THAT(r.CompletedIds(), IsEmpty());
  r.Feed(At(11 * kUs), Requester::Ack(0, 1, 0));
  EXPECT_THAT(r.CompletedIds(), ElementsAre(1, 2));
}

// congestion.md §6: a connection paced below one packet per path asks for pulls while it has
// more to send; once it has seen one, its new data goes on pulls, with at most its share in
// packets (plus one per pull the responder granted at once) of pulls owed to it.
ConnectionConfig PacedConfig() {
  ConnectionConfig c = RequesterConfig(4);
  c.initial_window_hint_bytes = 4 * 300;  // 300 bytes per path: paced; 1,200 bytes: 2 packets
  return c;
}

// The responder's ACKs: the share stays 300 bytes per path, and pull_seq counts its pulls.
struct PullingResponder {
  uint8_t granted = 0;
  enum Pull { kNone, kAtOnce, kDeferred };
  wire::Packet Ack(uint16_t path, uint32_t cum, uint32_t ack_psn, Pull pull = kNone) {
    uint16_t flags = 0;
    if (pull != kNone) {
      ++granted;
      flags = wire::flags::kPull | (pull == kDeferred ? wire::flags::kDelayedAck : 0);
    }
    wire::Packet a = Requester::Ack(path, cum, ack_psn, {}, flags);
    a.ack.window_hint = 300;
    a.ack.pull_seq = granted;
    return a;
  }
};

// Runs timers until something is sent.
void RunUntilSent(Requester& r) {
  for (int i = 0; i < 100 && r.sink.packets().empty(); ++i) r.conn.OnTimer(r.conn.NextDeadline());
}

TEST(Sender_Pull, APacedConnectionSendsItsNewDataOnPulls) {
  Requester r(PacedConfig());
  PullingResponder peer;
  r.PostWrite(At(0 * kUs), 1, 16 * kMtu);
  RunUntilSent(r);
  // Before any pull the share is a window of whole packets (one) and then a rate; the packet
  // asks for a pull.
  ASSERT_THAT(r.sink.packets(), SizeIs(1));
  const wire::Packet first = r.sink.packets()[0].packet;
  EXPECT_TRUE(first.flags & wire::flags::kWantsPull);
  EXPECT_FALSE(first.flags & wire::flags::kPulled);
  r.sink.Clear();
  // Its ACK brings a pull granted at once: one packet goes on it, and two more unsolicited
  // (two pulls may be owed for the share, 1,200 bytes rounded up to packets, and one more for
  // the pacer's room); then the connection waits.
  r.Feed(At(10 * kUs), peer.Ack(first.path_id, 1, 0, PullingResponder::kAtOnce));
  std::vector<RecordedPacket> sent = r.sink.packets();
  ASSERT_THAT(sent, SizeIs(3));
  EXPECT_TRUE(sent[0].packet.flags & wire::flags::kPulled);
  // The pulled packet goes on a path never sent on yet (the responder cannot pull on those),
  // the next in the round robin, not on the pull's.
  const uint16_t paths = PacedConfig().path_count;
  EXPECT_EQ(sent[0].packet.path_id, (first.path_id + 1) % paths);
  EXPECT_EQ(sent[1].packet.path_id, (first.path_id + 2) % paths);
  EXPECT_EQ(sent[2].packet.path_id, (first.path_id + 3) % paths);
  EXPECT_TRUE(sent[0].packet.flags & wire::flags::kWantsPull);
  EXPECT_FALSE(sent[1].packet.flags & wire::flags::kPulled);
  EXPECT_FALSE(sent[2].packet.flags & wire::flags::kPulled);
  EXPECT_EQ(r.conn.counters().pulls_rcvd, 1u);
  EXPECT_EQ(r.conn.counters().pulled_pkts, 1u);
  r.sink.Clear();
  // Their ACKs carry no pull: nothing new goes, however many ACKs come.
  for (const RecordedPacket& x : sent) {
    r.Feed(At(20 * kUs), peer.Ack(x.packet.path_id, x.packet.psn + 1, x.packet.psn));
  }
  EXPECT_THAT(r.sink.packets(), IsEmpty());
  // A pull that waited (its own ACK, no RTT sample) lets exactly one more go, on the pull's own
  // path now that every path has been used; a copy of it adds nothing (pull_seq did not move).
  uint32_t cum3 = 0;  // path 3's next PSN: everything sent on it was acknowledged above
  for (const RecordedPacket& x : sent) {
    if (x.packet.path_id == 3) cum3 = x.packet.psn + 1;
  }
  const wire::Packet deferred = peer.Ack(3, cum3, cum3 - 1, PullingResponder::kDeferred);
  r.Feed(At(30 * kUs), deferred);
  r.Feed(At(30 * kUs), deferred);
  ASSERT_THAT(r.sink.packets(), SizeIs(1));
  EXPECT_TRUE(r.sink.packets()[0].packet.flags & wire::flags::kPulled);
  EXPECT_EQ(r.sink.packets()[0].packet.path_id, 3);
  EXPECT_EQ(r.conn.counters().pulls_rcvd, 2u);
}

TEST(Sender_Pull, APullLostOnItsWayComesWithTheNextAck) {
  Requester r(PacedConfig());
  PullingResponder peer;
  r.PostWrite(At(0 * kUs), 1, 16 * kMtu);
  RunUntilSent(r);
  const wire::Packet first = r.sink.packets()[0].packet;
  r.sink.Clear();
  peer.granted = 1;  // the ACK that carried the first pull was lost
  r.Feed(At(20 * kUs), peer.Ack(first.path_id, 1, 0));
  ASSERT_THAT(r.sink.packets(), ::testing::Not(IsEmpty()));
  EXPECT_TRUE(r.sink.packets()[0].packet.flags & wire::flags::kPulled);
  EXPECT_EQ(r.conn.counters().pulls_rcvd, 1u);
}

// A 16-packet Write whose first packet's ACK (at 50 us) brought a pull granted at once: the
// connection sent three packets (one on the pull, two unsolicited), the first `acked` of them
// acknowledged at 60 us without a pull (RTT 10 us): it now waits, every pull owed, the rest in
// flight (`sent_out`, when given, receives the three).
void ClockedAndWaiting(Requester& r, PullingResponder& peer, size_t acked = 3,
                       std::vector<RecordedPacket>* sent_out = nullptr) {
  r.PostWrite(At(0 * kUs), 1, 16 * kMtu);
  RunUntilSent(r);
  const wire::Packet first = r.sink.packets()[0].packet;
  r.sink.Clear();
  r.Feed(At(50 * kUs), peer.Ack(first.path_id, 1, 0, PullingResponder::kAtOnce));
  const std::vector<RecordedPacket> sent = r.sink.packets();
  ASSERT_THAT(sent, SizeIs(3));
  if (sent_out != nullptr) *sent_out = sent;
  r.sink.Clear();
  for (size_t i = 0; i < acked; ++i) {
    r.Feed(At(60 * kUs), peer.Ack(sent[i].packet.path_id, sent[i].packet.psn + 1,
                                  sent[i].packet.psn));
  }
  ASSERT_THAT(r.sink.packets(), IsEmpty());
}

TEST(Sender_Pull, AQuietWaitAsksWithAProbeThenForgivesTheOwedPulls) {
  // A pull whose every copy was lost must not stall the connection: with nothing in flight and
  // every pull still owed, it first asks (a PROBE: its reply carries pull_seq), not before four
  // RTTs, and if no pull comes it sends again unsolicited, not before eight.
  Requester r(PacedConfig());
  PullingResponder peer;
  ClockedAndWaiting(r, peer);
  // The pulls those three asked for never come.
  std::vector<std::pair<Instant, wire::Opcode>> out;
  for (Instant t = r.conn.NextDeadline(); t <= At(2000 * kUs) && out.size() < 2;
       t = r.conn.NextDeadline()) {
    r.conn.OnTimer(t);
    for (const RecordedPacket& x : r.sink.packets()) out.emplace_back(t, x.packet.opcode);
    r.sink.Clear();
  }
  ASSERT_GE(out.size(), 2u);  // the probe, then the allowance's packets at once
  EXPECT_EQ(out[0].second, wire::Opcode::kProbe);
  EXPECT_GE(out[0].first, At(50 * kUs) + 4 * 10 * kUs);  // the latest new packet went at 50 us
  EXPECT_EQ(out[1].second, wire::Opcode::kWrite);
  EXPECT_GE(out[1].first, At(50 * kUs) + 8 * 10 * kUs);
}

TEST(Sender_Pull, TheProbesReplyBringsAPullWhoseCopiesWereLost) {
  Requester r(PacedConfig());
  PullingResponder peer;
  ClockedAndWaiting(r, peer);
  // The responder granted a pull; both of its ACKs were lost.
  ++peer.granted;
  wire::Packet probe;
  for (Instant t = r.conn.NextDeadline(); t <= At(2000 * kUs); t = r.conn.NextDeadline()) {
    r.conn.OnTimer(t);
    if (!r.sink.packets().empty()) {
      probe = r.sink.packets()[0].packet;
      break;
    }
  }
  ASSERT_EQ(probe.opcode, wire::Opcode::kProbe);
  r.sink.Clear();
  wire::Packet reply = peer.Ack(probe.path_id, probe.psn, probe.psn);
  reply.flags |= wire::flags::kProbeReply;
  r.Feed(At(200 * kUs), reply);
  ASSERT_THAT(r.sink.packets(), SizeIs(1));
  EXPECT_TRUE(r.sink.packets()[0].packet.flags & wire::flags::kPulled);
}

// [R5d] Clocked and waiting for pulls, with a packet outstanding whose ACK is overdue (its loss
// took the pull it asked for with it): the connection asks with a PROBE on that path, not the
// packet's data, well before the ordinary deadline; the reply judges the packet, sent before the
// PROBE: not acknowledged, it is lost and goes again at once; acknowledged, nothing goes.
// The deadline `due` sends the loss query for `packet` (a PROBE at its path's snd_una); a reply
// that says it arrived resends nothing, one that says it did not resends it at once as a gap
// retransmission, without a verdict on the path.
void ExpectQueryJudges(Requester& r, PullingResponder& peer, const wire::Packet& packet,
                       Instant due, bool arrived) {
  r.conn.OnTimer(due);
  ASSERT_THAT(r.sink.packets(), SizeIs(1));
  const wire::Packet probe = r.sink.packets()[0].packet;
  EXPECT_EQ(probe.opcode, wire::Opcode::kProbe);
  EXPECT_EQ(probe.path_id, packet.path_id);
  EXPECT_EQ(probe.psn, packet.psn);  // the path's snd_una
  r.sink.Clear();
  wire::Packet reply = peer.Ack(probe.path_id, arrived ? packet.psn + 1 : packet.psn, probe.psn);
  reply.flags |= wire::flags::kProbeReply;
  r.Feed(due + 10 * kUs, reply);
  if (arrived) {
    EXPECT_THAT(r.Log(), IsEmpty());
    EXPECT_EQ(r.conn.counters().gap_retransmits, 0u);
  } else {
    EXPECT_THAT(r.Log(), ElementsAre(HasSubstr("path " + std::to_string(packet.path_id) +
                                               " WRITE psn " + std::to_string(packet.psn))));
    EXPECT_EQ(r.conn.counters().gap_retransmits, 1u);
  }
  EXPECT_EQ(r.conn.path_stats(packet.path_id).state, PathState::kActive);
}

TEST(Sender_Pull, AnOverdueOutstandingPacketIsQueriedWithAProbe) {
  for (const bool arrived : {false, true}) {
    SCOPED_TRACE(arrived ? "the packet arrived" : "the packet was lost");
    ConnectionConfig c = PacedConfig();
    c.tail_probes = true;
    Requester r(c);
    PullingResponder peer;
    std::vector<RecordedPacket> sent;
    ClockedAndWaiting(r, peer, /*acked=*/2, &sent);  // the third packet's ACK never comes
    ASSERT_THAT(sent, SizeIs(3));
    const wire::Packet lost = sent[2].packet;
    const Instant due = r.conn.NextDeadline();
    // The ordinary deadline would come at 150 us: twice the connection's peak RTT (its first
    // packet's, 50 us) after the packet went.
    EXPECT_LT(due, At(150 * kUs));
    ExpectQueryJudges(r, peer, lost, due, arrived);
  }
}

// [R5d] At its tail too, a clocked connection asks rather than guesses: its last packets' probe
// is a loss query, not a blind retransmission of data the responder did not pull (the
// all-to-all of 128 hosts: 1,716 retransmissions, nearly all tail probes of packets merely
// queued behind the pulls, and 26 tail drops; with the query 172 and none).
TEST(Sender_Pull, ATailBehindThePullsIsQueriedNotProbedWithData) {
  for (const bool arrived : {false, true}) {
    SCOPED_TRACE(arrived ? "the packet arrived" : "the packet was lost");
    ConnectionConfig c = PacedConfig();
    c.tail_probes = true;
    Requester r(c);
    PullingResponder peer;
    r.PostWrite(At(0 * kUs), 1, 4 * kMtu);  // the first goes alone, the other three on its pull
    RunUntilSent(r);
    const wire::Packet first = r.sink.packets()[0].packet;
    r.sink.Clear();
    r.Feed(At(50 * kUs), peer.Ack(first.path_id, 1, 0, PullingResponder::kAtOnce));
    const std::vector<RecordedPacket> sent = r.sink.packets();
    ASSERT_THAT(sent, SizeIs(3));  // everything: nothing more to send
    r.sink.Clear();
    for (size_t i = 0; i < 2; ++i) {
      r.Feed(At(60 * kUs), peer.Ack(sent[i].packet.path_id, sent[i].packet.psn + 1,
                                    sent[i].packet.psn));
    }
    ASSERT_THAT(r.sink.packets(), IsEmpty());
    const wire::Packet last = sent[2].packet;  // its ACK never comes
    const Instant due = r.conn.NextDeadline();
    EXPECT_LT(due, At(150 * kUs));  // before the ordinary deadline (twice the peak RTT)
    ExpectQueryJudges(r, peer, last, due, arrived);
    EXPECT_EQ(r.conn.counters().loss_queries, 1u);
    EXPECT_EQ(r.conn.counters().tail_probes, 0u);
  }
}

TEST(Sender_Pull, TheLastPacketAsksForNoPullAndALargerShareEndsTheClock) {
  Requester r(PacedConfig());
  PullingResponder peer;
  r.PostWrite(At(0 * kUs), 1, 1 * kMtu);
  RunUntilSent(r);
  ASSERT_THAT(r.sink.packets(), SizeIs(1));
  EXPECT_FALSE(r.sink.packets()[0].packet.flags & wire::flags::kWantsPull);  // nothing after it
  const wire::Packet only = r.sink.packets()[0].packet;
  r.sink.Clear();
  r.Feed(At(50 * kUs), peer.Ack(only.path_id, 1, 0, PullingResponder::kAtOnce));
  // A share of a packet or more per path: the connection is a window again, and its data
  // neither waits for pulls nor asks for them.
  wire::Packet wider = peer.Ack(only.path_id, 1, 0);
  wider.ack.window_hint = 4 * kMtu;
  r.Feed(At(60 * kUs), wider);
  r.PostWrite(At(61 * kUs), 2, 8 * kMtu);
  ASSERT_THAT(r.sink.packets(), SizeIs(8));
  for (const RecordedPacket& x : r.sink.packets()) {
    EXPECT_FALSE(x.packet.flags & (wire::flags::kWantsPull | wire::flags::kPulled));
  }
}

// ---------------------------------------------------------------------------------------------
// Memory

// A pipeline of small messages at its depth allocates nothing per message: an ACK retires many
// at once, and each posted after takes a retired one's per-packet arrays (with one spare kept,
// mrperf write_bw -s 64 made a malloc and a free per message).
TEST(Sender_Memory, APipelineRetiredInBatchesPostsWithoutAllocating) {
  struct CountingSink : PacketSink {
    void Transmit(const TxMeta&, std::span<const std::byte>, std::span<const std::byte>) override {
      ++packets;
    }
    uint64_t packets = 0;
  };
  CountingSink sink;
  MemoryTable memory;
  std::vector<std::byte> src(4096);
  const MemoryRegion mr = *memory.Register(src.data(), src.size(), access::kLocalWrite);
  ConnectionConfig c = RequesterConfig(1);
  Connection conn(c, memory, sink);
  constexpr uint32_t kDepth = 32, kBatch = 16;
  uint64_t posted = 0;
  const auto post = [&](Instant now) {
    SendWorkRequest wr;
    wr.wr_id = posted++;
    wr.opcode = WrOpcode::kWrite;
    wr.flags = send_flags::kSignaled;
    wr.local = {mr.addr, 64, mr.lkey};
    wr.remote_addr = kRemoteAddr;
    wr.rkey = kRkey;
    return conn.PostSend(now, wr).ok();
  };
  for (uint32_t i = 0; i < kDepth; ++i) ASSERT_TRUE(post(At(0 * kUs)));
  std::vector<Completion> done(kDepth);
  size_t allocations_in_posts = 0;
  for (uint32_t round = 0; round < 8; ++round) {
    // The oldest kBatch messages (one packet each, PSNs in posting order) retire at once; the
    // path keeps the rest outstanding, so its ring of sent packets stays as it is.
    const Instant now = At((round + 1) * 10 * kUs);
    const uint32_t cum = (round + 1) * kBatch;
    conn.OnPacket(now, Requester::Ack(0, cum, cum - 1), RxMeta{.src_port = wire::kDefaultUdpPort});
    ASSERT_EQ(conn.PollCompletions(done), kBatch);
    g_allocations = 0;
    g_count_allocations = true;
    bool ok = true;
    for (uint32_t i = 0; i < kBatch; ++i) ok = post(now) && ok;
    g_count_allocations = false;
    ASSERT_TRUE(ok);
    if (round >= 2) allocations_in_posts += g_allocations;  // after the first rounds' growth
  }
  EXPECT_EQ(sink.packets, kDepth + 8 * kBatch);
  EXPECT_EQ(allocations_in_posts, 0u);
}

}  // namespace
}  // namespace metaroce::core
