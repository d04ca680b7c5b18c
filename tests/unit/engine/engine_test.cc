// Two engines in one process joined by MemoryPort pairs: worker w of engine A and worker w of
// engine B share a pair, as the same queue of two veth ends do (the receive queue is the
// sender's). Connections are created directly (no TCP exchange) with matching configs.
#include "lib/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/io/memory_port.h"
#include "lib/wire/packet.h"

namespace metaroce::engine {
namespace {

using ::testing::Each;
using ::testing::Field;

constexpr auto kTimeout = std::chrono::seconds(8);

// Forwards to a MemoryPort and logs the opcode of every packet sent, in order.
class RecordingPort : public io::PacketPort {
 public:
  RecordingPort(std::unique_ptr<io::PacketPort> inner, std::vector<wire::Opcode>* log)
      : inner_(std::move(inner)), log_(log) {}
  bool Send(const io::TxPacket& p) override {
    if (!inner_->Send(p)) return false;
    log_->push_back(static_cast<wire::Opcode>(p.headers[offsetof(wire::BaseHeader, opcode)]));
    return true;
  }
  void Flush() override { inner_->Flush(); }
  size_t Receive(std::span<io::RxPacket> out) override { return inner_->Receive(out); }
  void Release(std::span<const io::RxPacket> packets) override { inner_->Release(packets); }
  int wait_fd() const override { return inner_->wait_fd(); }
  io::PortStats stats() const override { return inner_->stats(); }
  std::string description() const override { return inner_->description(); }

 private:
  std::unique_ptr<io::PacketPort> inner_;
  std::vector<wire::Opcode>* log_;
};

class TwoEngines {
 public:
  // workers 0: two inline engines (one port pair), driven by PollBoth() from the test's thread.
  explicit TwoEngines(int workers) {
    for (int w = 0; w < std::max(workers, 1); ++w) {
      io::MemoryPort::Options a, b;
      a.local_ip = addr_a;
      b.local_ip = addr_b;
      a.ring_capacity = b.ring_capacity = 4096;
      auto [pa, pb] = io::MemoryPort::CreatePair(a, b);
      ports_a_.push_back(std::move(pa));
      ports_b_.push_back(std::move(pb));
    }
    EngineOptions o;
    o.workers = workers;
    o.idle = IdleStrategy::kPoll;
    o.spins_before_sleep = 64;
    auto fa = [this](int w, int) -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
      return std::unique_ptr<io::PacketPort>(std::move(ports_a_[w]));
    };
    // Inline only: one thread sends, so one log serves.
    auto fb = [this, workers](int w, int) -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
      if (workers > 0) return std::unique_ptr<io::PacketPort>(std::move(ports_b_[w]));
      return std::unique_ptr<io::PacketPort>(
          std::make_unique<RecordingPort>(std::move(ports_b_[w]), &sent_by_b));
    };
    a = *Engine::Create(o, fa);
    b = *Engine::Create(o, fb);
    cq_a = a->CreateCompletionChannel(4096);
    cq_b = b->CreateCompletionChannel(4096);
  }

  // Connection id_a on A <-> id_b on B, with matching tokens.
  // `min_pto`: tests that count the packets one Poll sends need one long enough that a preempted
  // thread does not turn a stall into a retransmission.
  // `send_queue`: the core's send queue and the send ring on both sides (0: the default).
  std::pair<std::shared_ptr<ConnectionChannel>, std::shared_ptr<ConnectionChannel>> Connect(
      uint32_t id_a, uint32_t id_b,
      core::Duration min_pto = std::chrono::milliseconds(2), uint32_t send_queue = 0) {
    core::ConnectionConfig ca;
    if (send_queue > 0) ca.max_send_queue = send_queue;
    ca.path_count = 4;
    ca.mtu = 1024;
    // Threads of a loaded test machine (2 vCPUs, tests in parallel, sanitizers) can stall for
    // longer than the protocol's defaults tolerate; these tests are about the engine.
    ca.no_progress_timeout = std::chrono::seconds(5);
    ca.max_transmissions = 255;
    ca.min_probe_timeout = min_pto;
    ca.initial_rtt = std::chrono::microseconds(500);
    ca.local_conn_id = id_a;
    ca.remote_conn_id = id_b;
    ca.tx_token = 0x1111000000000000ull + id_b;
    ca.rx_token = 0x2222000000000000ull + id_a;
    core::ConnectionConfig cb = ca;
    cb.local_conn_id = id_b;
    cb.remote_conn_id = id_a;
    std::swap(cb.tx_token, cb.rx_token);
    cb.port_base = 50000;
    auto cha = a->CreateConnection(ca, PeerRoute{{addr_b}}, cq_a, cq_a);
    auto chb = b->CreateConnection(cb, PeerRoute{{addr_a}}, cq_b, cq_b);
    EXPECT_TRUE(cha.ok()) << cha.status();
    EXPECT_TRUE(chb.ok()) << chb.status();
    return {*cha, *chb};
  }

