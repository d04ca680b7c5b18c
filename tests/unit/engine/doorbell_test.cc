// Doorbells: placement, RingDoorbell, and a worker woken through a doorbell in shared memory by
// another thread and by other processes (one that only rings, one that attaches a connection's
// channels and is served by the engine).
#include "lib/engine/doorbell.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/engine/engine.h"
#include "lib/io/memory_port.h"
#include "tests/unit/engine/shared_memory.h"

namespace metaroce::engine {
namespace {

using ::testing::HasSubstr;
using testing::GuardedMapping;
using testing::PageBytes;
using testing::RunInChild;
using testing::SealedMemfd;

constexpr auto kTimeout = std::chrono::seconds(10);

template <typename Predicate>
bool WaitFor(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

TEST(Doorbell_Place, RefusesBadMemoryAndForeignBytes) {
  constexpr size_t kBytes = sizeof(Doorbell);
  CacheAlignedBytes memory = AllocateCacheAligned(kBytes + 64);
  EXPECT_THAT(std::string(Doorbell::PlaceAt(memory.get() + 8, kBytes).status().message()),
              HasSubstr("aligned"));
  EXPECT_THAT(std::string(Doorbell::PlaceAt(memory.get(), kBytes - 1).status().message()),
              HasSubstr(absl::StrCat("needs ", kBytes, " bytes")));
  std::memset(memory.get(), 0xab, kBytes + 64);
  EXPECT_THAT(std::string(Doorbell::AttachAt(memory.get(), kBytes).status().message()),
              HasSubstr("no doorbell here"));
  auto placed = Doorbell::PlaceAt(memory.get(), kBytes);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ((*placed)->sleeping.load(), 0u);
  EXPECT_FALSE((*placed)->AnyPosted());  // the 0xab bytes are gone
  auto attached = Doorbell::AttachAt(memory.get(), kBytes);
  ASSERT_TRUE(attached.ok());
  EXPECT_EQ(*attached, *placed);
}

// Marks are taken once each, in slot order within a word; out-of-range slots mark nothing.
TEST(Doorbell_Marks, TakenOnceAndBounded) {
  Doorbell bell;
  std::vector<uint32_t> taken;
  auto take = [&] {
    taken.clear();
    bell.TakePosted([&](uint32_t slot) { taken.push_back(slot); });
    return taken;
  };
  EXPECT_THAT(take(), ::testing::IsEmpty());
  bell.MarkPosted(5);
  bell.MarkPosted(5);
  bell.MarkPosted(4095);
  bell.MarkPosted(64);
  bell.MarkPosted(Doorbell::kPostedSlots);  // outside: ignored
  bell.MarkPosted(Doorbell::kNoSlot);
  EXPECT_TRUE(bell.AnyPosted());
  EXPECT_THAT(take(), ::testing::UnorderedElementsAre(5u, 64u, 4095u));
  EXPECT_FALSE(bell.AnyPosted());
  EXPECT_THAT(take(), ::testing::IsEmpty());
  // Whatever another process writes, every slot reported is in range.
  bell.posted_summary.store(~uint64_t{0});
  for (auto& w : bell.posted) w.store(~uint64_t{0});
  EXPECT_EQ(take().size(), Doorbell::kPostedSlots);
  EXPECT_LT(*std::max_element(taken.begin(), taken.end()), Doorbell::kPostedSlots);
}

TEST(Doorbell_Ring, WritesTheFdOnlyWhenRaised) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  Doorbell bell;
  uint64_t count = 0;
  RingDoorbell(bell, fd);
  EXPECT_LT(read(fd, &count, sizeof(count)), 0);  // nothing written: EAGAIN
  bell.sleeping.store(1);
  RingDoorbell(bell, fd);
  RingDoorbell(bell, fd);
  ASSERT_EQ(read(fd, &count, sizeof(count)), ssize_t{sizeof(count)});
  EXPECT_EQ(count, 2u);
  close(fd);

  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sockets), 0);
  RingDoorbell(bell, sockets[1]);
  EXPECT_EQ(recv(sockets[0], &count, sizeof(count), MSG_DONTWAIT), ssize_t{sizeof(count)});
  close(sockets[0]);
  RingDoorbell(bell, sockets[1]);  // the reader is gone: EPIPE, and no SIGPIPE kills us
  close(sockets[1]);
}

