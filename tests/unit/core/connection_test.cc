// Connection: end-to-end behaviour of both halves over an in-memory wire with a mock clock.
#include "lib/core/connection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <malloc.h>

#include <numeric>
#include <vector>

#include "lib/core/endpoint.h"
#include "tests/support/host_pair.h"
#include "tests/support/recording_sink.h"

namespace metaroce::core {
namespace {

using ::metaroce::testing::Fate;
using ::metaroce::testing::HostPair;
using ::metaroce::testing::RecordedPacket;
using ::testing::ElementsAre;
using ::testing::SizeIs;

constexpr Duration kUs = std::chrono::microseconds(1);

ConnectionConfig SmallConfig(uint16_t paths = 4) {
  ConnectionConfig c;
  c.path_count = paths;
  c.mtu = 1024;
  return c;
}

// Buffers registered on each host: a source on A, a destination on B.
struct Buffers {
  Buffers(HostPair& h, size_t size, uint32_t dst_access = access::kLocalWrite |
                                                          access::kRemoteWrite)
      : src(size), dst(size, std::byte{0}) {
    for (size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
    src_mr = *h.a().memory().Register(src.data(), src.size(), access::kLocalWrite);
    dst_mr = *h.b().memory().Register(dst.data(), dst.size(), dst_access);
  }
  std::vector<std::byte> src, dst;
  MemoryRegion src_mr, dst_mr;
};

SendWorkRequest Write(const Buffers& b, uint64_t wr_id, uint32_t offset, uint32_t len) {
  SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::kWrite;
  wr.local = {b.src_mr.addr + offset, len, b.src_mr.lkey};
  wr.remote_addr = b.dst_mr.addr + offset;
  wr.rkey = b.dst_mr.rkey;
  return wr;
}

TEST(Connection_Write, LosslessWriteLandsAndCompletesOnce) {
  HostPair h(SmallConfig());
  Buffers b(h, 64 * 1024);
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 7, 0, 64 * 1024)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].wr_id, 7u);
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kSuccess);
  EXPECT_EQ(h.completions_a()[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(b.src, b.dst);
  EXPECT_EQ(h.ca().counters().retransmits, 0u);
  EXPECT_EQ(h.cb().counters().messages_received, 1u);
}

TEST(Connection_Write, SpraysAcrossEveryPath) {
  HostPair h(SmallConfig(4));
  Buffers b(h, 64 * 1024);
  std::vector<int> per_path(4);
  h.on_send = [&](const RecordedPacket& p, bool to_b) {
    if (to_b && wire::IsData(p.packet.opcode)) ++per_path[p.packet.path_id];
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 64 * 1024)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  EXPECT_THAT(per_path, ElementsAre(16, 16, 16, 16));
}

TEST(Connection_Write, GapRetransmitsExactlyTheMissingPacketOnItsPath) {
  HostPair h(SmallConfig(2));
  Buffers b(h, 16 * 1024);
  bool dropped = false;
  std::vector<std::string> retransmissions;
  h.fate = [&](const RecordedPacket& p, bool to_b, Instant) {
    Fate f;
    if (to_b && wire::IsData(p.packet.opcode) && p.packet.path_id == 1 && p.packet.psn == 2 &&
        !dropped) {
      dropped = true;
      f.drop = true;
    }
    return f;
  };
  h.on_send = [&](const RecordedPacket& p, bool to_b) {
    if (to_b && (p.packet.flags & wire::flags::kRetransmit)) {
      retransmissions.push_back(testing::Describe(p.packet));
    }
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 16 * 1024)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_TRUE(dropped);
  EXPECT_THAT(retransmissions, ElementsAre("path 1 WRITE psn 2 msg 0 off 5120 len 1024 "
                                           "ACK_REQ RETX"));
  EXPECT_EQ(h.ca().counters().gap_retransmits, 1u);
  EXPECT_EQ(h.ca().counters().timeout_retransmits, 0u);
  EXPECT_EQ(b.src, b.dst);
  ASSERT_THAT(h.completions_a(), SizeIs(1));
}

// The last packet lost: nothing after it can reveal the gap. The tail probe [R5d] resends it
// two RTTs on, well before the probe timeout's floor; without tail probes the PTO does [R5].
TEST(Connection_Write, TailLossIsRecoveredByTheTailProbeOrTheProbeTimeout) {
  for (const bool tail_probes : {true, false}) {
    SCOPED_TRACE(tail_probes ? "tail probes" : "probe timeout only");
    ConnectionConfig c = SmallConfig(1);
    c.tail_probes = tail_probes;
    HostPair h(c);
    Buffers b(h, 4 * 1024);
    bool dropped = false;
    h.fate = [&](const RecordedPacket& p, bool to_b, Instant) {
      Fate f;
      if (to_b && wire::IsData(p.packet.opcode) && p.packet.psn == 3 && !dropped) {
        dropped = true;
        f.drop = true;
      }
      return f;
    };
    const Instant start = h.now();
    ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 4 * 1024)).ok());
    Instant done = kNever;
    for (int i = 0; i < 5000 && h.completions_a().empty(); ++i) {
      h.RunFor(std::chrono::microseconds(1));
      if (!h.completions_a().empty()) done = h.now();
    }
    h.RunFor(std::chrono::milliseconds(5));
    EXPECT_EQ(h.ca().counters().tail_probes, tail_probes ? 1u : 0u);
    EXPECT_EQ(h.ca().counters().timeout_retransmits, tail_probes ? 0u : 1u);
    EXPECT_EQ(h.ca().counters().gap_retransmits, 0u);
    if (tail_probes) {
      EXPECT_LT(done - start, c.min_probe_timeout);
    } else {
      EXPECT_GE(done - start, c.min_probe_timeout);
    }
    EXPECT_EQ(b.src, b.dst);
    ASSERT_THAT(h.completions_a(), SizeIs(1));
    EXPECT_EQ(h.completions_a()[0].status, WcStatus::kSuccess);
  }
}