  // Polls `cq` until `count` completions arrived or the timeout passed. Inline engines are
  // driven meanwhile (both of them: each needs the other's answers).
  std::vector<core::Completion> Collect(CompletionChannel& cq, size_t count) {
    std::vector<core::Completion> out;
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    core::Completion buf[64];
    while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
      const bool busy = PollBoth();
      const size_t n = cq.Poll(buf);
      out.insert(out.end(), buf, buf + n);
      if (n == 0 && !busy && !a->is_inline()) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    return out;
  }
  // One iteration of each inline engine; false for threaded ones.
  bool PollBoth() {
    const bool pa = a->Poll();
    const bool pb = b->Poll();
    return pa || pb;
  }

  const io::IpAddress addr_a = io::IpAddress::V4(0xc6120001);  // 198.18.0.1
  const io::IpAddress addr_b = io::IpAddress::V4(0xc6120002);  // 198.18.0.2
  std::unique_ptr<Engine> a, b;
  std::shared_ptr<CompletionChannel> cq_a, cq_b;
  std::vector<wire::Opcode> sent_by_b;  // inline: every packet engine B's port accepted, in order

 private:
  std::vector<std::unique_ptr<io::MemoryPort>> ports_a_, ports_b_;
};

std::vector<std::byte> Pattern(size_t n) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte((i * 7 + 13) & 0xff);
  return v;
}

TEST(Engine_Create, RefusesBadOptionsAndFactoryErrors) {
  EngineOptions o;
  o.workers = -1;
  auto none = [](int, int) -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
    return absl::UnavailableError("no port here");
  };
  EXPECT_EQ(Engine::Create(o, none).status().code(), absl::StatusCode::kInvalidArgument);
  o.workers = 257;
  EXPECT_EQ(Engine::Create(o, none).status().code(), absl::StatusCode::kInvalidArgument);
  for (int workers : {0, 1}) {  // inline mode asks for worker 0's ports too
    o.workers = workers;
    auto r = Engine::Create(o, none);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("worker 0 plane 0"));
  }
  // A pull rate that is no rate is refused before any port is made (InvalidArgument, not the
  // factory's Unavailable).
  o.workers = 1;
  for (double rate : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.pull_rate_gbps = rate;
    auto r = Engine::Create(o, none);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << rate;
    EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("pull_rate_gbps"));
  }
}

// Each worker's Endpoint is a shard of the host: it gets an even share of the receive budget and
// of the pull pacer's rate (the shards' pacers together pull at the host's rate), and a pull
// lets through one full packet of the engine's MTU: payload, MetaRoCE headers (56 bytes) and the
// link's own 66 bytes.
TEST(Engine_Create, SplitsTheReceiveBudgetAndThePullRateAmongWorkers) {
  std::vector<std::unique_ptr<io::MemoryPort>> peers;  // the ports' other ends, kept open
  auto factory = [&peers](int, int) -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
    auto [mine, peer] = io::MemoryPort::CreatePair({}, {});
    peers.push_back(std::move(peer));
    return std::unique_ptr<io::PacketPort>(std::move(mine));
  };
  auto shard = [](Engine& e, int w) {
    return e.Call<core::ReceiveBudgetConfig>(w, [](Worker& wk) {
      const core::ReceiveBudget& b = wk.endpoint().receive_budget();
      EXPECT_EQ(b.pacer().config().rate_gbps, b.config().pull.rate_gbps);  // the pacer runs it
      return b.config();
    });
  };
  EngineOptions o;
  o.workers = 4;
  o.receive_budget_bytes = uint64_t{1} << 20;
  o.pull_rate_gbps = 200;
  o.mtu = 1024;
  {
    auto e = Engine::Create(o, factory);
    ASSERT_TRUE(e.ok()) << e.status();
    for (int w = 0; w < 4; ++w) {
      const core::ReceiveBudgetConfig b = shard(**e, w);
      EXPECT_EQ(b.budget_bytes, 262144u) << w;
      EXPECT_EQ(b.pull.rate_gbps, 50) << w;
      EXPECT_EQ(b.pull.pulled_packet_wire_bytes, 1024u + 56 + 66) << w;
      EXPECT_EQ(b.pull.pulled_packet_wire_bytes,
                o.mtu + wire::kDataHeadersSize + b.pull.wire_overhead_bytes);
    }
  }
  // Inline mode: one shard, the whole host.
  o.workers = 0;
  o.mtu = 4096;
  {
    auto e = Engine::Create(o, factory);
    ASSERT_TRUE(e.ok()) << e.status();
    const core::ReceiveBudgetConfig b = shard(**e, 0);
    EXPECT_EQ(b.budget_bytes, uint64_t{1} << 20);
    EXPECT_EQ(b.pull.rate_gbps, 200);
    EXPECT_EQ(b.pull.pulled_packet_wire_bytes, 4096u + 56 + 66);
  }
  // 0: no pulls in any shard (the default: the engine cannot know the host's links).
  EXPECT_EQ(EngineOptions().pull_rate_gbps, 0);
  o.workers = 3;
  o.pull_rate_gbps = 0;
  {
    auto e = Engine::Create(o, factory);
    ASSERT_TRUE(e.ok()) << e.status();
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(shard(**e, w).pull.rate_gbps, 0) << w;
      EXPECT_FALSE((*e)->Call<bool>(
          w, [](Worker& wk) { return wk.endpoint().receive_budget().pacer().enabled(); }));
    }
  }
}