// One worker whose only port goes to a MemoryPort nobody reads: threaded, or inline (workers 0:
// each Engine::Poll() is one loop).
class OneWorker {
 public:
  explicit OneWorker(int workers = 1) {
    io::MemoryPort::Options a, b;
    a.local_ip = io::IpAddress::V4(0xc6120001);
    b.local_ip = io::IpAddress::V4(0xc6120002);
    auto [pa, pb] = io::MemoryPort::CreatePair(a, b);
    peer_ = std::move(pb);
    EngineOptions o;
    o.workers = workers;
    o.idle = IdleStrategy::kPoll;
    o.spins_before_sleep = 16;
    auto factory = [port = std::shared_ptr<io::MemoryPort>(std::move(pa))](
                       int, int) mutable -> absl::StatusOr<std::unique_ptr<io::PacketPort>> {
      return std::unique_ptr<io::PacketPort>(
          new ForwardingPort(std::exchange(port, nullptr)));
    };
    auto e = Engine::Create(o, factory);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) engine = *std::move(e);
  }
  WorkerStats Stats() { return engine->Stats()[0]; }

 private:
  // Engine::Create takes ports through a copyable factory; this hands over the one port.
  class ForwardingPort : public io::PacketPort {
   public:
    explicit ForwardingPort(std::shared_ptr<io::MemoryPort> p) : p_(std::move(p)) {}
    bool Send(const io::TxPacket& x) override { return p_->Send(x); }
    void Flush() override { p_->Flush(); }
    size_t Receive(std::span<io::RxPacket> out) override { return p_->Receive(out); }
    void Release(std::span<const io::RxPacket> x) override { p_->Release(x); }
    int wait_fd() const override { return p_->wait_fd(); }
    io::PortStats stats() const override { return p_->stats(); }
    std::string description() const override { return p_->description(); }

   private:
    std::shared_ptr<io::MemoryPort> p_;
  };
  std::unique_ptr<io::MemoryPort> peer_;  // outlives the engine

 public:
  std::unique_ptr<Engine> engine;
};

// A doorbell in a memfd mapped twice: the daemon's view (given to the worker) and the
// application's.
class DoorbellShared : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(daemon_.data(), nullptr);
    ASSERT_NE(app_.data(), nullptr);
    auto placed = Doorbell::PlaceAt(daemon_.data(), PageBytes());
    ASSERT_TRUE(placed.ok());
    placed_ = *placed;
    auto attached = Doorbell::AttachAt(app_.data(), PageBytes());
    ASSERT_TRUE(attached.ok());
    attached_ = *attached;
    ASSERT_NE(w_.engine, nullptr);
    auto fd = w_.engine->AddDoorbell(0, placed_);
    ASSERT_TRUE(fd.ok()) << fd.status();
    app_fd_ = *fd;
  }
  void TearDown() override {
    if (app_fd_ >= 0) close(app_fd_);
    if (w_.engine != nullptr && placed_ != nullptr) {
      EXPECT_TRUE(w_.engine->RemoveDoorbell(0, placed_).ok());
    }
  }

  SealedMemfd memfd_{PageBytes()};
  GuardedMapping daemon_{memfd_.fd(), PageBytes()};
  GuardedMapping app_{memfd_.fd(), PageBytes()};
  OneWorker w_;
  Doorbell* placed_ = nullptr;
  Doorbell* attached_ = nullptr;
  int app_fd_ = -1;
};

TEST_F(DoorbellShared, AnotherThreadWakesTheSleepingWorker) {
  EXPECT_EQ(w_.Stats().doorbells, 1u);
  EXPECT_EQ(w_.engine->AddDoorbell(0, placed_).status().code(), absl::StatusCode::kAlreadyExists);
  std::thread application([&] {
    // Raised: the worker sleeps, or is about to; only a ring can wake it before its timeout.
    ASSERT_TRUE(WaitFor([&] { return attached_->sleeping.load() != 0; }));
    RingDoorbell(*attached_, app_fd_);
  });
  application.join();
  EXPECT_TRUE(WaitFor([&] { return w_.Stats().doorbell_wakeups >= 1; }));
}

TEST_F(DoorbellShared, ForkedProcessWakesTheSleepingWorker) {
  // The child only maps, reads and writes (the parent has threads: nothing that may allocate).
  const int status = RunInChild(
      std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout),
      [&] {
        GuardedMapping mapping(memfd_.fd(), PageBytes());
        if (mapping.data() == nullptr || mapping.data() == app_.data()) return 2;
        const auto* bell = reinterpret_cast<const Doorbell*>(mapping.data());
        if (bell->magic != Doorbell::kMagic) return 3;
        while (bell->sleeping.load() == 0) usleep(100);  // alarm() ends a hung child
        RingDoorbell(*bell, app_fd_);
        return 0;
      },
      [] {});
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(WaitFor([&] { return w_.Stats().doorbell_wakeups >= 1; }));
}

