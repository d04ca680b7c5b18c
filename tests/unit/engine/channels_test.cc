#include "lib/engine/channels.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/engine/shared_memory.h"

namespace metaroce::engine {
namespace {

using ::testing::HasSubstr;
using testing::GuardedMapping;
using testing::PageBytes;
using testing::RunInChild;
using testing::SealedMemfd;

constexpr int kWorkers = 2;
constexpr size_t kCqDepth = 64;
constexpr uint32_t kConnId = 77;
constexpr int kOwner = 1;
const ConnectionChannel::Depths kDepths{.send = 256, .recv = 32, .event = 16};

// Where the tests put the blocks in one memfd: the completion channel, then the connection.
size_t CqBytes() { return CompletionChannel::BytesFor(kWorkers, kCqDepth); }
size_t ConnectionOffset() { return CqBytes(); }
size_t ConnectionBytes() { return ConnectionChannel::BytesFor(kDepths); }
size_t MemfdBytes() {
  const size_t page = PageBytes();
  return (ConnectionOffset() + ConnectionBytes() + page - 1) / page * page + page;  // + spare
}

TEST(CompletionChannel_Layout, OneAlignedRingPerWorker) {
  const CompletionChannel::Layout l = CompletionChannel::LayoutFor(3, 100);
  EXPECT_EQ(l.workers, 3);
  EXPECT_EQ(l.capacity, 128u);
  EXPECT_EQ(l.ring_bytes, SpscRing<core::Completion>::BytesFor(128));
  EXPECT_EQ(l.RingOffset(0), 0u);
  EXPECT_EQ(l.RingOffset(2), 2 * l.ring_bytes);
  EXPECT_EQ(l.total_bytes, 3 * l.ring_bytes);
  EXPECT_EQ(l.ring_bytes % kCacheLineBytes, 0u);
  EXPECT_EQ(CompletionChannel::BytesFor(3, 100), l.total_bytes);
}

TEST(ConnectionChannel_Layout, StateThenThreeAlignedRings) {
  const ConnectionChannel::Layout l = ConnectionChannel::LayoutFor({1000, 100, 3});
  EXPECT_EQ(l.send_capacity, 1024u);
  EXPECT_EQ(l.recv_capacity, 128u);
  EXPECT_EQ(l.event_capacity, 4u);
  EXPECT_EQ(l.state_offset, 0u);
  EXPECT_EQ(l.sends_offset, 64u);
  EXPECT_EQ(l.recvs_offset, l.sends_offset + SpscRing<core::SendWorkRequest>::BytesFor(1024));
  EXPECT_EQ(l.events_offset, l.recvs_offset + SpscRing<core::RecvWorkRequest>::BytesFor(128));
  EXPECT_EQ(l.total_bytes, l.events_offset + SpscRing<core::PathEvent>::BytesFor(4));
  for (size_t offset : {l.sends_offset, l.recvs_offset, l.events_offset, l.total_bytes}) {
    EXPECT_EQ(offset % kCacheLineBytes, 0u) << offset;
  }
}

TEST(CompletionChannel_Heap, PollTakesFromEveryWorkerRing) {
  CompletionChannel cq(kWorkers, 8);
  EXPECT_EQ(cq.workers(), kWorkers);
  EXPECT_EQ(cq.depth(), 8u);
  for (uint64_t i = 0; i < 4; ++i) {
    core::Completion c;
    c.wr_id = i;
    ASSERT_TRUE(cq.ring(static_cast<int>(i % 2)).TryPush(c));
  }
  std::array<core::Completion, 8> out;
  ASSERT_EQ(cq.Poll(out), 4u);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 4; ++i) ids.push_back(out[i].wr_id);
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre(0, 1, 2, 3));
}