TEST(Connection_Write, DuplicatedPacketsNeitherCorruptNorDoubleComplete) {
  HostPair h(SmallConfig(3));
  Buffers b(h, 32 * 1024);
  h.fate = [](const RecordedPacket&, bool, Instant) {
    Fate f;
    f.copies = 2;
    return f;
  };
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, i, i * 8192, 8192)).ok());
  }
  h.RunFor(std::chrono::milliseconds(5));
  EXPECT_THAT(h.completions_a(), SizeIs(4));
  EXPECT_EQ(b.src, b.dst);
  EXPECT_EQ(h.cb().counters().messages_received, 4u);
  EXPECT_GT(h.cb().counters().duplicate_request, 0u);
}

TEST(Connection_Write, UnsignaledWriteCompletesSilently) {
  HostPair h(SmallConfig());
  Buffers b(h, 4096);
  SendWorkRequest wr = Write(b, 1, 0, 4096);
  wr.flags = 0;
  ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
  h.RunFor(std::chrono::milliseconds(1));
  EXPECT_THAT(h.completions_a(), SizeIs(0));
  EXPECT_EQ(h.ca().outstanding_sends(), 0u);
  EXPECT_EQ(b.src, b.dst);
}

TEST(Connection_Write, BadRkeyFailsWithRemoteAccessErrorAndFlushes) {
  HostPair h(SmallConfig());
  Buffers b(h, 8192);
  SendWorkRequest bad = Write(b, 1, 0, 4096);
  bad.rkey ^= 0xffff;
  ASSERT_TRUE(h.ca().PostSend(h.now(), bad).ok());
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 2, 4096, 4096)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(2));
  EXPECT_EQ(h.completions_a()[0].wr_id, 1u);
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(h.completions_a()[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(h.ca().state(), Connection::State::kError);
  // Nothing was written through the bad key.
  EXPECT_TRUE(std::all_of(b.dst.begin(), b.dst.begin() + 4096,
                          [](std::byte x) { return x == std::byte{0}; }));
}

TEST(Connection_Write, WriteOutsideTheRegionIsRefusedForEveryPacket) {
  HostPair h(SmallConfig());
  Buffers b(h, 8192);
  SendWorkRequest wr = Write(b, 1, 0, 8192);
  wr.remote_addr += 1;  // the last byte would fall outside the region
  ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRemAccessErr);
  EXPECT_GE(h.cb().counters().access_naks_sent, 1u);
}

TEST(Connection_Write, RegionWithoutRemoteWriteIsRefused) {
  HostPair h(SmallConfig());
  Buffers b(h, 4096, access::kLocalWrite);
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 4096)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRemAccessErr);
}