// An application that closes its end must not keep the worker awake (a hung-up socket is
// readable forever).
TEST_F(DoorbellShared, ClosedApplicationEndLetsTheWorkerSleep) {
  close(app_fd_);
  app_fd_ = -1;
  ASSERT_TRUE(WaitFor([&] { return placed_->sleeping.load() != 0; }));
  const uint64_t before = w_.Stats().sleeps;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Each sleep ends at the latest after 100 ms, or at a Stats() call; spinning would be thousands.
  EXPECT_LT(w_.Stats().sleeps - before, 20u);
}

TEST_F(DoorbellShared, RemoveDoorbellStopsRaisingIt) {
  ASSERT_TRUE(w_.engine->RemoveDoorbell(0, placed_).ok());
  EXPECT_EQ(w_.engine->RemoveDoorbell(0, placed_).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(w_.Stats().doorbells, 0u);
  placed_->sleeping.store(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the worker sleeps meanwhile
  EXPECT_EQ(placed_->sleeping.load(), 0u);
  RingDoorbell(*attached_, app_fd_);  // harmless
  placed_ = nullptr;                  // removed already
}

// ---- an application process served by the engine through shared memory ----

constexpr uint32_t kConnId = 9;
constexpr size_t kCqDepth = 16;
const ConnectionChannel::Depths kDepths{.send = 64, .recv = 16, .event = 16};
constexpr int kRounds = 20;
constexpr uint64_t kPerRound = 40;  // more than the completion ring holds: back-pressure

// The blocks in the memfd: completion channel, connection channel, doorbell.
struct Blocks {
  size_t cq_bytes = CompletionChannel::BytesFor(1, kCqDepth);
  size_t conn_offset = cq_bytes;
  size_t conn_bytes = ConnectionChannel::BytesFor(kDepths);
  size_t doorbell_offset = conn_offset + conn_bytes;
  size_t total = (doorbell_offset + sizeof(Doorbell) + PageBytes() - 1) / PageBytes() * PageBytes();
};

core::ConnectionConfig Config() {
  core::ConnectionConfig c;
  c.path_count = 2;
  c.mtu = 1024;
  c.local_conn_id = kConnId;
  c.remote_conn_id = 1;
  c.tx_token = 0x1111000000000001ull;
  c.rx_token = 0x2222000000000009ull;
  return c;
}

bool SendFd(int socket, int fd) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(socket, &msg, MSG_NOSIGNAL) == 1;
}

int ReceiveFd(int socket) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(socket, &msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

enum ChildStatus : int {
  kChildOk = 0,
  kChildNoFd = 10,
  kChildAttachFailed,
  kChildFull,
  kChildWrongCompletion,
  kChildTimeout,
};

// The application: receives its doorbell socket, attaches at its own mapping, and posts rounds of
// requests the core refuses (an unknown lkey), each after the worker went to sleep, checking
// every completion.
int ApplicationProcess(int memfd, int control_socket) {
  const Blocks b;
  const int bell_fd = ReceiveFd(control_socket);
  if (bell_fd < 0) return kChildNoFd;
  GuardedMapping m(memfd, b.total);
  auto cq = CompletionChannel::AttachAt({m.data(), b.cq_bytes}, 1, kCqDepth);
  auto conn = ConnectionChannel::AttachAt({m.data() + b.conn_offset, b.conn_bytes}, kDepths,
                                          kConnId, 0);
  auto bell = Doorbell::AttachAt(m.data() + b.doorbell_offset, sizeof(Doorbell));
  if (!cq.ok() || !conn.ok() || !bell.ok()) return kChildAttachFailed;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  core::Completion out[8];
  uint64_t next_expected = 0;
  for (int round = 0; round < kRounds; ++round) {
    while ((*bell)->sleeping.load() == 0) {
      if (std::chrono::steady_clock::now() > deadline) return kChildTimeout;
    }
    for (uint64_t i = 0; i < kPerRound; ++i) {
      core::SendWorkRequest wr;
      wr.wr_id = round * kPerRound + i;
      wr.flags = 0;  // unsignaled: a refusal completes all the same
      wr.opcode = core::WrOpcode::kSend;
      wr.local = {0x1000, 16, 0xdeadbeef};
      if (!(*conn)->sends.TryPush(wr)) return kChildFull;
    }
    RingDoorbell(**bell, bell_fd);
    while (next_expected < (round + 1) * kPerRound) {
      const size_t n = (*cq)->Poll(out);
      for (size_t i = 0; i < n; ++i) {
        if (out[i].wr_id != next_expected++ || out[i].status != core::WcStatus::kLocProtErr ||
            out[i].conn_id != kConnId) {
          return kChildWrongCompletion;
        }
      }
      if (std::chrono::steady_clock::now() > deadline) return kChildTimeout;
    }
  }
  close(bell_fd);
  return kChildOk;
}

TEST(Doorbell_Engine, ApplicationProcessIsServedThroughSharedChannelsAndItsDoorbell) {
  const Blocks b;
  SealedMemfd memfd(b.total);
  ASSERT_GE(memfd.fd(), 0);
  GuardedMapping daemon(memfd.fd(), b.total);
  ASSERT_NE(daemon.data(), nullptr);
  int control[2];  // the daemon's control socket, in miniature
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control), 0);

  // Forked before the engine starts its thread: the child may allocate.
  std::unique_ptr<OneWorker> w;
  Doorbell* bell = nullptr;
  const int status = RunInChild(
      std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout + std::chrono::seconds(5)),
      [&] { return ApplicationProcess(memfd.fd(), control[1]); },
      [&] {
        w = std::make_unique<OneWorker>();
        ASSERT_NE(w->engine, nullptr);
        auto cq = CompletionChannel::PlaceAt({daemon.data(), b.cq_bytes}, 1, kCqDepth);
        ASSERT_TRUE(cq.ok()) << cq.status();
        auto conn = ConnectionChannel::PlaceAt({daemon.data() + b.conn_offset, b.conn_bytes},
                                               kDepths, kConnId, 0, *cq, *cq);
        ASSERT_TRUE(conn.ok()) << conn.status();
        ASSERT_TRUE(w->engine
                        ->CreateConnectionOnChannel(
                            Config(), PeerRoute{{io::IpAddress::V4(0xc6120002)}}, *conn)
                        .ok());
        auto placed = Doorbell::PlaceAt(daemon.data() + b.doorbell_offset, sizeof(Doorbell));
        ASSERT_TRUE(placed.ok());
        bell = *placed;
        auto fd = w->engine->AddDoorbell(0, bell);
        ASSERT_TRUE(fd.ok()) << fd.status();
        EXPECT_TRUE(SendFd(control[0], *fd));
        close(*fd);
      });
  close(control[0]);
  close(control[1]);
  EXPECT_EQ(status, kChildOk);
  ASSERT_NE(w, nullptr);
  const WorkerStats stats = w->Stats();
  EXPECT_EQ(stats.commands_refused, kRounds * kPerRound);
  EXPECT_GE(stats.doorbell_wakeups, 1u);
  EXPECT_TRUE(w->engine->DestroyConnection(kConnId).ok());
  if (bell != nullptr) {
    EXPECT_TRUE(w->engine->RemoveDoorbell(0, bell).ok());
  }
}