TEST(ConnectionChannel_Heap, StateAndDroppedEvents) {
  auto cq = std::make_shared<CompletionChannel>(1, 4);
  ConnectionChannel ch(5, 0, 8, 8, 2, cq, cq);
  EXPECT_TRUE(ch.has_completion_channels());
  EXPECT_EQ(ch.sends.capacity(), 8u);
  EXPECT_EQ(ch.events.capacity(), 2u);
  EXPECT_FALSE(ch.state().error);
  ch.Publish({true, core::WcStatus::kRetryExcErr});
  EXPECT_TRUE(ch.state().error);
  EXPECT_EQ(ch.state().error_status, core::WcStatus::kRetryExcErr);
  ch.CountDroppedEvent();
  EXPECT_EQ(ch.events_dropped(), 1u);
}

TEST(Channels_PlaceAt, RefusesBadMemoryAndArguments) {
  CacheAlignedBytes memory = AllocateCacheAligned(64 * 1024);
  auto cq = std::make_shared<CompletionChannel>(1, 4);
  auto conn = [&](void* base, size_t bytes, int owner, std::shared_ptr<CompletionChannel> c) {
    return ConnectionChannel::PlaceAt({base, bytes}, kDepths, kConnId, owner, c, c).status();
  };
  EXPECT_THAT(std::string(conn(memory.get() + 16, 60000, 0, cq).message()), HasSubstr("aligned"));
  EXPECT_THAT(std::string(conn(memory.get(), ConnectionBytes() - 64, 0, cq).message()),
              HasSubstr("needs"));
  EXPECT_FALSE(conn(memory.get(), ConnectionBytes(), -1, cq).ok());
  EXPECT_FALSE(conn(memory.get(), ConnectionBytes(), 0, nullptr).ok());
  EXPECT_TRUE(conn(memory.get(), ConnectionBytes(), 0, cq).ok());

  EXPECT_FALSE(CompletionChannel::PlaceAt({memory.get(), 64 * 1024}, 0, 8).ok());
  EXPECT_FALSE(CompletionChannel::PlaceAt({memory.get(), 64 * 1024}, 257, 8).ok());
  EXPECT_THAT(
      std::string(CompletionChannel::PlaceAt({memory.get(), 100}, 1, 8).status().message()),
      HasSubstr("needs"));
  EXPECT_TRUE(CompletionChannel::PlaceAt({memory.get(), 64 * 1024}, 2, 8).ok());
}

// One memfd, two mappings at different addresses: the daemon's side (placed) and the
// application's (attached).
class ChannelsShared : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GE(memfd_.fd(), 0);
    ASSERT_NE(daemon_.data(), nullptr);
    ASSERT_NE(app_.data(), nullptr);
    auto cq = CompletionChannel::PlaceAt({daemon_.data(), CqBytes()}, kWorkers, kCqDepth);
    ASSERT_TRUE(cq.ok()) << cq.status();
    placed_cq_ = *cq;
    auto conn = ConnectionChannel::PlaceAt(
        {daemon_.data() + ConnectionOffset(), ConnectionBytes()}, kDepths, kConnId, kOwner,
        placed_cq_, placed_cq_);
    ASSERT_TRUE(conn.ok()) << conn.status();
    placed_ = *conn;
  }
  absl::StatusOr<std::shared_ptr<ConnectionChannel>> AttachConnection(
      const ConnectionChannel::Depths& depths = kDepths) {
    return ConnectionChannel::AttachAt(
        {app_.data() + ConnectionOffset(), MemfdBytes() - ConnectionOffset()}, depths, kConnId,
        kOwner);
  }
  std::byte* DaemonConnectionBlock() const { return daemon_.data() + ConnectionOffset(); }

  SealedMemfd memfd_{MemfdBytes()};
  GuardedMapping daemon_{memfd_.fd(), MemfdBytes()};
  GuardedMapping app_{memfd_.fd(), MemfdBytes()};
  std::shared_ptr<CompletionChannel> placed_cq_;
  std::shared_ptr<ConnectionChannel> placed_;
};