TEST(Connection_Post, RefusesBadLocalBuffersWithAReason) {
  HostPair h(SmallConfig());
  Buffers b(h, 4096);
  SendWorkRequest wr = Write(b, 1, 0, 4096);
  wr.local.lkey = 999;
  absl::Status s = h.ca().PostSend(h.now(), wr);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("LOC_PROT_ERR"));
  wr = Write(b, 1, 0, 4097);
  s = h.ca().PostSend(h.now(), wr);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("LOC_LEN_ERR"));
}

// [M7] Protection domains: a connection finds only the regions of its own domain; another
// domain's key is refused exactly as a key that does not exist (same status, counters, NAK).
struct DomainFixture {
  static constexpr uint32_t kTheirs = 4;
  explicit DomainFixture(HostPair& h) : ours(h, 8192), theirs(8192, std::byte{0}) {
    their_mr = *h.b().memory().Register(theirs.data(), theirs.size(),
                                        access::kLocalWrite | access::kRemoteWrite, kTheirs);
    their_src_mr = *h.a().memory().Register(ours.src.data(), ours.src.size(), 0, kTheirs);
  }
  Buffers ours;  // the default domain's: A's source, B's target
  // kTheirs's: B's target `theirs`, and A's source again (the same bytes, another region).
  std::vector<std::byte> theirs;
  MemoryRegion their_mr, their_src_mr;
};

ConnectionConfig ConfigIn(uint32_t pd) {
  ConnectionConfig c = SmallConfig();
  c.pd = pd;
  return c;
}

TEST(Connection_ProtectionDomain, WriteWithAnotherDomainsRkeyIsAnUnknownKey) {
  // Two identical runs, one naming another domain's rkey, one a key never registered: the
  // requester, the responder and the wire cannot tell them apart.
  std::vector<std::string> wire_logs[2];
  ConnectionCounters responder[2];
  for (int run = 0; run < 2; ++run) {
    HostPair h(SmallConfig());
    DomainFixture d(h);
    h.on_send = [&](const RecordedPacket& p, bool to_b) {
      if (!to_b) wire_logs[run].push_back(testing::Describe(p.packet));
    };
    SendWorkRequest wr = Write(d.ours, 1, 0, 4096);
    wr.remote_addr = d.their_mr.addr;
    wr.rkey = run == 0 ? d.their_mr.rkey : 0x7fffffffu;
    ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
    h.RunFor(std::chrono::milliseconds(5));
    ASSERT_THAT(h.completions_a(), SizeIs(1));
    EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRemAccessErr);
    EXPECT_TRUE(std::all_of(d.theirs.begin(), d.theirs.end(),
                            [](std::byte x) { return x == std::byte{0}; }));
    responder[run] = h.cb().counters();
  }
  EXPECT_EQ(wire_logs[0], wire_logs[1]);
  EXPECT_GE(responder[0].access_naks_sent, 1u);
  EXPECT_EQ(responder[0].access_naks_sent, responder[1].access_naks_sent);
  EXPECT_EQ(responder[0].rcvd_pkts, responder[1].rcvd_pkts);
}

TEST(Connection_ProtectionDomain, PostsNamingAnotherDomainsLkeyAreRefused) {
  HostPair h(SmallConfig());
  DomainFixture d(h);
  SendWorkRequest wr = Write(d.ours, 1, 0, 64);
  wr.local.lkey = d.their_src_mr.lkey;
  absl::Status send = h.ca().PostSend(h.now(), wr);
  EXPECT_EQ(send.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(send.message()), ::testing::HasSubstr("LOC_PROT_ERR"));
  wr.local.lkey = 0x7fffffffu;  // never registered: the same refusal, word for word
  EXPECT_EQ(h.ca().PostSend(h.now(), wr), send);
  absl::Status recv =
      h.cb().PostRecv(h.now(), RecvWorkRequest{2, {d.their_mr.addr, 64, d.their_mr.lkey}});
  EXPECT_EQ(recv.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(h.cb().PostRecv(h.now(), RecvWorkRequest{3, {d.their_mr.addr, 64, 0x7fffffffu}}),
            recv);
  EXPECT_EQ(h.ca().outstanding_sends(), 0u);
  EXPECT_EQ(h.cb().posted_receives(), 0u);
}

TEST(Connection_ProtectionDomain, SameDomainWorks) {
  HostPair h(ConfigIn(DomainFixture::kTheirs));
  DomainFixture d(h);
  // The connection is in kTheirs now: those regions work and the default domain's do not.
  SendWorkRequest wr = Write(d.ours, 1, 0, 4096);
  wr.local.lkey = d.their_src_mr.lkey;
  wr.remote_addr = d.their_mr.addr;
  wr.rkey = d.their_mr.rkey;
  ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(d.theirs.begin(), d.theirs.begin() + 4096, d.ours.src.begin()));
  EXPECT_EQ(h.ca().PostSend(h.now(), Write(d.ours, 2, 0, 64)).code(),
            absl::StatusCode::kPermissionDenied);
}