TEST(Engine_Memory, RegistersSameKeysInEveryWorker) {
  TwoEngines t(2);
  std::vector<std::byte> buf(4096);
  auto mr = t.a->RegisterMemory(buf.data(), buf.size(),
                                core::access::kLocalWrite | core::access::kRemoteWrite);
  ASSERT_TRUE(mr.ok()) << mr.status();
  EXPECT_GE(mr->lkey, core::MemoryTable::kFirstCallerKey);
  EXPECT_NE(mr->lkey, mr->rkey);
  for (int w = 0; w < 2; ++w) {
    const size_t regions = t.a->Call<size_t>(w, [](Worker& wk) { return wk.endpoint().memory().size(); });
    EXPECT_EQ(regions, 1u);
  }
  EXPECT_EQ(t.a->RegisterMemory(buf.data(), buf.size(), core::access::kRemoteWrite).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(t.a->DeregisterMemory(mr->lkey).ok());
  EXPECT_FALSE(t.a->DeregisterMemory(mr->lkey).ok());
}

// Regions of other processes (attached applications) get random keys from the engine's range
// and the protection domain asked for, in every worker; domains are never 0 and never repeat.
TEST(Engine_Memory, MappedRegionsGetRandomKeysInTheirDomain) {
  TwoEngines t(2);
  absl::StatusOr<uint32_t> pd1 = t.a->AllocateProtectionDomain();
  absl::StatusOr<uint32_t> pd2 = t.a->AllocateProtectionDomain();
  ASSERT_TRUE(pd1.ok() && pd2.ok());
  EXPECT_NE(*pd1, core::kDefaultProtectionDomain);
  EXPECT_NE(*pd1, *pd2);
  std::vector<std::byte> here(8192);
  const MappedRegion region{0x7f0000200000, here.size(),
                            core::access::kLocalWrite | core::access::kRemoteWrite, here.data()};
  auto mr = t.a->RegisterMappedMemory(region, *pd1);
  ASSERT_TRUE(mr.ok()) << mr.status();
  EXPECT_EQ(mr->pd, *pd1);
  EXPECT_EQ(mr->addr, region.addr);
  for (uint32_t key : {mr->lkey, mr->rkey}) {
    EXPECT_GE(key, Engine::kFirstRandomKey);
    EXPECT_LE(key, Engine::kLastRandomKey);
  }
  for (int w = 0; w < 2; ++w) {
    const core::AccessError in_pd1 = t.a->Call<core::AccessError>(w, [&](Worker& wk) {
      std::byte* out = nullptr;
      return wk.endpoint().memory().ResolveRemoteWrite(*pd1, mr->rkey, region.addr + 8, 8, &out);
    });
    const core::AccessError in_pd2 = t.a->Call<core::AccessError>(w, [&](Worker& wk) {
      std::byte* out = nullptr;
      return wk.endpoint().memory().ResolveRemoteWrite(*pd2, mr->rkey, region.addr + 8, 8, &out);
    });
    EXPECT_EQ(in_pd1, core::AccessError::kNone);
    EXPECT_EQ(in_pd2, core::AccessError::kUnknownKey);
  }
  MappedRegion unmapped = region;
  unmapped.local_base = nullptr;
  EXPECT_EQ(t.a->RegisterMappedMemory(unmapped, *pd1).status().code(),
            absl::StatusCode::kInvalidArgument);
  MappedRegion write_only = region;
  write_only.access = core::access::kRemoteWrite;
  EXPECT_EQ(t.a->RegisterMappedMemory(write_only, *pd1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The default domain's registrations keep their counted keys, in domain 0.
  std::vector<std::byte> buf(64);
  auto own = t.a->RegisterMemory(buf.data(), buf.size(), core::access::kLocalWrite);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->pd, core::kDefaultProtectionDomain);
  EXPECT_TRUE(t.a->DeregisterMemory(mr->lkey).ok());
  EXPECT_TRUE(t.a->DeregisterMemory(own->lkey).ok());
}

// An observed connection's path events reach its own event ring and, as copies, the engine's
// observer rings; an unobserved one's only its own ring.
TEST(Engine_Events, ObservedConnectionsCopyTheirEventsToTheObserver) {
  TwoEngines t(2);
  auto [plain, plain_b] = t.Connect(2, 2);
  core::ConnectionConfig c;
  c.path_count = 2;
  c.local_conn_id = 3;
  c.remote_conn_id = 3;
  auto observed = std::make_shared<ConnectionChannel>(3, t.a->OwnerOf(3), 16, 16, 16, t.cq_a,
                                                      t.cq_a);
  ASSERT_TRUE(t.a->CreateConnectionOnChannel(c, PeerRoute{{t.addr_b}}, observed,
                                             ObservePathEvents::kYes)
                  .ok());
  ASSERT_TRUE(t.a->RequestRotation(2, 1).ok());
  ASSERT_TRUE(t.a->RequestRotation(3, 1).ok());
  std::vector<core::PathEvent> copies;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (copies.empty() && std::chrono::steady_clock::now() < deadline) {
    core::PathEvent buf[8];
    copies.insert(copies.end(), buf, buf + t.a->PollObservedEvents(buf));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(copies.empty());
  EXPECT_THAT(copies, Each(Field(&core::PathEvent::conn_id, 3u)));
  EXPECT_EQ(copies[0].kind, core::PathEvent::Kind::kPortRotated);
  EXPECT_EQ(copies[0].reason, core::PathEventReason::kManual);
  // Each connection's own ring has its own events, the copies taken or not.
  auto first_event = [](ConnectionChannel& ch) {
    core::PathEvent e;
    const auto until = std::chrono::steady_clock::now() + kTimeout;
    while (!ch.events.TryPop(e) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return e;
  };
  EXPECT_EQ(first_event(*observed).conn_id, 3u);
  EXPECT_EQ(first_event(*plain).conn_id, 2u);
  uint64_t dropped = 0;
  for (const WorkerStats& w : t.a->Stats()) dropped += w.observed_events_dropped;
  EXPECT_EQ(dropped, 0u);
  EXPECT_TRUE(t.a->DestroyConnection(3).ok());
}

// An observer-only connection's events go to the observer rings and nowhere else: its own event
// ring (the smallest there is) stays empty and drops nothing.
TEST(Engine_Events, ObserverOnlyConnectionsLeaveTheirOwnRingEmpty) {
  TwoEngines t(2);
  core::ConnectionConfig c;
  c.path_count = 2;
  c.local_conn_id = 3;
  c.remote_conn_id = 3;
  auto ch = t.a->CreateConnection(c, PeerRoute{{t.addr_b}}, t.cq_a, t.cq_a,
                                  ObservePathEvents::kOnly);
  ASSERT_TRUE(ch.ok()) << ch.status();
  EXPECT_EQ((*ch)->events.capacity(), 2u);
  for (uint16_t path : {0, 1}) ASSERT_TRUE(t.a->RequestRotation(3, path).ok());
  std::vector<core::PathEvent> copies;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (copies.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    core::PathEvent buf[8];
    copies.insert(copies.end(), buf, buf + t.a->PollObservedEvents(buf));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(copies.size(), 2u);  // the two rotations
  EXPECT_THAT(copies, Each(Field(&core::PathEvent::conn_id, 3u)));
  core::PathEvent e;
  EXPECT_FALSE((*ch)->events.TryPop(e));
  auto snap = t.a->Snapshot(3);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->events_dropped, 0u);
  EXPECT_TRUE(t.a->DestroyConnection(3).ok());
}

// 1000 Writes and Sends over two connections, one owned by each worker on both engines.
TEST(Engine_DataPath, ThousandWritesAndSendsAcrossTwoWorkers) {
  TwoEngines t(2);
  constexpr size_t kMsgs = 1000;
  constexpr size_t kMsgBytes = 2000;  // two packets at mtu 1024
  std::vector<std::byte> src = Pattern(kMsgs * kMsgBytes);
  std::vector<std::byte> dst(kMsgs * kMsgBytes);
  auto smr = *t.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *t.b->RegisterMemory(dst.data(), dst.size(),
                                  core::access::kLocalWrite | core::access::kRemoteWrite);
  // ids 2 and 3: owners 0 and 1 on both sides.
  auto [a0, b0] = t.Connect(2, 2);
  auto [a1, b1] = t.Connect(3, 3);
  ASSERT_EQ(a0->owner(), 0);
  ASSERT_EQ(a1->owner(), 1);
  ConnectionChannel* as[2] = {a0.get(), a1.get()};
  ConnectionChannel* bs[2] = {b0.get(), b1.get()};

  // Odd messages are Sends: their receives first.
  size_t recvs = 0;
  for (size_t i = 1; i < kMsgs; i += 2) {
    core::RecvWorkRequest r;
    r.wr_id = i;
    r.local = {dmr.addr + i * kMsgBytes, kMsgBytes, dmr.lkey};
    ASSERT_TRUE(bs[i % 4 / 2]->recvs.TryPush(r));
    t.b->Wake(bs[i % 4 / 2]->owner());
    ++recvs;
  }
  for (size_t i = 0; i < kMsgs; ++i) {
    core::SendWorkRequest wr;
    wr.wr_id = i;
    wr.local = {smr.addr + i * kMsgBytes, kMsgBytes, smr.lkey};
    if (i % 2 == 0) {
      wr.opcode = core::WrOpcode::kWrite;
      wr.remote_addr = dmr.addr + i * kMsgBytes;
      wr.rkey = dmr.rkey;
    } else {
      wr.opcode = core::WrOpcode::kSend;
    }
    ConnectionChannel* ch = as[i % 4 / 2];
    ASSERT_TRUE(ch->sends.TryPush(wr));
    t.a->Wake(ch->owner());
  }
  auto sent = t.Collect(*t.cq_a, kMsgs);
  auto received = t.Collect(*t.cq_b, recvs);
  ASSERT_EQ(sent.size(), kMsgs);
  ASSERT_EQ(received.size(), recvs);
  EXPECT_THAT(sent, Each(Field(&core::Completion::status, core::WcStatus::kSuccess)));
  EXPECT_THAT(received, Each(Field(&core::Completion::status, core::WcStatus::kSuccess)));
  EXPECT_THAT(received, Each(Field(&core::Completion::byte_len, kMsgBytes)));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);

  auto stats_a = t.a->Stats();
  EXPECT_GT(stats_a[0].tx_packets, 0u);
  EXPECT_GT(stats_a[1].tx_packets, 0u);
  auto snap = t.a->Snapshot(3);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->owner, 1);
  EXPECT_EQ(snap->counters.messages_completed, kMsgs / 2);
  EXPECT_EQ(snap->paths.size(), 4u);
  for (uint32_t id : {2u, 3u}) {
    EXPECT_TRUE(t.a->DestroyConnection(id).ok());
    EXPECT_TRUE(t.b->DestroyConnection(id).ok());
  }
}

// A on worker 0 (id 4) talks to B on worker 1 (id 5): B's worker 0 receives A's packets (same
// queue) and hands them to worker 1; B's ACKs reach A's worker 1, which hands them to worker 0.
TEST(Engine_Handoff, ConnectionOwnedByOtherWorkerStillWorks) {
  TwoEngines t(2);
  std::vector<std::byte> src = Pattern(64 * 1024);
  std::vector<std::byte> dst(64 * 1024);
  auto smr = *t.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *t.b->RegisterMemory(dst.data(), dst.size(),
                                  core::access::kLocalWrite | core::access::kRemoteWrite);
  auto [ca, cb] = t.Connect(4, 5);
  ASSERT_EQ(ca->owner(), 0);
  ASSERT_EQ(cb->owner(), 1);
  for (uint64_t i = 0; i < 16; ++i) {
    core::SendWorkRequest wr;
    wr.wr_id = i;
    wr.opcode = core::WrOpcode::kWrite;
    wr.local = {smr.addr + i * 4096, 4096, smr.lkey};
    wr.remote_addr = dmr.addr + i * 4096;
    wr.rkey = dmr.rkey;
    ASSERT_TRUE(ca->sends.TryPush(wr));
  }
  t.a->Wake(0);
  auto sent = t.Collect(*t.cq_a, 16);
  ASSERT_EQ(sent.size(), 16u);
  EXPECT_THAT(sent, Each(Field(&core::Completion::status, core::WcStatus::kSuccess)));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);
  auto sb = t.b->Stats();
  // handoff_dropped may be non-zero when the owner is descheduled (a counted receive drop that
  // loss recovery repairs), so it is not asserted.
  auto sa = t.a->Stats();
  EXPECT_GT(sa[1].handoff_sent, 0u);  // B's ACKs, from B's worker 1, arrive at A's worker 1
  EXPECT_TRUE(t.a->DestroyConnection(4).ok());
  EXPECT_TRUE(t.b->DestroyConnection(5).ok());
}

// Wakes engine A and expects the one request pushed on connection 7 to complete as refused
// (LOC_PROT_ERR, with its own opcode), counted; then tears the connection down.
void ExpectRefusedWithLocProtErr(TwoEngines& t, uint64_t wr_id, core::WcOpcode opcode) {
  t.a->Wake(0);
  auto c = t.Collect(*t.cq_a, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, wr_id);
  EXPECT_EQ(c[0].status, core::WcStatus::kLocProtErr);
  EXPECT_EQ(c[0].opcode, opcode);
  EXPECT_EQ(t.a->Stats()[0].commands_refused, 1u);
  EXPECT_TRUE(t.a->DestroyConnection(7).ok());
  EXPECT_TRUE(t.b->DestroyConnection(7).ok());
}

// A request the core refuses completes with the ibverbs status, even unsignaled.
TEST(Engine_Refusal, BadLkeyCompletesWithLocProtErr) {
  TwoEngines t(1);
  auto [ca, cb] = t.Connect(7, 7);
  core::SendWorkRequest wr;
  wr.wr_id = 42;
  wr.flags = 0;
  wr.opcode = core::WrOpcode::kSend;
  wr.local = {0x1000, 16, 0xdeadbeef};
  ASSERT_TRUE(ca->sends.TryPush(wr));
  ExpectRefusedWithLocProtErr(t, 42, core::WcOpcode::kSend);
}

// The same for a receive: it completes as a receive, with the reason.
TEST(Engine_Refusal, ReceiveWithBadLkeyCompletesWithLocProtErr) {
  TwoEngines t(1);
  auto [ca, cb] = t.Connect(7, 7);
  core::RecvWorkRequest wr;
  wr.wr_id = 43;
  wr.local = {0x1000, 16, 0xdeadbeef};
  ASSERT_TRUE(ca->recvs.TryPush(wr));
  ExpectRefusedWithLocProtErr(t, 43, core::WcOpcode::kRecv);
}

TEST(Engine_Inline, OneShardDrivenByTheCallingThread) {
  TwoEngines t(0);
  EXPECT_TRUE(t.a->is_inline());
  EXPECT_EQ(t.a->workers(), 1);
  EXPECT_EQ(t.a->OwnerOf(7), 0);
  // Control calls run at once on the caller's thread: no worker thread exists to run them.
  const std::thread::id caller = std::this_thread::get_id();
  EXPECT_EQ(t.a->Call<std::thread::id>(0, [](Worker&) { return std::this_thread::get_id(); }),
            caller);
  EXPECT_FALSE(t.a->Poll());  // nothing to do
  auto before = t.a->Stats();
  ASSERT_EQ(before.size(), 1u);
  t.a->Poll();
  EXPECT_EQ(t.a->Stats()[0].loops, before[0].loops + 1);  // exactly one iteration per Poll
  EXPECT_EQ(t.a->Stats()[0].sleeps, 0u);
}

// A Write, then a Send each way, between two inline engines polled in turn by this one thread.
TEST(Engine_Inline, WriteAndSendRoundTripInOneThread) {
  TwoEngines t(0);
  std::vector<std::byte> abuf = Pattern(8192), bbuf(8192);
  const uint32_t rw = core::access::kLocalWrite | core::access::kRemoteWrite;
  auto amr = *t.a->RegisterMemory(abuf.data(), abuf.size(), rw);
  auto bmr = *t.b->RegisterMemory(bbuf.data(), bbuf.size(), rw);
  auto [ca, cb] = t.Connect(11, 12);

  core::SendWorkRequest w;
  w.wr_id = 1;
  w.opcode = core::WrOpcode::kWrite;
  w.flags = core::send_flags::kSignaled;
  w.local = {amr.addr, 3000, amr.lkey};  // three packets at mtu 1024
  w.remote_addr = bmr.addr;
  w.rkey = bmr.rkey;
  ASSERT_TRUE(ca->sends.TryPush(w));
  t.a->Wake(0);  // a no-op inline: the next Poll finds the request
  auto wc = t.Collect(*t.cq_a, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(wc[0].opcode, core::WcOpcode::kRdmaWrite);
  EXPECT_EQ(std::memcmp(abuf.data(), bbuf.data(), 3000), 0);

  // B answers with a Send of what it got into A's posted receive.
  core::RecvWorkRequest r;
  r.wr_id = 2;
  r.local = {amr.addr + 4096, 4096, amr.lkey};
  ASSERT_TRUE(ca->recvs.TryPush(r));
  core::SendWorkRequest s;
  s.wr_id = 3;
  s.opcode = core::WrOpcode::kSend;
  s.flags = core::send_flags::kSignaled;
  s.local = {bmr.addr, 3000, bmr.lkey};
  ASSERT_TRUE(cb->sends.TryPush(s));
  auto sent = t.Collect(*t.cq_b, 1);
  auto received = t.Collect(*t.cq_a, 1);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(sent[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(received[0].status, core::WcStatus::kSuccess);
  EXPECT_EQ(received[0].wr_id, 2u);
  EXPECT_EQ(received[0].byte_len, 3000u);
  EXPECT_EQ(std::memcmp(abuf.data(), abuf.data() + 4096, 3000), 0);
  EXPECT_TRUE(t.a->DestroyConnection(11).ok());
  EXPECT_TRUE(t.b->DestroyConnection(12).ok());
}

// A receive posted before a Send arrives matches it, even when both reach the engine in the same
// Poll: posted receives enter the core before that loop's packets (ibv_post_recv is effective
// at once), so the sender never meets receiver-not-ready.
TEST(Engine_Inline, ReceivePostedBeforeTheSendArrivesMatchesIt) {
  TwoEngines t(0);
  std::vector<std::byte> abuf(4096), bbuf(4096);
  const uint32_t rw = core::access::kLocalWrite | core::access::kRemoteWrite;
  auto amr = *t.a->RegisterMemory(abuf.data(), abuf.size(), rw);
  auto bmr = *t.b->RegisterMemory(bbuf.data(), bbuf.size(), rw);
  auto [ca, cb] = t.Connect(31, 32, std::chrono::milliseconds(500));
  core::RecvWorkRequest r;
  r.wr_id = 7;
  r.local = {bmr.addr, 4096, bmr.lkey};
  ASSERT_TRUE(cb->recvs.TryPush(r));  // B's engine has not polled since
  core::SendWorkRequest s;
  s.opcode = core::WrOpcode::kSend;
  s.local = {amr.addr, 100, amr.lkey};
  ASSERT_TRUE(ca->sends.TryPush(s));
  t.a->Poll();  // the Send is on B's wire before B takes the receive from its ring
  t.b->Poll();  // both in one loop
  auto got = t.Collect(*t.cq_b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 7u);
  EXPECT_EQ(got[0].status, core::WcStatus::kSuccess);
  auto snap = t.b->Snapshot(32);
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(snap->counters.rnr_naks_sent, 0u);
}

// Inline, the ACK of a received message waits for the application's next requests: an answer
// posted between two Polls leaves before that ACK.
TEST(Engine_Inline, AnswerLeavesBeforeTheAckOfTheRequest) {
  TwoEngines t(0);
  std::vector<std::byte> abuf(4096), bbuf(4096);
  const uint32_t rw = core::access::kLocalWrite | core::access::kRemoteWrite;
  auto amr = *t.a->RegisterMemory(abuf.data(), abuf.size(), rw);
  auto bmr = *t.b->RegisterMemory(bbuf.data(), bbuf.size(), rw);
  auto [ca, cb] = t.Connect(21, 22, std::chrono::milliseconds(500));
  core::SendWorkRequest ping;
  ping.opcode = core::WrOpcode::kWrite;
  ping.local = {amr.addr, 8, amr.lkey};
  ping.remote_addr = bmr.addr;
  ping.rkey = bmr.rkey;
  abuf[7] = std::byte{0x5a};
  ASSERT_TRUE(ca->sends.TryPush(ping));
  t.a->Poll();  // transmits the ping (one packet, ACK requested)
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (bbuf[7] != std::byte{0x5a} && std::chrono::steady_clock::now() < deadline) t.b->Poll();
  ASSERT_EQ(bbuf[7], std::byte{0x5a});
  EXPECT_THAT(t.sent_by_b, ::testing::IsEmpty());  // the ACK is held

  core::SendWorkRequest pong = ping;
  pong.local = {bmr.addr, 8, bmr.lkey};
  pong.remote_addr = amr.addr + 2048;
  pong.rkey = amr.rkey;
  ASSERT_TRUE(cb->sends.TryPush(pong));
  t.b->Poll();
  EXPECT_THAT(t.sent_by_b, ::testing::ElementsAre(wire::Opcode::kWrite, wire::Opcode::kAck));

  // A answers nothing: its next Polls release the ACK of the pong all the same.
  while (abuf[2048 + 7] != std::byte{0x5a} && std::chrono::steady_clock::now() < deadline) {
    t.a->Poll();
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  while (std::chrono::steady_clock::now() < until) t.PollBoth();
  for (auto [engine, id] : {std::pair{t.a.get(), 21u}, std::pair{t.b.get(), 22u}}) {
    auto snap = engine->Snapshot(id);
    ASSERT_TRUE(snap.ok());
    EXPECT_EQ(snap->outstanding_sends, 0u) << "connection " << id;  // acknowledged
  }
}

// ---- which connections a loop looks at (posted marks, lib/engine/doorbell.h) ----

uint64_t RingPolls(Engine& e) {
  uint64_t n = 0;
  for (const WorkerStats& w : e.Stats()) n += w.ring_polls;
  return n;
}

// A request the core refuses at once (an lkey no one registered): it completes without a packet.
core::SendWorkRequest Refused(uint64_t wr_id) {
  core::SendWorkRequest wr;
  wr.wr_id = wr_id;
  wr.flags = 0;
  wr.opcode = core::WrOpcode::kSend;
  wr.local = {0x1000, 16, 0xdeadbeef};
  return wr;
}

// Idle connections cost a loop nothing: only the connection posted to is looked at, once per
// ring per loop, however many the worker holds.
TEST(Engine_Marks, IdleConnectionsAreNotLookedAt) {
  TwoEngines t(0);
  constexpr uint32_t kIdle = 300;
  std::vector<std::shared_ptr<ConnectionChannel>> channels;
  for (uint32_t id = 1; id <= kIdle; ++id) channels.push_back(t.Connect(id, id).first);
  const WorkerStats before = t.a->Stats()[0];
  EXPECT_EQ(before.connections, kIdle);
  EXPECT_EQ(before.unmarked_connections, 0u);
  for (int i = 0; i < 1000; ++i) t.PollBoth();
  EXPECT_EQ(RingPolls(*t.a), before.ring_polls);  // the old loop: 2 x 300 x 1000 looks

  ASSERT_TRUE(channels[kIdle / 2]->sends.TryPush(Refused(77)));
  auto c = t.Collect(*t.cq_a, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 77u);
  EXPECT_EQ(c[0].status, core::WcStatus::kLocProtErr);
  // One loop took the mark and emptied the ring: its receive ring and its send ring, once each.
  EXPECT_EQ(RingPolls(*t.a) - before.ring_polls, 2u);
  for (uint32_t id = 1; id <= kIdle; ++id) {
    ASSERT_TRUE(t.a->DestroyConnection(id).ok());
    ASSERT_TRUE(t.b->DestroyConnection(id).ok());
  }
}

// A ring with more requests than one loop's budget (commands_per_loop, 256) is taken up again
// by the next loop without a new mark.
TEST(Engine_Marks, WorkBeyondTheBudgetContinuesWithoutANewMark) {
  TwoEngines t(0);
  auto [ca, cb] = t.Connect(5, 5, std::chrono::milliseconds(2), 1024);
  constexpr uint64_t kRequests = 600;
  for (uint64_t i = 0; i < kRequests; ++i) ASSERT_TRUE(ca->sends.TryPush(Refused(i)));
  const uint64_t polls = RingPolls(*t.a);
  for (uint64_t expected : {256u, 512u, 600u}) {
    t.a->Poll();
    EXPECT_EQ(t.a->Stats()[0].commands_refused, expected);
  }
  EXPECT_EQ(RingPolls(*t.a) - polls, 6u);
  t.a->Poll();
  EXPECT_EQ(RingPolls(*t.a) - polls, 6u);  // done: not looked at again
  auto c = t.Collect(*t.cq_a, kRequests);
  EXPECT_EQ(c.size(), kRequests);
  EXPECT_TRUE(t.a->DestroyConnection(5).ok());
  EXPECT_TRUE(t.b->DestroyConnection(5).ok());
}

// Requests the core has no room for stay in the ring and are retried by every loop until it
// has, without a new mark: here the core's send queue holds 4 and 12 are posted at once.
TEST(Engine_Marks, RequestsTheCoreHadNoRoomForGoInLater) {
  TwoEngines t(2);
  std::vector<std::byte> src = Pattern(12 * 1024), dst(12 * 1024);
  auto smr = *t.a->RegisterMemory(src.data(), src.size(), 0);
  auto dmr = *t.b->RegisterMemory(dst.data(), dst.size(),
                                  core::access::kLocalWrite | core::access::kRemoteWrite);
  auto [ca, cb] = t.Connect(6, 6, std::chrono::milliseconds(2), 16);
  ASSERT_EQ(ca->sends.capacity(), 16u);
  auto limited = std::make_shared<ConnectionChannel>(8, t.a->OwnerOf(8), 16, 16, 16, t.cq_a,
                                                     t.cq_a);
  // The same connection shape with a core send queue of 4 and a ring of 16.
  core::ConnectionConfig c8;
  c8.path_count = 4;
  c8.mtu = 1024;
  c8.no_progress_timeout = std::chrono::seconds(5);
  c8.max_transmissions = 255;
  c8.max_send_queue = 4;
  c8.local_conn_id = 8;
  c8.remote_conn_id = 8;
  c8.tx_token = 0x1111000000000000ull + 8;
  c8.rx_token = 0x2222000000000000ull + 8;
  core::ConnectionConfig c8b = c8;
  std::swap(c8b.tx_token, c8b.rx_token);
  c8b.port_base = 50000;
  // In this process: its posts mark the owner's own doorbell, as CreateConnection's do.
  Doorbell* own = t.a->Call<Doorbell*>(t.a->OwnerOf(8),
                                       [](Worker& w) { return &w.own_marks(); });
  ASSERT_TRUE(t.a->CreateConnectionOnChannel(c8, PeerRoute{{t.addr_b}}, limited,
                                             ObservePathEvents::kNo, own)
                  .ok());
  ASSERT_TRUE(t.b->CreateConnection(c8b, PeerRoute{{t.addr_a}}, t.cq_b, t.cq_b).ok());
  ASSERT_NE(limited->posted_slot(), Doorbell::kNoSlot);
  for (uint64_t i = 0; i < 12; ++i) {
    core::SendWorkRequest wr;
    wr.wr_id = i;
    wr.opcode = core::WrOpcode::kWrite;
    wr.flags = core::send_flags::kSignaled;
    wr.local = {smr.addr + i * 1024, 1024, smr.lkey};
    wr.remote_addr = dmr.addr + i * 1024;
    wr.rkey = dmr.rkey;
    ASSERT_TRUE(limited->sends.TryPush(wr));
  }
  t.a->Wake(limited->owner());
  auto sent = t.Collect(*t.cq_a, 12);
  ASSERT_EQ(sent.size(), 12u);
  EXPECT_THAT(sent, Each(Field(&core::Completion::status, core::WcStatus::kSuccess)));
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);
  for (uint32_t id : {6u, 8u}) {
    EXPECT_TRUE(t.a->DestroyConnection(id).ok());
    EXPECT_TRUE(t.b->DestroyConnection(id).ok());
  }
}

// Many threads post on many connections of two sleeping workers, in bursts: every request is
// seen (a lost mark or wake-up would leave one in its ring until the test times out).
TEST(Engine_Marks, ConcurrentPostersOnManyConnectionsLoseNothing) {
  TwoEngines t(2);
  constexpr int kThreads = 4;
  constexpr uint32_t kPerThread = 16;
  constexpr int kBursts = 50;
  std::vector<std::shared_ptr<CompletionChannel>> cqs;
  std::vector<std::vector<std::shared_ptr<ConnectionChannel>>> mine(kThreads);
  for (int th = 0; th < kThreads; ++th) {
    cqs.push_back(t.a->CreateCompletionChannel(1024));
    for (uint32_t i = 0; i < kPerThread; ++i) {
      const uint32_t id = 100 + th * kPerThread + i;
      core::ConnectionConfig c;
      c.path_count = 2;
      c.local_conn_id = id;
      c.remote_conn_id = id;
      auto ch = t.a->CreateConnection(c, PeerRoute{{t.addr_b}}, cqs[th], cqs[th]);
      ASSERT_TRUE(ch.ok()) << ch.status();
      mine[th].push_back(*ch);
    }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      uint64_t next = 0;
      core::Completion out[64];
      for (int burst = 0; burst < kBursts; ++burst) {
        // A few connections of ours, a request or two each, then wait for all of them.
        uint64_t posted = 0;
        for (uint32_t i = burst % 3; i < kPerThread; i += 3) {
          ConnectionChannel& ch = *mine[th][i];
          for (int k = 0; k <= burst % 2; ++k, ++posted) {
            if (!ch.sends.TryPush(Refused(next + posted))) {
              ++failures;
              return;
            }
          }
          t.a->Wake(ch.owner());
        }
        uint64_t got = 0;
        const auto deadline = std::chrono::steady_clock::now() + kTimeout;
        while (got < posted) {
          got += cqs[th]->Poll(out);
          if (std::chrono::steady_clock::now() > deadline) {
            ++failures;
            return;
          }
        }
        next += posted;
        if (burst % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (const auto& chans : mine) {
    for (const auto& ch : chans) EXPECT_TRUE(t.a->DestroyConnection(ch->conn_id()).ok());
  }
}

}  // namespace
}  // namespace metaroce::engine