TEST_F(ChannelsShared, AttachedSideSeesWhatThePlacedSideWrites) {
  auto attached = AttachConnection();
  ASSERT_TRUE(attached.ok()) << attached.status();
  auto app_cq = CompletionChannel::AttachAt({app_.data(), CqBytes()}, kWorkers, kCqDepth);
  ASSERT_TRUE(app_cq.ok()) << app_cq.status();
  ConnectionChannel& app = **attached;
  EXPECT_FALSE(app.has_completion_channels());
  EXPECT_EQ(app.conn_id(), kConnId);
  EXPECT_EQ(app.owner(), kOwner);
  EXPECT_EQ(app.sends.capacity(), 256u);
  EXPECT_EQ(placed_->block(), DaemonConnectionBlock());
  EXPECT_EQ(app.block(), app_.data() + ConnectionOffset());

  core::SendWorkRequest s;
  s.wr_id = 11;
  s.rkey = 0xabc;
  ASSERT_TRUE(app.sends.TryPush(s));
  core::RecvWorkRequest r;
  r.wr_id = 12;
  ASSERT_TRUE(app.recvs.TryPush(r));
  ASSERT_NE(placed_->sends.Front(), nullptr);
  EXPECT_EQ(placed_->sends.Front()->rkey, 0xabcu);
  core::RecvWorkRequest got;
  ASSERT_TRUE(placed_->recvs.TryPop(got));
  EXPECT_EQ(got.wr_id, 12u);

  core::Completion c;
  c.wr_id = 11;
  ASSERT_TRUE(placed_->send_cq().ring(1).TryPush(c));
  std::array<core::Completion, 4> out;
  ASSERT_EQ((*app_cq)->Poll(out), 1u);
  EXPECT_EQ(out[0].wr_id, 11u);

  core::PathEvent e;
  e.path_id = 3;
  ASSERT_TRUE(placed_->events.TryPush(e));
  placed_->CountDroppedEvent();
  placed_->Publish({true, core::WcStatus::kWrFlushErr});
  core::PathEvent got_event;
  ASSERT_TRUE(app.events.TryPop(got_event));
  EXPECT_EQ(got_event.path_id, 3);
  EXPECT_EQ(app.events_dropped(), 1u);
  EXPECT_TRUE(app.state().error);
  EXPECT_EQ(app.state().error_status, core::WcStatus::kWrFlushErr);
}

TEST_F(ChannelsShared, AttachRefusesOtherDepthsAndDamagedBlocks) {
  auto other = AttachConnection({.send = 512, .recv = 32, .event = 16});
  EXPECT_FALSE(other.ok());  // the layout moves the later rings: their magic is not there
  auto fewer_events = AttachConnection({.send = 256, .recv = 32, .event = 8});
  EXPECT_THAT(std::string(fewer_events.status().message()), HasSubstr("event ring at offset"));
  auto more_events = AttachConnection({.send = 256, .recv = 32, .event = 32});
  EXPECT_THAT(std::string(more_events.status().message()), HasSubstr("the layout says 32"));
  EXPECT_FALSE(CompletionChannel::AttachAt({app_.data(), CqBytes()}, 3, kCqDepth).ok());

  auto* state = reinterpret_cast<ConnectionSharedState*>(DaemonConnectionBlock());
  state->magic = 0;
  EXPECT_THAT(std::string(AttachConnection().status().message()),
              HasSubstr("no connection channel here"));
  state->magic = ConnectionSharedState::kMagic;
  const ConnectionChannel::Layout layout = ConnectionChannel::LayoutFor(kDepths);
  auto* recvs = reinterpret_cast<SpscRingHeader*>(DaemonConnectionBlock() + layout.recvs_offset);
  recvs->element_bytes = 1;
  EXPECT_THAT(std::string(AttachConnection().status().message()),
              HasSubstr("receive ring at offset"));
  recvs->element_bytes = sizeof(core::RecvWorkRequest);
  EXPECT_TRUE(AttachConnection().ok());
}