struct SendFixture {
  explicit SendFixture(HostPair& h, size_t size = 16 * 1024)
      : src(size), dst(size, std::byte{0}) {
    for (size_t i = 0; i < size; ++i) src[i] = static_cast<std::byte>(i * 17 + 3);
    src_mr = *h.a().memory().Register(src.data(), src.size(), access::kLocalWrite);
    dst_mr = *h.b().memory().Register(dst.data(), dst.size(), access::kLocalWrite);
  }
  SendWorkRequest Send(uint64_t id, uint32_t off, uint32_t len) const {
    SendWorkRequest wr;
    wr.wr_id = id;
    wr.opcode = WrOpcode::kSend;
    wr.local = {src_mr.addr + off, len, src_mr.lkey};
    return wr;
  }
  RecvWorkRequest Recv(uint64_t id, uint32_t off, uint32_t len) const {
    return RecvWorkRequest{id, {dst_mr.addr + off, len, dst_mr.lkey}};
  }
  std::vector<std::byte> src, dst;
  MemoryRegion src_mr, dst_mr;
};

TEST(Connection_Send, SendLandsInTheReceiveItNamesEvenOutOfOrder) {
  HostPair h(SmallConfig(2));
  SendFixture f(h);
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(100, 0, 8192)).ok());
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(101, 8192, 8192)).ok());
  // Delay everything of the first message so that the second arrives first.
  h.fate = [](const RecordedPacket& p, bool to_b, Instant) {
    Fate fate;
    if (to_b && wire::IsData(p.packet.opcode) && p.packet.data.msg_seq == 0) {
      fate.delay = std::chrono::microseconds(40);
    }
    return fate;
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(1, 0, 8192)).ok());
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(2, 8192, 8192)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_b(), SizeIs(2));
  EXPECT_EQ(h.completions_b()[0].wr_id, 101u);  // unordered: the second receive first
  EXPECT_EQ(h.completions_b()[1].wr_id, 100u);
  EXPECT_EQ(h.completions_b()[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(h.completions_b()[0].byte_len, 8192u);
  EXPECT_EQ(f.src, f.dst);
}

TEST(Connection_Send, OrderedCompletionDeliversInPostingOrder) {
  ConnectionConfig c = SmallConfig(2);
  c.ordered_completion = true;
  HostPair h(c);
  SendFixture f(h);
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(100, 0, 8192)).ok());
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(101, 8192, 8192)).ok());
  h.fate = [](const RecordedPacket& p, bool to_b, Instant) {
    Fate fate;
    if (to_b && wire::IsData(p.packet.opcode) && p.packet.data.msg_seq == 0) {
      fate.delay = std::chrono::microseconds(40);
    }
    return fate;
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(1, 0, 8192)).ok());
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(2, 8192, 8192)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_b(), SizeIs(2));
  EXPECT_EQ(h.completions_b()[0].wr_id, 100u);
  EXPECT_EQ(h.completions_b()[1].wr_id, 101u);
  ASSERT_THAT(h.completions_a(), SizeIs(2));
  EXPECT_EQ(h.completions_a()[0].wr_id, 1u);
  EXPECT_EQ(h.completions_a()[1].wr_id, 2u);
}