TEST(Doorbell_Engine, CreateConnectionOnChannelChecksTheChannel) {
  OneWorker w;
  ASSERT_NE(w.engine, nullptr);
  auto cq = std::make_shared<CompletionChannel>(1, 8);
  auto two_worker_cq = std::make_shared<CompletionChannel>(2, 8);
  const PeerRoute route{{io::IpAddress::V4(0xc6120002)}};
  auto channel = [&](uint32_t id, std::shared_ptr<CompletionChannel> c) {
    return std::make_shared<ConnectionChannel>(id, 0, 8, 8, 8, c, c);
  };
  EXPECT_FALSE(w.engine->CreateConnectionOnChannel(Config(), route, nullptr).ok());
  EXPECT_THAT(std::string(w.engine->CreateConnectionOnChannel(Config(), route, channel(5, cq))
                              .message()),
              HasSubstr("channel is for connection 5"));
  EXPECT_THAT(std::string(w.engine
                              ->CreateConnectionOnChannel(Config(), route,
                                                          channel(kConnId, two_worker_cq))
                              .message()),
              HasSubstr("rings for 2 workers"));
  EXPECT_TRUE(w.engine->CreateConnectionOnChannel(Config(), route, channel(kConnId, cq)).ok());
  EXPECT_TRUE(w.engine->DestroyConnection(kConnId).ok());
}