TEST_F(ChannelsShared, KeepsTheMappingOwnerAlive) {
  auto owner = std::make_shared<int>(0);
  {
    auto ch = ConnectionChannel::AttachAt(
        {app_.data() + ConnectionOffset(), ConnectionBytes(), owner}, kDepths, kConnId, kOwner);
    ASSERT_TRUE(ch.ok());
    EXPECT_EQ(owner.use_count(), 2);
  }
  EXPECT_EQ(owner.use_count(), 1);
}

// ---- across processes ----

// What the application posts as request i, and what the "worker" answers.
core::SendWorkRequest RequestFor(uint64_t i) {
  core::SendWorkRequest wr;
  wr.wr_id = i;
  wr.opcode = static_cast<core::WrOpcode>(i % 4);
  wr.flags = static_cast<uint32_t>(i * 5);
  wr.local = {i * 3, static_cast<uint32_t>(i % 9000), static_cast<uint32_t>(i ^ 0x5a5a)};
  wr.remote_addr = ~i;
  wr.rkey = static_cast<uint32_t>(i * 7);
  wr.imm = static_cast<uint32_t>(i + 1);
  return wr;
}
bool SameRequest(const core::SendWorkRequest& a, const core::SendWorkRequest& b) {
  return a.wr_id == b.wr_id && a.opcode == b.opcode && a.flags == b.flags &&
         a.local.addr == b.local.addr && a.local.length == b.local.length &&
         a.local.lkey == b.local.lkey && a.remote_addr == b.remote_addr && a.rkey == b.rkey &&
         a.imm == b.imm;
}
core::Completion CompletionFor(uint64_t wr_id) {
  core::Completion c;
  c.wr_id = wr_id;
  c.status = wr_id % 5 == 0 ? core::WcStatus::kLocProtErr : core::WcStatus::kSuccess;
  c.opcode = wr_id % 2 == 0 ? core::WcOpcode::kRdmaWrite : core::WcOpcode::kSend;
  c.byte_len = static_cast<uint32_t>(wr_id % 9000);
  c.imm = static_cast<uint32_t>(wr_id * 3);
  c.has_imm = wr_id % 3 == 0;
  c.conn_id = kConnId;
  return c;
}
bool SameCompletion(const core::Completion& a, const core::Completion& b) {
  return a.wr_id == b.wr_id && a.status == b.status && a.opcode == b.opcode &&
         a.byte_len == b.byte_len && a.imm == b.imm && a.has_imm == b.has_imm &&
         a.conn_id == b.conn_id;
}

constexpr uint64_t kRequests = 200'000;
constexpr int kEventsPushed = 20;  // the event ring holds 16
constexpr auto kCrossProcessTimeout = std::chrono::seconds(30);

// Child exit statuses.
enum ChildStatus : int {
  kChildOk = 0,
  kChildMapFailed = 10,
  kChildAttachFailed,
  kChildWrongCompletion,
  kChildDuplicateCompletion,
  kChildOutOfOrder,
  kChildTimeout,
  kChildWrongState,
  kChildWrongEvents,
  kChildCouldResize,
};