TEST(Connection_Send, ReceiverNotReadyWaitsForTheReceiveThenCompletes) {
  HostPair h(SmallConfig(2));
  SendFixture f(h);
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(1, 0, 4096)).ok());
  h.RunFor(std::chrono::microseconds(100));
  EXPECT_GT(h.cb().counters().rnr_naks_sent, 0u);
  EXPECT_THAT(h.completions_a(), SizeIs(0));
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(100, 0, 4096)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kSuccess);
  ASSERT_THAT(h.completions_b(), SizeIs(1));
  EXPECT_TRUE(std::equal(f.src.begin(), f.src.begin() + 4096, f.dst.begin()));
}

TEST(Connection_Send, RnrRetryLimitFailsTheMessage) {
  ConnectionConfig c = SmallConfig(1);
  c.rnr_retry = 2;
  HostPair h(c);
  SendFixture f(h);
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(1, 0, 1024)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRnrRetryExcErr);
}

TEST(Connection_Send, SendLongerThanTheReceiveFailsBothSides) {
  HostPair h(SmallConfig(1));
  SendFixture f(h);
  ASSERT_TRUE(h.cb().PostRecv(h.now(), f.Recv(100, 0, 1000)).ok());
  ASSERT_TRUE(h.ca().PostSend(h.now(), f.Send(1, 0, 2048)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_b(), SizeIs(1));
  EXPECT_EQ(h.completions_b()[0].status, WcStatus::kLocLenErr);
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRemInvReqErr);
}

TEST(Connection_WriteImm, ConsumesAReceiveAndCarriesTheImmediate) {
  HostPair h(SmallConfig(2));
  Buffers b(h, 8192);
  ASSERT_TRUE(h.cb().PostRecv(h.now(), RecvWorkRequest{55, {}}).ok());
  SendWorkRequest wr = Write(b, 1, 0, 8192);
  wr.opcode = WrOpcode::kWriteWithImm;
  wr.imm = 0xdeadbeef;
  ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
  h.RunFor(std::chrono::milliseconds(5));
  ASSERT_THAT(h.completions_b(), SizeIs(1));
  EXPECT_EQ(h.completions_b()[0].wr_id, 55u);
  EXPECT_EQ(h.completions_b()[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_TRUE(h.completions_b()[0].has_imm);
  EXPECT_EQ(h.completions_b()[0].imm, 0xdeadbeefu);
  EXPECT_EQ(h.completions_b()[0].byte_len, 8192u);
  EXPECT_EQ(b.src, b.dst);
}

TEST(Connection_Fence, FencedRequestStartsAfterEarlierOnesComplete) {
  HostPair h(SmallConfig(2));
  Buffers b(h, 16 * 1024);
  Instant first_done = kNever, fenced_first_sent = kNever;
  h.on_send = [&](const RecordedPacket& p, bool to_b) {
    if (to_b && wire::IsData(p.packet.opcode) && p.packet.data.msg_seq == 1 &&
        fenced_first_sent == kNever) {
      fenced_first_sent = h.now();
    }
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 8192)).ok());
  SendWorkRequest fenced = Write(b, 2, 8192, 8192);
  fenced.flags |= send_flags::kFence;
  ASSERT_TRUE(h.ca().PostSend(h.now(), fenced).ok());
  while (h.completions_a().empty()) h.RunFor(std::chrono::microseconds(1));
  first_done = h.now();
  h.RunFor(std::chrono::milliseconds(5));
  EXPECT_GE(fenced_first_sent, first_done);
  EXPECT_THAT(h.completions_a(), SizeIs(2));
}

TEST(Connection_Paths, BlackholedPathFailsOverRotatesAndProbes) {
  ConnectionConfig c = SmallConfig(4);
  HostPair h(c);
  Buffers b(h, 256 * 1024);
  const uint16_t dead_port = c.InitialPort(2);
  // Everything sent with path 2's initial source port vanishes (the route is dead).
  h.fate = [&](const RecordedPacket& p, bool to_b, Instant) {
    Fate f;
    f.drop = p.meta.src_port == dead_port;  // ACKs carry the path's port as source too
    return f;
  };
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, i, i * 65536, 65536)).ok());
  }
  h.RunFor(std::chrono::milliseconds(20));
  ASSERT_THAT(h.completions_a(), SizeIs(4));
  for (const Completion& comp : h.completions_a()) EXPECT_EQ(comp.status, WcStatus::kSuccess);
  EXPECT_EQ(b.src, b.dst);
  const PathStats s = h.ca().path_stats(2);
  EXPECT_EQ(s.state, PathState::kActive);
  EXPECT_NE(s.src_port, dead_port);
  EXPECT_GE(s.rotations, 1u);
  EXPECT_GT(h.ca().counters().rerouted_packets, 0u);
  std::vector<std::string> seen;
  for (const PathEvent& e : h.TakeEventsA()) {
    if (e.path_id != 2) continue;
    seen.push_back(e.kind == PathEvent::Kind::kPortRotated
                       ? "rotated"
                       : std::string(PathStateName(e.to)));
  }
  EXPECT_THAT(seen, ElementsAre("suspect", "failed", "rotated", "probing", "active"));
  for (uint16_t p : {0, 1, 3}) EXPECT_EQ(h.ca().path_stats(p).rotations, 0u);
}