// An application's doorbell in the worker's hands: a connection placed with it gets a slot
// there; the application's view of the channel, given that slot, marks it on every push; marks
// the application writes at will name only its own connections; a connection whose doorbell
// goes is looked at on every loop.
TEST(Doorbell_Marks, ApplicationMarksNameOnlyItsOwnConnections) {
  OneWorker w(/*workers=*/0);
  ASSERT_NE(w.engine, nullptr);
  Engine& e = *w.engine;
  const PeerRoute route{{io::IpAddress::V4(0xc6120002)}};
  auto polls = [&] { return e.Stats()[0].ring_polls; };

  // The application's doorbell and its connection's blocks, in "shared" memory.
  CacheAlignedBytes bell_memory = AllocateCacheAligned(sizeof(Doorbell));
  Doorbell* bell = *Doorbell::PlaceAt(bell_memory.get(), sizeof(Doorbell));
  const size_t cq_bytes = CompletionChannel::BytesFor(1, kCqDepth);
  const size_t conn_bytes = ConnectionChannel::BytesFor(kDepths);
  CacheAlignedBytes blocks = AllocateCacheAligned(cq_bytes + conn_bytes);
  auto cq = *CompletionChannel::PlaceAt({blocks.get(), cq_bytes}, 1, kCqDepth);
  auto placed = *ConnectionChannel::PlaceAt({blocks.get() + cq_bytes, conn_bytes}, kDepths,
                                            kConnId, 0, cq, cq);
  // Not attached yet: refused, naming why.
  EXPECT_THAT(std::string(e.CreateConnectionOnChannel(Config(), route, placed,
                                                      ObservePathEvents::kNo, bell)
                              .message()),
              HasSubstr("AddDoorbell first"));
  auto fd = e.AddDoorbell(0, bell);
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);
  ASSERT_TRUE(
      e.CreateConnectionOnChannel(Config(), route, placed, ObservePathEvents::kNo, bell).ok());
  EXPECT_EQ(placed->posted_slot(), 0u);
  // A connection of the daemon's own, marked in the worker's own doorbell, slot 0 there too.
  core::ConnectionConfig other = Config();
  other.local_conn_id = kConnId + 1;
  auto own_cq = e.CreateCompletionChannel(kCqDepth);
  auto own = e.CreateConnection(other, route, own_cq, own_cq);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)->posted_slot(), 0u);
  EXPECT_EQ(e.Stats()[0].unmarked_connections, 0u);

  // Every mark set: one look, at the application's one connection.
  uint64_t before = polls();
  bell->posted_summary.store(~uint64_t{0});
  for (auto& w : bell->posted) w.store(~uint64_t{0});
  e.Poll();
  EXPECT_EQ(polls() - before, 2u);  // its receive ring and its send ring
  e.Poll();
  EXPECT_EQ(polls() - before, 2u);  // the marks were taken

  // The application's view posts through its mark.
  auto app = ConnectionChannel::AttachAt({blocks.get() + cq_bytes, conn_bytes}, kDepths, kConnId,
                                         0);
  ASSERT_TRUE(app.ok()) << app.status();
  (*app)->SetPostedMark(bell, placed->posted_slot());
  core::SendWorkRequest wr;
  wr.wr_id = 5;
  wr.opcode = core::WrOpcode::kSend;
  wr.local = {0x1000, 16, 0xdeadbeef};
  ASSERT_TRUE((*app)->sends.TryPush(wr));
  before = polls();
  e.Poll();
  EXPECT_EQ(polls() - before, 2u);
  core::Completion c;
  ASSERT_EQ(cq->Poll(std::span<core::Completion>(&c, 1)), 1u);
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(c.status, core::WcStatus::kLocProtErr);

  // The doorbell goes: its connection is looked at on every loop, and still served.
  ASSERT_TRUE(e.RemoveDoorbell(0, bell).ok());
  EXPECT_EQ(placed->posted_slot(), Doorbell::kNoSlot);
  EXPECT_EQ(e.Stats()[0].unmarked_connections, 1u);
  (*app)->ClearPostedMark();  // the application learns it from the daemon
  wr.wr_id = 6;
  ASSERT_TRUE((*app)->sends.TryPush(wr));
  before = polls();
  e.Poll();
  e.Poll();
  EXPECT_EQ(polls() - before, 4u);
  ASSERT_EQ(cq->Poll(std::span<core::Completion>(&c, 1)), 1u);
  EXPECT_EQ(c.wr_id, 6u);
  EXPECT_TRUE(e.DestroyConnection(kConnId).ok());
  EXPECT_TRUE(e.DestroyConnection(kConnId + 1).ok());
  EXPECT_EQ(e.Stats()[0].unmarked_connections, 0u);
}

}  // namespace
}  // namespace metaroce::engine