// The application: attaches at its own mapping of the inherited memfd, posts kRequests send
// requests and checks every completion the "worker" (the parent) answers with.
int ApplicationProcess(int memfd) {
  if (ftruncate(memfd, 0) == 0) return kChildCouldResize;  // sealed: the daemon's memory is safe
  GuardedMapping mapping(memfd, MemfdBytes());
  if (mapping.data() == nullptr) return kChildMapFailed;
  auto conn = ConnectionChannel::AttachAt(
      {mapping.data() + ConnectionOffset(), ConnectionBytes()}, kDepths, kConnId, kOwner);
  auto cq = CompletionChannel::AttachAt({mapping.data(), CqBytes()}, kWorkers, kCqDepth);
  if (!conn.ok() || !cq.ok()) return kChildAttachFailed;
  std::vector<bool> seen(kRequests, false);
  uint64_t last_id[kWorkers] = {0, 0};
  bool any[kWorkers] = {false, false};
  uint64_t posted = 0, completed = 0;
  std::array<core::Completion, 48> out;
  const auto deadline = std::chrono::steady_clock::now() + kCrossProcessTimeout;
  while (completed < kRequests) {
    while (posted < kRequests && (*conn)->sends.TryPush(RequestFor(posted))) ++posted;
    const size_t n = (*cq)->Poll(out);
    for (size_t i = 0; i < n; ++i) {
      const core::Completion& c = out[i];
      if (c.wr_id >= kRequests || !SameCompletion(c, CompletionFor(c.wr_id))) {
        return kChildWrongCompletion;
      }
      if (seen[c.wr_id]) return kChildDuplicateCompletion;
      seen[c.wr_id] = true;
      const int ring = static_cast<int>(c.wr_id % kWorkers);  // the ring the worker used
      if (any[ring] && c.wr_id <= last_id[ring]) return kChildOutOfOrder;
      any[ring] = true;
      last_id[ring] = c.wr_id;
    }
    completed += n;
    if (std::chrono::steady_clock::now() > deadline) return kChildTimeout;
  }
  while (!(*conn)->state().error) {
    if (std::chrono::steady_clock::now() > deadline) return kChildTimeout;
  }
  if ((*conn)->state().error_status != core::WcStatus::kRetryExcErr) return kChildWrongState;
  int events = 0;
  core::PathEvent e;
  while ((*conn)->events.TryPop(e)) {
    if (e.path_id != events) return kChildWrongEvents;
    ++events;
  }
  if (events != 16 || (*conn)->events_dropped() != kEventsPushed - 16) return kChildWrongEvents;
  return kChildOk;
}

// The worker's side, in the parent: consumes every request (checking it), answers each on the
// completion ring of "worker" wr_id % 2, then publishes an error state and a few path events.
struct WorkerSideResult {
  uint64_t consumed = 0;
  uint64_t wrong = 0;
};
WorkerSideResult ServeApplication(ConnectionChannel& ch) {
  WorkerSideResult r;
  const auto deadline = std::chrono::steady_clock::now() + kCrossProcessTimeout;
  while (r.consumed < kRequests && std::chrono::steady_clock::now() < deadline) {
    const core::SendWorkRequest* front = ch.sends.Front();
    if (front == nullptr) continue;
    const core::SendWorkRequest wr = *front;  // copied before it is checked, as the worker does
    if (!SameRequest(wr, RequestFor(r.consumed))) ++r.wrong;
    // A full completion ring leaves the request in its ring (back-pressure), as the worker does.
    SpscRing<core::Completion>& ring = ch.send_cq().ring(static_cast<int>(wr.wr_id % kWorkers));
    if (!ring.TryPush(CompletionFor(wr.wr_id))) continue;
    ch.sends.PopFront();
    ++r.consumed;
  }
  for (int i = 0; i < kEventsPushed; ++i) {
    core::PathEvent e;
    e.path_id = static_cast<uint16_t>(i);
    if (!ch.events.TryPush(e)) ch.CountDroppedEvent();
  }
  ch.Publish({true, core::WcStatus::kRetryExcErr});
  return r;
}

TEST_F(ChannelsShared, ChildProcessPostsAndPollsThroughItsOwnMapping) {
  WorkerSideResult served;
  const int status =
      RunInChild(kCrossProcessTimeout + std::chrono::seconds(5),
                 [&] { return ApplicationProcess(memfd_.fd()); },
                 [&] { served = ServeApplication(*placed_); });
  EXPECT_EQ(status, kChildOk);
  EXPECT_EQ(served.consumed, kRequests);
  EXPECT_EQ(served.wrong, 0u);
}

}  // namespace
}  // namespace metaroce::engine