TEST(Connection_Paths, AllPathsDeadEndsInRetryExceeded) {
  HostPair h(SmallConfig(2));
  Buffers b(h, 8192);
  h.fate = [](const RecordedPacket&, bool, Instant) { return Fate{.drop = true}; };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 8192)).ok());
  h.RunFor(std::chrono::seconds(1));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(h.ca().NextDeadline(), kNever);
}

TEST(Connection_Abort, FlushesOutstandingSendsAndReceivesAndGoesQuiet) {
  HostPair h(SmallConfig(2));
  Buffers b(h, 8192);
  h.fate = [](const RecordedPacket&, bool, Instant) { return Fate{.drop = true}; };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 4096)).ok());
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 2, 4096, 4096)).ok());
  RecvWorkRequest recv;
  recv.wr_id = 3;
  recv.local = {b.src_mr.addr, 1024, b.src_mr.lkey};
  ASSERT_TRUE(h.ca().PostRecv(h.now(), recv).ok());
  h.RunFor(std::chrono::microseconds(10));
  h.ca().Abort(h.now());
  h.RunFor(std::chrono::microseconds(10));
  ASSERT_THAT(h.completions_a(), SizeIs(3));
  for (const Completion& c : h.completions_a()) EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  EXPECT_EQ(h.ca().state(), Connection::State::kError);
  EXPECT_EQ(h.ca().error_status(), WcStatus::kWrFlushErr);
  EXPECT_EQ(h.ca().NextDeadline(), kNever);
  h.ca().Abort(h.now());  // again: nothing more
  EXPECT_THAT(h.completions_a(), SizeIs(3));
}

TEST(Connection_Paths, OperatorRotationIsObservable) {
  HostPair h(SmallConfig(2));
  const uint16_t before = h.ca().path_stats(1).src_port;
  ASSERT_TRUE(h.ca().RequestRotation(h.now(), 1).ok());
  EXPECT_FALSE(h.ca().RequestRotation(h.now(), 9).ok());
  h.RunFor(std::chrono::milliseconds(1));
  EXPECT_NE(h.ca().path_stats(1).src_port, before);
  EXPECT_EQ(h.ca().path_stats(1).state, PathState::kActive);
  auto events = h.TakeEventsA();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, PathEvent::Kind::kPortRotated);
  EXPECT_EQ(events[0].reason, PathEventReason::kManual);
  EXPECT_EQ(events[0].old_port, before);
}

TEST(Connection_Security, WrongTokenIsDroppedAndCounted) {
  HostPair h(SmallConfig(1));
  wire::Packet p;
  p.opcode = wire::Opcode::kWrite;
  p.dest_conn = 1;
  p.token = 0xbad;
  h.cb().OnPacket(h.now(), p, RxMeta{});
  EXPECT_EQ(h.cb().counters().bad_token, 1u);
  EXPECT_EQ(h.cb().counters().rcvd_pkts, 0u);
}

TEST(Connection_GoBackN, LossResendsFromTheGapInOrder) {
  ConnectionConfig c = SmallConfig(1);
  c.profile = TransportProfile::GoBackN();
  HostPair h(c);
  Buffers b(h, 8 * 1024);
  bool dropped = false;
  std::vector<uint32_t> retx;
  h.fate = [&](const RecordedPacket& p, bool to_b, Instant) {
    Fate f;
    if (to_b && wire::IsData(p.packet.opcode) && p.packet.psn == 2 && !dropped) {
      dropped = f.drop = true;
    }
    return f;
  };
  h.on_send = [&](const RecordedPacket& p, bool to_b) {
    if (to_b && (p.packet.flags & wire::flags::kRetransmit)) retx.push_back(p.packet.psn);
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 8192)).ok());
  h.RunFor(std::chrono::milliseconds(5));
  EXPECT_THAT(retx, ElementsAre(2, 3, 4, 5, 6, 7));
  EXPECT_EQ(b.src, b.dst);
  EXPECT_GE(h.cb().counters().seq_err_naks_sent, 1u);
}

TEST(Connection_ReorderBuffer, PlacesInOrderAndDeliversEverything) {
  ConnectionConfig c = SmallConfig(4);
  c.profile = TransportProfile::ReorderBuffer(8 * 1024);
  HostPair h(c);
  Buffers b(h, 64 * 1024);
  int n = 0;
  h.fate = [&](const RecordedPacket& p, bool to_b, Instant) {
    Fate f;
    if (to_b && wire::IsData(p.packet.opcode) && ++n % 10 == 0 &&
        !(p.packet.flags & wire::flags::kRetransmit)) {
      f.drop = true;
    }
    f.delay = std::chrono::microseconds(5 + p.packet.path_id * 3);  // paths differ in latency
    return f;
  };
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, i, i * 8192, 8192)).ok());
  }
  h.RunFor(std::chrono::milliseconds(20));
  EXPECT_THAT(h.completions_a(), SizeIs(8));
  EXPECT_EQ(b.src, b.dst);
}

}  // namespace
}  // namespace metaroce::core

namespace metaroce::core {
namespace {

// A path whose RTT is far above every timeout the estimator starts with (a stalled peer, a
// paused VM, a deep queue): timeouts fire before any ACK, every packet is retransmitted (so
// Karn's rule gives no RTT sample), paths fail and rotate. The probe that follows a rotation
// measures the real RTT, so the connection settles instead of failing.
TEST(Connection_Paths, RttFarAboveTheInitialTimeoutsStillCompletes) {
  ConnectionConfig c;
  c.path_count = 4;
  c.mtu = 1024;
  HostPair h(c);
  std::vector<std::byte> src(64 * 1024), dst(64 * 1024);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  auto smr = *h.a().memory().Register(src.data(), src.size(), access::kLocalWrite);
  auto dmr = *h.b().memory().Register(dst.data(), dst.size(),
                                      access::kLocalWrite | access::kRemoteWrite);
  h.fate = [](const RecordedPacket&, bool, Instant) {
    Fate f;
    f.delay = std::chrono::milliseconds(5);  // 10 ms RTT; initial PTO 60 us, 64x: 3.84 ms
    return f;
  };
  for (int i = 0; i < 4; ++i) {
    SendWorkRequest wr;
    wr.wr_id = i;
    wr.local = {smr.addr + i * 16384, 16384, smr.lkey};
    wr.remote_addr = dmr.addr + i * 16384;
    wr.rkey = dmr.rkey;
    ASSERT_TRUE(h.ca().PostSend(h.now(), wr).ok());
  }
  h.RunFor(std::chrono::seconds(2));
  ASSERT_THAT(h.completions_a(), SizeIs(4));
  for (const Completion& comp : h.completions_a()) EXPECT_EQ(comp.status, WcStatus::kSuccess);
  EXPECT_EQ(src, dst);
  // The estimator learned the real RTT.
  EXPECT_GE(h.ca().path_stats(0).srtt, std::chrono::milliseconds(9));
}

// What a connection costs (docs/architecture.md): the heap it holds, measured by the allocator
// (bytes in use, small and mmapped blocks), not estimated.
size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

constexpr size_t kIdleBudget = 32 * 1024;  // bytes per idle 16-path connection (issue 12)

// Under AddressSanitizer malloc is ASan's, and glibc's mallinfo2 does not see it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAllocatorCounts = false;
#else
constexpr bool kAllocatorCounts = true;
#endif

TEST(Connection_Cost, AnIdleSixteenPathConnectionHoldsAtMost32KiB) {
  if (!kAllocatorCounts) GTEST_SKIP() << "the sanitizer's allocator: mallinfo2 cannot count it";
  testing::RecordingSink sink;
  Endpoint ep(sink);
  constexpr uint32_t kConnections = 500;
  ConnectionConfig c;
  c.path_count = 16;
  c.plane_count = 2;
  // The endpoint's own tables grow too; they are part of what a connection costs.
  const size_t before = HeapInUse();
  for (uint32_t id = 1; id <= kConnections; ++id) {
    c.local_conn_id = id;
    ASSERT_TRUE(ep.CreateConnection(c).ok());
  }
  const size_t per_connection = (HeapInUse() - before) / kConnections;
  RecordProperty("bytes_per_idle_connection", std::to_string(per_connection));
  EXPECT_LE(per_connection, kIdleBudget);
}

// State that grows with traffic (each path's ring of outstanding packets, the queues) shrinks
// back when the traffic ends: after 4 MiB sprayed over 16 paths with loss, what the two
// connections of a pair hold (the heap their destruction gives back) is within an idle
// connection's budget each.
TEST(Connection_Cost, StateGrownByTrafficShrinksBackWhenItEnds) {
  if (!kAllocatorCounts) GTEST_SKIP() << "the sanitizer's allocator: mallinfo2 cannot count it";
  ConnectionConfig c;
  c.path_count = 16;
  HostPair h(c);
  Buffers b(h, 4u << 20);
  uint64_t sent = 0;
  h.fate = [&](const RecordedPacket&, bool, Instant) {
    Fate f;
    f.drop = ++sent % 50 == 0;  // 2 % loss: gaps, retransmissions, timeouts
    return f;
  };
  for (uint32_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, i, i * (256u << 10), 256u << 10)).ok());
  }
  h.RunFor(std::chrono::milliseconds(200));
  ASSERT_THAT(h.completions_a(), SizeIs(16));
  for (const Completion& comp : h.completions_a()) EXPECT_EQ(comp.status, WcStatus::kSuccess);
  ASSERT_EQ(b.src, b.dst);
  ASSERT_GT(h.ca().counters().retransmits, 0u);
  const size_t with_connections = HeapInUse();
  ASSERT_TRUE(h.a().DestroyConnection(1).ok());
  ASSERT_TRUE(h.b().DestroyConnection(1).ok());
  const size_t held = with_connections - HeapInUse();
  RecordProperty("bytes_held_by_the_pair_after_traffic", std::to_string(held));
  EXPECT_LE(held, 2 * kIdleBudget);
}

TEST(Connection_Pull, APacedRequesterIsClockedByTheRespondersPulls) {
  // congestion.md §6 end to end: B's budget gives A's connection 125 bytes per path (paced), B
  // pulls at 1 Gb/s. The Write lands whole; after the first pulls, A's new packets leave one
  // pull slot apart (1,146 wire bytes at 1 Gb/s: 9.168 us) whatever the ACKs' own timing.
  ReceiveBudgetConfig budget;
  budget.budget_bytes = 1000;
  budget.mtu = 1024;
  budget.pull.rate_gbps = 1;
  budget.pull.pulled_packet_wire_bytes = 1024 + wire::kDataHeadersSize + 66;
  ConnectionConfig c = SmallConfig(8);
  c.initial_window_hint_bytes = 1000;
  HostPair h(c, budget);
  Buffers b(h, 64 * 1024);
  std::vector<Instant> pulled_sends;
  h.on_send = [&](const RecordedPacket& p, bool a_to_b) {
    if (a_to_b && (p.packet.flags & wire::flags::kPulled)) pulled_sends.push_back(h.now());
  };
  ASSERT_TRUE(h.ca().PostSend(h.now(), Write(b, 1, 0, 64 * 1024)).ok());
  h.RunFor(std::chrono::milliseconds(50));
  ASSERT_THAT(h.completions_a(), SizeIs(1));
  EXPECT_EQ(h.completions_a()[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b.src, b.dst);
  EXPECT_GT(h.cb().counters().pulls_sent, 32u);
  EXPECT_EQ(h.ca().counters().pulls_rcvd, h.cb().counters().pulls_sent);
  EXPECT_EQ(h.ca().counters().pulled_pkts, pulled_sends.size());
  ASSERT_GT(pulled_sends.size(), 32u);
  for (size_t i = 1; i < pulled_sends.size(); ++i) {
    EXPECT_GE(pulled_sends[i] - pulled_sends[i - 1], Duration(9168)) << i;
  }
  EXPECT_EQ(h.b().receive_budget().pacer().waiting(), 0u);
}

}  // namespace
}  // namespace metaroce::core
